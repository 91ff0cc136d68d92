"""Leader election over a ``coordination.k8s.io/v1`` Lease, as kube-scheduler's replicas elect.

Several ``korral k8s-shim`` replicas run; the one holding the Lease registers with Korral and
writes to Kubernetes, the others stand by with their informers synced (their books warm) and
write nothing. The Lease's spec is the election record: ``holderIdentity``,
``leaseDurationSeconds``, ``acquireTime``, ``renewTime``, ``leaseTransitions``.

- **Acquire** (``LeaderElector.try_acquire_or_renew``): a missing Lease is created with us as its
  holder; a Lease held by another is taken only once it has expired *by our own clock*: its
  record has not changed for ``leaseDurationSeconds`` since we last saw it change (the holder's
  timestamps are never compared with our clock). An empty ``holderIdentity`` (released) is free
  at once, and so is one held by an earlier process of this same instance (identity
  ``<pod name>_<unique>``: the pod's container was restarted, that process is gone; the pod name
  must be unique among live replicas, as a Deployment's are). Every write carries the
  ``resourceVersion`` read, so of two candidates one wins and the other gets 409 and tries again
  a retry period later.
- **Renew** (``keep``): the holder writes ``renewTime`` every retry period. If no renewal has
  succeeded for the renew deadline (measured from the start of the last one that did, on the
  monotonic clock), leadership is lost: ``on_lost`` is called, and the shim exits as kube-scheduler
  does, so the pod restarts as a standby.
- **Fence** (``holds``, ``FencedClient``, ``FencedSI``): before every write to Kubernetes and
  every message to Korral the shim asks whether it still holds the Lease by the same measure, so
  a leader that was frozen (SIGSTOP, a VM pause) past its renew deadline and wakes up writes
  nothing, binds nothing: the first write it tries calls ``on_lost`` instead. A standby's writes
  are refused the same way; its books' events are held (``StandbyEvents``) and those since the
  old leader was last seen alive are posted when it takes over.
- **Release** (``release``): on a clean stop the holder clears ``holderIdentity`` (lease duration
  1 s), so a standby takes over on its next try rather than a lease duration later.

Time is an input: ``clock`` (monotonic seconds, for expiry and the renew deadline), ``wall``
(epoch seconds, only for the timestamps written) and ``sleep`` are constructor arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

from k8s_shim.kube.kubeclient import JSON, ApiError, KubeClient, segment
from k8s_shim.writes.events import micro_time

__all__ = ["LeaseSettings", "LeaderElector", "FencedClient", "NotLeading", "LEASE_DURATION", "RENEW_DEADLINE",
           "RETRY_PERIOD", "JITTER", "RBAC", "add_flags", "settings_from",
           "Leadership", "FencedSI", "StandbyEvents", "exit_lost"]

log = logging.getLogger(__name__)

# what the election asks of the API server, as RBAC names it (deploy/kubernetes/k8s-shim/rbac.yaml's Role)
RBAC = frozenset({("coordination.k8s.io", "leases", "get"), ("coordination.k8s.io", "leases", "create"),
                  ("coordination.k8s.io", "leases", "update")})
# kube-scheduler's defaults (--leader-elect-lease-duration, -renew-deadline, -retry-period)
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0
JITTER = 1.2  # a candidate's tries are spread over [retry, retry * JITTER), as client-go's


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Which Lease, who we are, and the election's timing (seconds)."""

    name: str
    namespace: str
    identity: str
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD
    instance: str = ""  # the pod's name: identity is ``instance_<unique>``

    def earlier_self(self, holder: str) -> bool:
        """Whether ``holder`` is an earlier process of this same instance (pod): its container was
        restarted, so that process is gone and its lease need not be waited out."""
        return (bool(self.instance) and holder != self.identity and holder.startswith(self.instance + "_")
                and "_" not in holder[len(self.instance) + 1:])

    def __post_init__(self) -> None:
        if not self.name or not self.namespace or not self.identity:
            raise ValueError("leader election needs a lease name, a namespace and an identity")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(f"--leader-elect-lease-duration ({self.lease_duration:g}s) must be greater than "
                             f"--leader-elect-renew-deadline ({self.renew_deadline:g}s)")
        if not self.renew_deadline > JITTER * self.retry_period:
            raise ValueError(f"--leader-elect-renew-deadline ({self.renew_deadline:g}s) must be greater than "
                             f"{JITTER:g} x --leader-elect-retry-period ({self.retry_period:g}s)")
        if self.retry_period <= 0:
            raise ValueError("--leader-elect-retry-period must be positive")

    @property
    def path(self) -> str:
        return (f"/apis/coordination.k8s.io/v1/namespaces/{segment(self.namespace)}/leases/"
                f"{segment(self.name)}")

    @property
    def where(self) -> str:
        return f"lease {self.namespace}/{self.name}"


class LeaderElector:
    def __init__(self, client: KubeClient, settings: LeaseSettings, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, sleep=asyncio.sleep,
                 jitter: Callable[[], float] = random.random) -> None:
        self.client, self.settings = client, settings
        self.clock, self.wall, self.sleep, self.jitter = clock, wall, sleep, jitter
        self.observed: dict[str, Any] | None = None  # the Lease's spec as last read or written
        self.observed_at = 0.0  # clock() when ``observed`` last changed
        self.resource_version = ""
        self.renewed_at: float | None = None  # clock() at the start of our last successful write as holder
        self.led = False  # we have held the Lease at some point (a write refused now means it was lost)
        # when we took the Lease: clock() when the previous holder was last seen alive (its record
        # last changed), -inf when there was none
        self.previous_seen_at = float("-inf")

    # ------------------------------------------------------------------ the record
    @property
    def holder(self) -> str:
        return (self.observed or {}).get("holderIdentity") or ""

    def holds(self) -> bool:
        """We are the holder and renewed within the renew deadline (monotonic clock): writes may go."""
        return (self.renewed_at is not None and self.holder == self.settings.identity
                and self.clock() - self.renewed_at < self.settings.renew_deadline)

    def _observe(self, spec: dict[str, Any], rv: str, at: float) -> None:
        if spec != self.observed:
            self.observed, self.observed_at = spec, at
        self.resource_version = rv

    def _expired(self, at: float) -> bool:
        """Whether the holder (another) has let the lease lapse, by our clock since its record last changed."""
        duration = (self.observed or {}).get("leaseDurationSeconds") or self.settings.lease_duration
        return at >= self.observed_at + float(duration)

    def _record(self, now_wall: float) -> dict[str, Any]:
        """The spec we write as holder: acquireTime and leaseTransitions kept while we hold it."""
        old = self.observed or {}
        ours = old.get("holderIdentity") == self.settings.identity
        stamp = micro_time(now_wall)
        return {"holderIdentity": self.settings.identity,
                "leaseDurationSeconds": max(1, round(self.settings.lease_duration)),
                "acquireTime": old.get("acquireTime") if ours and old.get("acquireTime") else stamp,
                "renewTime": stamp,
                "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if ours or not old else 1)}

    # ------------------------------------------------------------------ one try
    async def try_acquire_or_renew(self) -> bool:
        """Read the Lease and, if it is ours or free (missing, released or expired), write
        ourselves in as holder. True when we hold it now; False otherwise (someone else holds it,
        another candidate won the race with a 409, or the API server did not answer)."""
        s = self.settings
        start, now_wall = self.clock(), self.wall()
        timeout = s.renew_deadline
        try:
            lease = await self.client.request("GET", s.path, timeout=timeout)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("%s: cannot read it: %s", s.where, exc)
                return False
            return await self._create(start, now_wall)
        meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
        self._observe(spec, meta.get("resourceVersion", ""), start)
        if self.holder and self.holder != s.identity and not self._expired(start):
            if not s.earlier_self(self.holder):
                return False
            log.info("%s is held by %s, an earlier process of this instance: taken over at once", s.where,
                     self.holder)
        record = self._record(now_wall)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**meta, "resourceVersion": self.resource_version}, "spec": {**spec, **record}}
        try:
            answer = await self.client.request("PUT", s.path, body=body, timeout=timeout)
        except ApiError as exc:
            if exc.status == 409:
                log.info("%s: another replica wrote it first; trying again later", s.where)
            else:
                log.warning("%s: cannot write it: %s", s.where, exc)
            return False
        return self._won(answer, start)

    async def _create(self, start: float, now_wall: float) -> bool:
        s = self.settings
        self.observed = None
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace}, "spec": self._record(now_wall)}
        try:
            answer = await self.client.request(
                "POST", f"/apis/coordination.k8s.io/v1/namespaces/{segment(s.namespace)}/leases", body=body,
                timeout=s.renew_deadline)
        except ApiError as exc:
            if exc.status == 409:
                log.info("%s: another replica created it first", s.where)
            elif exc.status == 404:
                log.error("%s cannot be made: namespace %s does not exist (create it, or name another with "
                          "--leader-elect-resource-namespace)", s.where, s.namespace)
            else:
                log.warning("%s: cannot create it: %s", s.where, exc)
            return False
        return self._won(answer, start)

    def _won(self, answer: dict[str, Any], start: float) -> bool:
        if not self.led or self.renewed_at is None:  # taken, not renewed
            self.previous_seen_at = self.observed_at if self.observed is not None else float("-inf")
        self._observe(answer.get("spec") or {}, (answer.get("metadata") or {}).get("resourceVersion", ""), start)
        self.observed_at = start
        self.renewed_at = start
        self.led = True
        return True

    # ------------------------------------------------------------------ the loops
    async def acquire(self, stop: asyncio.Event, standing_by: Callable[[], None] = lambda: None) -> bool:
        """Try every retry period (jittered) until we hold the Lease (True) or ``stop`` is set
        (False); ``standing_by`` is called after each try that did not win."""
        s = self.settings
        told = ""
        while not stop.is_set():
            if await self.try_acquire_or_renew():
                log.info("%s acquired by %s (transitions %s)", s.where, s.identity,
                         (self.observed or {}).get("leaseTransitions", 0))
                return True
            if self.holder and self.holder != told:
                told = self.holder
                log.info("%s is held by %s: standing by", s.where, self.holder)
            standing_by()
            try:
                await asyncio.wait_for(stop.wait(), s.retry_period * (1 + (JITTER - 1) * self.jitter()))
            except asyncio.TimeoutError:
                pass
        return False

    async def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renew every retry period while we hold the Lease; once no renewal has succeeded within
        the renew deadline, call ``on_lost`` with why, and return."""
        s = self.settings
        while True:
            await self.sleep(s.retry_period)
            if not self.holds():  # frozen past the deadline, or the last tries failed
                break
            left = s.renew_deadline - (self.clock() - self.renewed_at)
            try:
                renewed = await asyncio.wait_for(self.try_acquire_or_renew(), left)
            except asyncio.TimeoutError:
                renewed = False
            if not renewed and self.holder not in ("", s.identity):
                break  # someone else holds it already
        why = (f"{s.where}: taken over by {self.holder}" if self.holder not in ("", s.identity)
               else f"{s.where}: not renewed within the renew deadline ({s.renew_deadline:g}s)")
        self.renewed_at = None
        on_lost(why)

    async def release(self) -> bool:
        """On a clean stop: clear ``holderIdentity`` (if we still hold the Lease) so that a standby
        takes over at once. True when released."""
        s = self.settings
        if not self.holds():
            return False
        stamp = micro_time(self.wall())
        old = self.observed or {}
        spec = {**old, "holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp}
        spec = {k: v for k, v in spec.items() if v is not None}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace, "resourceVersion": self.resource_version},
                "spec": spec}
        self.renewed_at = None
        try:
            await self.client.request("PUT", s.path, body=body, timeout=s.renew_deadline)
        except ApiError as exc:
            log.warning("%s: not released: %s", s.where, exc)
            return False
        log.info("%s released by %s", s.where, s.identity)
        return True


class NotLeading(ApiError):
    """A write a replica that does not hold the Lease did not send."""

    def __init__(self, method: str, path: str, why: str) -> None:
        super().__init__(method, path, 403, "NotLeader", why)


class FencedClient(KubeClient):
    """The client the shim writes through under leader election: reads and watches pass, every
    other request goes only while ``holds()``. A standby's writes are refused (``NotLeading``)
    without reaching the server; a leader that has lost the Lease calls ``on_lost`` (which stops
    the process) and sends nothing. The connection pool is the client's it wraps."""

    def __init__(self, inner: KubeClient, holds: Callable[[], bool], led: Callable[[], bool],
                 on_lost: Callable[[str], None]) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self._holds, self._led, self._on_lost = holds, led, on_lost
        self.withheld = 0  # writes not sent

    @property
    def pool(self):  # type: ignore[override]
        return self.inner.pool

    def set_rate(self, qps: float, burst: int) -> None:  # the wrapped client's rate limit is the one used
        self.inner.set_rate(qps, burst)

    def counters(self) -> dict[str, int]:
        return self.inner.counters()

    @pool.setter
    def pool(self, value) -> None:
        pass  # the inner client owns the pool

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _may(self, method: str, path: str) -> NotLeading | None:
        if method in ("GET", "HEAD") or self._holds():
            return None
        self.withheld += 1
        where = path.split("?", 1)[0]
        if self._led():
            why = f"{method} {where} not sent: this replica no longer holds the lease"
            self._on_lost(why)
            return NotLeading(method, where, why)
        return NotLeading(method, where, f"{method} {where} not sent: this replica is a standby")

    async def send(self, method: str, path: str, data: bytes | None = None, content_type: str = JSON,
                   timeout: float = 30.0, event: bool = False) -> bytes:
        refused = self._may(method, path)
        if refused is not None:
            raise refused
        return await self.inner.send(method, path, data, content_type, timeout, event)

    def submit(self, method: str, path: str, data: bytes | None, content_type: str,
               done: Callable[[ApiError | None], None], event: bool = False) -> None:
        refused = self._may(method, path)
        if refused is not None:
            if not self._led():
                done(refused)
            return  # lost: no answer either; the process is stopping
        self.inner.submit(method, path, data, content_type, done, event)


class FencedSI:
    """The scheduler client as the shim's outbox sees it under leader election: what goes to
    Korral (applications, nodes, allocations) goes only while the Lease is held, so a leader that
    woke up after losing it tells Korral nothing either."""

    def __init__(self, api, may: Callable[[str], bool]) -> None:
        self._api, self._may = api, may

    def __getattr__(self, name: str):
        return getattr(self._api, name)

    def update_application(self, request) -> None:
        if self._may("ApplicationRequest to Korral"):
            self._api.update_application(request)

    def update_node(self, request) -> None:
        if self._may("NodeRequest to Korral"):
            self._api.update_node(request)

    def update_allocation(self, request) -> None:
        if self._may("AllocationRequest to Korral"):
            self._api.update_allocation(request)


class StandbyEvents:
    """The event recorder a standby's books post to. Nothing is posted: the leader posts the same
    events. The last ``keep`` seconds of them are held (at most ``cap``), so that the replica that
    takes over posts those that came after the old leader was last seen alive (``replay``): a pod
    created while no one led still gets its events."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, keep: float = 60.0, cap: int = 100_000) -> None:
        self.clock, self.keep, self.cap = clock, keep, cap
        self.held: collections.deque[tuple[float, tuple, dict]] = collections.deque()

    def post(self, *args, **kwargs) -> None:
        now = self.clock()
        held = self.held
        held.append((now, args, kwargs))
        while held and (held[0][0] < now - self.keep or len(held) > self.cap):
            held.popleft()

    def counters(self) -> dict[str, int]:
        return {}

    def replay(self, into, since: float) -> int:
        """Post to ``into`` the events held since ``since`` (clock time), in order; how many."""
        count = 0
        for at, args, kwargs in self.held:
            if at >= since:
                into.post(*args, **kwargs)
                count += 1
        self.held.clear()
        return count


def exit_lost(why: str) -> None:
    """kube-scheduler's answer to a lost lease: stop at once (no write, no clean-up that could
    write), so that the pod restarts as a standby."""
    log.error("k8s-shim: leadership lost (%s); exiting so that the pod restarts as a standby", why)
    logging.shutdown()
    os._exit(1)


class Leadership:
    """One replica's part in the election: the elector, the fenced clients it writes through, and
    what to do when the Lease is lost (``on_lost``, once)."""

    def __init__(self, client: KubeClient, settings: LeaseSettings,
                 on_lost: Callable[[str], None] = exit_lost, **elector) -> None:
        self.settings = settings
        self.elector = LeaderElector(client, settings, **elector)
        self.client = FencedClient(client, self.elector.holds, lambda: self.elector.led, self.lost)
        self._on_lost = on_lost
        self.gone = False
        self.leading = False
        # what a takeover may have to post: from the old leader's last sign of life to now
        self.standby_events = StandbyEvents(self.elector.clock,
                                            keep=settings.lease_duration + 3 * JITTER * settings.retry_period + 10)

    def lost(self, why: str) -> None:
        if not self.gone:
            self.gone = True
            self._on_lost(why)

    def may_send(self, what: str) -> bool:
        if self.elector.holds():
            return True
        if self.elector.led:
            self.lost(f"{what} not sent: this replica no longer holds the lease")
        return False

    def fenced_si(self, api) -> FencedSI:
        return FencedSI(api, self.may_send)

    async def try_now(self, tasks: list[asyncio.Task]) -> bool:
        """One try for the Lease (before the cluster is read: a replica that leads at once posts
        its books' events from the start); True when leading."""
        if not self.leading and await self.elector.try_acquire_or_renew():
            log.info("%s acquired by %s", self.settings.where, self.settings.identity)
            self._leading(tasks)
        return self.leading

    async def lead(self, stop: asyncio.Event, tasks: list[asyncio.Task],
                   standing_by: Callable[[], None] = lambda: None) -> bool:
        """Wait until this replica holds the Lease (True at once if it does) or ``stop`` (False);
        once it does, the renewals run as one of ``tasks``."""
        if self.leading:
            return True
        if not await self.elector.acquire(stop, standing_by):
            return False
        self._leading(tasks)
        return True

    def _leading(self, tasks: list[asyncio.Task]) -> None:
        self.leading = True
        tasks.append(asyncio.create_task(self.elector.keep(self.lost), name="lease renewal"))

    def took_over(self, events) -> int:
        """Post the events the standby held since the previous leader was last seen alive."""
        return self.standby_events.replay(events, self.elector.previous_seen_at)

    async def release(self) -> None:
        if not self.gone:
            await self.elector.release()


# ---------------------------------------------------------------------- flags (kube-scheduler's names)
def add_flags(parser) -> None:
    """``--leader-elect`` and its settings, named and defaulted as kube-scheduler's."""
    parser.add_argument("--leader-elect", type=_flag_bool, nargs="?", const=True, default=True, metavar="BOOL",
                        help="run as one of several replicas: the one holding a coordination.k8s.io/v1 Lease "
                             "schedules, the others stand by with their informers synced (default true, as "
                             "kube-scheduler; --leader-elect=false for a single replica that needs no Lease)")
    parser.add_argument("--leader-elect-lease-duration", type=_duration, default=LEASE_DURATION, metavar="D",
                        help="how long a standby waits, after it last saw the Lease change, before taking it over "
                             "(default 15s)")
    parser.add_argument("--leader-elect-renew-deadline", type=_duration, default=RENEW_DEADLINE, metavar="D",
                        help="how long the leader keeps leading without renewing the Lease; past it, it stops "
                             "writing and exits (default 10s)")
    parser.add_argument("--leader-elect-retry-period", type=_duration, default=RETRY_PERIOD, metavar="D",
                        help="how often the leader renews and a standby tries to take over (default 2s)")
    parser.add_argument("--leader-elect-resource-name", default="", metavar="NAME",
                        help="the Lease's name (default: the scheduler name, yunikorn)")
    parser.add_argument("--leader-elect-resource-namespace", default="", metavar="NS",
                        help="the Lease's namespace (default: --namespace, the shim's own)")


def settings_from(args, namespace: str, instance: str, suffix: str) -> LeaseSettings:
    """The Lease settings of the parsed flags; identity ``instance_suffix`` as kube-scheduler's
    (the pod's or host's name, then a part unique to the process). ``ValueError`` names the flag
    that is wrong."""
    return LeaseSettings(args.leader_elect_resource_name or args.scheduler_name,
                         args.leader_elect_resource_namespace or namespace, f"{instance}_{suffix}",
                         args.leader_elect_lease_duration, args.leader_elect_renew_deadline,
                         args.leader_elect_retry_period, instance)


def _flag_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "t", "yes"):
        return True
    if value in ("false", "0", "f", "no"):
        return False
    raise ValueError(f"{text!r} is not true or false")


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def _duration(text: str) -> float:
    """A Go-style duration (``15s``, ``500ms``, ``1m``) or plain seconds, above 0 and at most an hour."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (say 15s, 500ms or 1m)")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: above 0 and at most 1h")
    return seconds
