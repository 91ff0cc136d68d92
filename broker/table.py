"""The broker's routing table: who owns which partition. A plain class, no sockets.

Every method takes ``now`` (monotonic seconds) and returns the envelopes to send
as ``(destination identity, Envelope)`` pairs; the socket loop in ``broker.main``
does the sending. Epochs come from an injected ``next_epoch(rm_id, partition)``
(Redis ``INCR`` in production), so two brokers or a test can run in one process.

A wanted partition (one an RM registered) is in one of three states:

- **owned**: ``owners`` names its worker and epoch (``loaded`` once the worker has built it);
- **awaiting**: registered, re-registered or added by a config update and not assigned since;
  the next idle worker takes it with a new epoch;
- **orphaned** (neither): it lost its worker, or a restarted broker learned of it from an
  rmproxy. Its state is gone with the worker, so only the RM's re-registration (which the
  rmproxy asks for at once) makes it awaiting again: one recovery, one new epoch. A worker
  re-announcing it after a broker restart adopts it in its old epoch.

Epochs come from Redis, which may be unreachable: ``next_epoch`` then raises
``EpochUnavailable``. No partition changes owner without a new epoch, and nothing else the table
does waits for one: a partition that cannot get one stays awaiting (the next registration, worker
or heartbeat turn tries again), a registration that cannot is answered UNROUTABLE at once, and
what the same call had to say otherwise (a lost partition, a release) still goes out.

A worker that cannot load a partition it was given (it cannot reach Redis, say) loses it to
another idle worker that has not failed it since the RM registered; only when none is left is
the failure reported to the rmproxy (whose RM's registration fails with the worker's words).

Routing reads only an envelope's header and its request id (``Envelope`` or ``RawEnvelope``,
the same fields): a routed envelope goes out as it came in, its body never decoded, except
to quote it back in an UNROUTABLE answer.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable

from common.envelope import Envelope, EnvelopeError, Kind, RawEnvelope
from common.heartbeat import EXPIRY
from common.messages import (Heartbeat, PartitionLoaded, PartitionLost, PartitionOwned, ProxyHello,
                             Unroutable, WorkerReady)

__all__ = ["RoutingTable", "WorkerInfo", "Ownership", "ProxyInfo", "PartitionKey", "Routed", "Send",
           "MAX_ASKERS", "EpochUnavailable"]

log = logging.getLogger("korral.broker")

MAX_ASKERS = 10_000  # outstanding queries remembered
_ASKED = {Kind.QUERY, Kind.CONFIG_UPDATE, Kind.PARTITION_REMOVE}
_ANSWERS = {Kind.QUERY_RESULT, Kind.CONFIG_RESULT}

PartitionKey = tuple[str, str]  # (rm_id, partition short name)


class EpochUnavailable(Exception):
    """``next_epoch`` could not give an epoch (Redis unreachable); the message says why."""


Routed = Envelope | RawEnvelope  # routed traffic arrives undecoded (RawEnvelope) from the broker loop
Send = tuple[bytes, Routed]


@dataclass(slots=True)
class WorkerInfo:
    identity: bytes
    name: str
    host: str = ""
    pid: int = 0
    pin: PartitionKey | None = None
    expires_at: float = 0.0
    owns: PartitionKey | None = None


@dataclass(slots=True)
class Ownership:
    worker: bytes
    epoch: int
    loaded: bool = False
    error: str | None = None


@dataclass(slots=True)
class ProxyInfo:
    identity: bytes
    name: str = ""
    host: str = ""
    pid: int = 0
    expires_at: float = 0.0
    rms: set[str] = field(default_factory=set)
    rm_states: dict[str, dict] = field(default_factory=dict)  # rmID -> {"state", "partitions"}


class RoutingTable:
    def __init__(self, next_epoch: Callable[[str, str, int], int], expiry: float = EXPIRY) -> None:
        self._next_epoch = next_epoch  # (rm_id, partition, floor) -> an epoch greater than floor
        self.expiry = expiry
        self.workers: dict[bytes, WorkerInfo] = {}
        self.proxies: dict[bytes, ProxyInfo] = {}
        self.owners: dict[PartitionKey, Ownership] = {}
        self.wanted: dict[str, list[str]] = {}  # rm_id -> partitions it registered
        self.rm_proxy: dict[str, bytes] = {}
        self.last_epoch: dict[PartitionKey, int] = {}  # survives an owner's death, so epochs never repeat
        # registered (or re-registered, or added) and not assigned since: a worker re-announcing
        # one of these holds pre-registration state, so it gets a fresh assignment, not adoption
        self.awaiting: set[PartitionKey] = set()
        self.lost: dict[PartitionKey, str] = {}  # orphaned partitions: why their owner went away
        # workers that could not load a partition since its RM last registered (not given it again)
        self.failed_loads: dict[PartitionKey, set[bytes]] = {}
        self.changed = True  # ownership or membership changed since the last STATUS push
        self.bad_frames = 0
        # outcomes of a worker that does not own their partition (any more), dropped: kind -> count
        self.stale_outcomes: collections.Counter[str] = collections.Counter()
        self.routed = 0
        self.queue_depth = 0  # frames waiting on a socket at the last loop turn (read in one go)
        # request id -> the rmproxy that asked (queries, config updates): the answer goes back to
        # it, which need not be the rmproxy holding the RM. Bounded: unanswered ids age out.
        self.askers: collections.OrderedDict[int, bytes] = collections.OrderedDict()

    # -- membership ---------------------------------------------------------------

    def worker_ready(self, identity: bytes, body: WorkerReady | dict, now: float) -> list[Send]:
        hello = WorkerReady.decode(body)
        old = self.workers.get(identity)
        worker = self.workers[identity] = WorkerInfo(
            identity=identity, name=hello.name, host=hello.host, pid=hello.pid, pin=hello.pin,
            expires_at=now + self.expiry, owns=old.owns if old else None)
        sends: list[Send] = []
        if worker.owns is None and hello.owns is not None:  # re-announced after a broker restart
            rm_id, partition, epoch = hello.owns
            sends += self._adopt(worker, (rm_id, partition), epoch)
        return sends + self._assign_awaiting()

    def _adopt(self, worker: WorkerInfo, key: PartitionKey, epoch: int) -> list[Send]:
        own = self.owners.get(key)
        if own is not None and own.worker != worker.identity:  # given to another worker meanwhile
            return [(worker.identity, Envelope(Kind.PARTITION_RELEASE, key[0], key[1], epoch))]
        self.last_epoch[key] = max(epoch, self.last_epoch.get(key, 0))
        if key in self.awaiting:  # the RM re-registered since: its state must start empty
            try:
                return [self._assign(key, worker.identity)]
            except EpochUnavailable:  # its old state is no use either: it waits, the worker is idle
                return [(worker.identity, Envelope(Kind.PARTITION_RELEASE, key[0], key[1], epoch))]
        self.owners[key] = Ownership(worker.identity, epoch, loaded=True)
        self.lost.pop(key, None)
        self.changed = True
        worker.owns = key
        if key[1] not in self.wanted.setdefault(key[0], []):
            self.wanted[key[0]].append(key[1])
        return []

    def proxy_hello(self, identity: bytes, body: ProxyHello | dict, now: float) -> list[Send]:
        hello = ProxyHello.decode(body)
        info = self.proxies.setdefault(identity, ProxyInfo(identity))
        info.name = info.name if hello.name is None else hello.name
        info.host = info.host if hello.host is None else hello.host
        info.pid = info.pid if hello.pid is None else hello.pid
        info.expires_at = now + self.expiry
        self.changed = True
        for rm_id, wants in hello.rms.items():
            info.rms.add(rm_id)
            self.rm_proxy[rm_id] = identity
            if wants is not None and rm_id not in self.wanted:
                # the broker restarted: learn what the RM wants; its partitions stay orphaned
                # until their workers re-announce them or the RM re-registers (the rmproxy asks)
                self.wanted[rm_id] = list(wants)
        return []

    def proxy_report(self, identity: bytes, body: Heartbeat | dict) -> None:
        """An rmproxy's heartbeat carries the connection state of its RMs, for `korral status`."""
        rms = Heartbeat.decode(body).rms
        info = self.proxies.get(identity)
        if info is not None and rms is not None and rms != info.rm_states:
            info.rm_states = dict(rms)
            self.changed = True

    def alive(self, identity: bytes, now: float) -> bool:
        """Note a sign of life; False if the peer is unknown (it must announce itself)."""
        peer = self.workers.get(identity) or self.proxies.get(identity)
        if peer is None:
            return False
        peer.expires_at = now + self.expiry
        return True

    # -- registration and ownership -----------------------------------------------

    def rm_register(self, proxy: bytes, rm_id: str, partitions: Iterable[str], now: float) -> list[Send]:
        """(Re-)register an RM: every partition gets a new epoch; owned ones reload in place."""
        self.proxy_hello(proxy, ProxyHello(rms={rm_id: None}), now)  # who holds it; its wants follow
        wanted = list(dict.fromkeys(partitions))
        for other in self.proxies.values():  # the RM is Running from now on: status need not
            other.rm_states.pop(rm_id, None)  # wait for the rmproxy's next heartbeat to say so
        self.proxies[proxy].rm_states[rm_id] = {"state": "Running", "partitions": wanted}
        sends: list[Send] = []
        for old in self.wanted.get(rm_id, []):
            if old not in wanted:
                self._forget((rm_id, old))
                sends += self._release((rm_id, old))
        self.wanted[rm_id] = wanted
        unavailable: list[str] = []
        for p in wanted:
            key = (rm_id, p)
            self.lost.pop(key, None)
            self.failed_loads.pop(key, None)
            own = self.owners.get(key)
            if own is not None and own.worker in self.workers:
                try:
                    sends.append(self._assign(key, own.worker))
                except EpochUnavailable as exc:  # it keeps its old epoch; the RM registers again
                    unavailable.append(f"[{rm_id}]{p} ({exc})")
            else:
                self.awaiting.add(key)
        sends += self._assign_awaiting(unavailable)
        mine = [u for u in unavailable if u.startswith(f"[{rm_id}]")]
        if mine:  # the rmproxy fails the registration now instead of waiting for owners in vain
            reason = f"the broker could not take a new epoch from Redis for {', '.join(mine)}"
            sends.append((proxy, Envelope(Kind.UNROUTABLE, rm_id, body=Unroutable(
                reason, Kind.RM_REGISTER.value, None).wire())))
        return sends

    def rm_partitions(self, rm_id: str, partitions: Iterable[str]) -> list[Send]:
        """A config update changed the RM's partitions: release removed ones, assign added ones."""
        wanted = list(dict.fromkeys(partitions))
        sends: list[Send] = []
        for old in self.wanted.get(rm_id, []):
            if old not in wanted:
                self._forget((rm_id, old))
                sends += self._release((rm_id, old))
        for p in wanted:
            if (rm_id, p) not in self.owners and (rm_id, p) not in self.lost:
                self.awaiting.add((rm_id, p))  # added by the update (a lost one waits for its RM)
        self.wanted[rm_id] = wanted
        self.changed = True
        return sends + self._assign_awaiting()

    def rm_unregister(self, rm_id: str) -> list[Send]:
        sends: list[Send] = []
        for p in self.wanted.pop(rm_id, []):
            self._forget((rm_id, p))
            sends += self._release((rm_id, p))
        self.rm_proxy.pop(rm_id, None)
        for info in self.proxies.values():
            info.rm_states.pop(rm_id, None)
        self.changed = True
        return sends + self._assign_awaiting()

    def _forget(self, key: PartitionKey) -> None:
        self.awaiting.discard(key)
        self.lost.pop(key, None)

    def partition_loaded(self, worker: bytes, env: Envelope) -> list[Send]:
        key = (env.rm_id, env.partition)
        own = self.owners.get(key)
        if own is None or own.worker != worker or own.epoch != env.epoch:
            return []  # a stale answer to an assignment that was superseded
        error = PartitionLoaded.decode(env.body).error
        if error is not None:
            moved = self._load_elsewhere(key, worker, error)
            if moved:
                return moved
        else:
            self.failed_loads.pop(key, None)
        own.loaded = error is None
        own.error = error
        self.changed = True
        return self._to_proxy(
            env.rm_id,
            Envelope(Kind.PARTITION_OWNED, env.rm_id, env.partition, env.epoch, 0,
                     PartitionOwned(self.workers[worker].name, error).wire()),
        )

    def _load_elsewhere(self, key: PartitionKey, failed: bytes, error: str) -> list[Send]:
        """Give a partition its worker could not load to another idle worker that has not failed
        it since the RM registered; [] when there is none (or no epoch for it)."""
        tried = self.failed_loads.setdefault(key, set())
        tried.add(failed)
        idle = self._idle_for(key, exclude=tried)
        if idle is None:
            return []
        try:
            send = self._assign(key, idle.identity)
        except EpochUnavailable:
            return []
        self.workers[failed].owns = None
        log.warning("[%s]%s: %s; giving it to worker %s", key[0], key[1], error, idle.name)
        return [send]

    def _idle_for(self, key: PartitionKey, exclude: set[bytes] = frozenset()) -> WorkerInfo | None:
        """The idle worker that takes ``key`` next: pinned to it first, then by name."""
        idle = [w for w in self.workers.values()
                if w.owns is None and w.pin in (None, key) and w.identity not in exclude]
        return min(idle, key=lambda w: (w.pin is None, w.name), default=None)

    def _assign(self, key: PartitionKey, worker: bytes) -> Send:
        epoch = self._next_epoch(key[0], key[1], self.last_epoch.get(key, 0))
        self.last_epoch[key] = epoch
        self.awaiting.discard(key)
        self.lost.pop(key, None)
        self.changed = True
        self.owners[key] = Ownership(worker, epoch)
        self.workers[worker].owns = key
        return worker, Envelope(Kind.PARTITION_ASSIGN, key[0], key[1], epoch)

    def _release(self, key: PartitionKey) -> list[Send]:
        own = self.owners.pop(key, None)
        if own is None or own.worker not in self.workers:
            return []
        self.changed = True
        self.workers[own.worker].owns = None
        return [(own.worker, Envelope(Kind.PARTITION_RELEASE, key[0], key[1], own.epoch))]

    def unowned(self) -> list[PartitionKey]:
        return [(rm, p) for rm, ps in self.wanted.items() for p in ps if (rm, p) not in self.owners]

    def _assign_awaiting(self, unavailable: list[str] | None = None) -> list[Send]:
        """Give each awaiting partition (in registration order) to an idle worker, pinned first.
        One that cannot get an epoch stays awaiting (named in ``unavailable``, with why)."""
        sends: list[Send] = []
        for key in self.unowned():
            if key not in self.awaiting:
                continue
            idle = self._idle_for(key)
            if idle is None:
                continue
            try:
                sends.append(self._assign(key, idle.identity))
            except EpochUnavailable as exc:
                log.error("[%s]%s waits for a worker: no new epoch from Redis: %s", key[0], key[1], exc)
                if unavailable is not None:
                    unavailable.append(f"[{key[0]}]{key[1]} ({exc})")
        return sends

    # -- routing ------------------------------------------------------------------

    def route(self, proxy: bytes, env: Routed) -> list[Send]:
        """Forward an envelope from an rmproxy to the partition's owner (unchanged)."""
        if env.kind in _ASKED:
            self._remember_asker(env.request_id, proxy)
        else:
            self.rm_proxy.setdefault(env.rm_id, proxy)
        own = self.owners.get((env.rm_id, env.partition))
        if own is None or own.worker not in self.workers:
            try:
                body = env.decoded().body  # the rmproxy answers the request from it
            except EnvelopeError as exc:
                self.bad_frames += 1
                log.warning("dropped %s from rmproxy %r: %s", env.kind, proxy, exc)
                return []
            reason = (f"partition [{env.rm_id}]{env.partition} has no worker: "
                      "start more workers (korral up --workers N, or korral worker on another host)")
            return [(proxy, Envelope(Kind.UNROUTABLE, env.rm_id, env.partition, env.epoch, env.seq,
                                     Unroutable(reason, env.kind.value, body).wire()))]
        self.routed += 1
        return [(own.worker, env)]

    def to_proxy(self, worker: bytes, env: Routed) -> list[Send]:
        """Forward an outcome from a worker to the rmproxy holding the RM's streams (an answer:
        to the rmproxy that asked)."""
        own = self.owners.get((env.rm_id, env.partition))
        if own is None or own.worker != worker:
            self.stale_outcomes[env.kind.value] += 1  # the worker lost this partition: stale
            return []
        self.routed += 1
        if env.kind in _ANSWERS and env.request_id is not None:
            asker = self.askers.pop(env.request_id, None)
            if asker is not None and asker in self.proxies:
                return [(asker, env)]
        return self._to_proxy(env.rm_id, env)

    def _remember_asker(self, qid: int | None, proxy: bytes) -> None:
        if qid is not None:
            self.askers[qid] = proxy
            while len(self.askers) > MAX_ASKERS:
                self.askers.popitem(last=False)

    def _to_proxy(self, rm_id: str, env: Routed) -> list[Send]:
        proxy = self.rm_proxy.get(rm_id)
        return [(proxy, env)] if proxy is not None else []

    # -- liveness -----------------------------------------------------------------

    def purge(self, now: float) -> list[Send]:
        """Drop peers whose heartbeats stopped; their partitions go to idle workers."""
        sends: list[Send] = []
        for ident in [i for i, w in self.workers.items() if w.expires_at <= now]:
            sends += self.worker_gone(ident, "worker missed its heartbeats")
        for ident in [i for i, p in self.proxies.items() if p.expires_at <= now]:
            self.proxy_gone(ident)
        return sends

    def proxy_gone(self, identity: bytes) -> None:
        if self.proxies.pop(identity, None) is not None:
            self.changed = True
        for rm_id in [r for r, p in self.rm_proxy.items() if p == identity]:
            del self.rm_proxy[rm_id]

    def worker_gone(self, identity: bytes, reason: str) -> list[Send]:
        """A worker died: its partition is orphaned (its state died with it) and the rmproxy
        holding the RM is told, naming the lost epoch; the RM's re-registration assigns it again."""
        worker = self.workers.pop(identity, None)
        if worker is None:
            return []
        self.changed = True
        sends: list[Send] = []
        if worker.owns is not None:
            key = worker.owns
            own = self.owners.pop(key, None)
            epoch = own.epoch if own is not None else self.last_epoch.get(key, 0)
            why = f"its worker {worker.name} is gone ({reason})"
            if key[1] in self.wanted.get(key[0], []):
                self.lost[key] = f"epoch {epoch} lost: {why}"
            log.warning("[%s]%s epoch %d lost: %s", key[0], key[1], epoch, why)
            sends += self._to_proxy(key[0], Envelope(Kind.PARTITION_LOST, key[0], key[1], epoch,
                                                     body=PartitionLost(why, worker.name).wire()))
        return sends + self._assign_awaiting()

    def heartbeats(self, now: float = 0.0) -> list[Send]:
        return [(w, Envelope(Kind.HEARTBEAT)) for w in self.workers] + self.status_push(now)

    def status_push(self, now: float = 0.0) -> list[Send]:
        """STATUS to every rmproxy (each heartbeat, and at the end of any loop turn that changed
        ownership or membership, so no rmproxy's view lags a change by a heartbeat)."""
        self.changed = False
        status = self.status(now)
        return [(p, Envelope(Kind.STATUS, body=status)) for p in self.proxies]

    def _partition_state(self, key: PartitionKey) -> str:
        own = self.owners.get(key)
        if own is not None:
            return "owned" if own.loaded else ("failed" if own.error else "loading")
        if key in self.awaiting:
            return "awaiting a worker"
        return f"waiting for RM {key[0]} to re-register ({self.lost.get(key, 'learned after a broker restart')})"

    def status(self, now: float = 0.0) -> dict:
        return {
            "workers": [
                {"name": w.name, "host": w.host, "pid": w.pid,
                 "heartbeatAge": round(max(0.0, now - (w.expires_at - self.expiry)), 3),
                 "partition": f"{w.owns[0]}/{w.owns[1]}" if w.owns else None,
                 "epoch": self.owners[w.owns].epoch if w.owns in self.owners else None,
                 "pin": f"{w.pin[0]}/{w.pin[1]}" if w.pin else None}
                for w in self.workers.values()
            ],
            "partitions": [
                {"rmID": rm, "partition": p,
                 "worker": self.workers[self.owners[(rm, p)].worker].name if (rm, p) in self.owners else None,
                 "epoch": self.owners[(rm, p)].epoch if (rm, p) in self.owners else None,
                 "loaded": self.owners[(rm, p)].loaded if (rm, p) in self.owners else False,
                 "lastEpoch": self.last_epoch.get((rm, p)), "state": self._partition_state((rm, p))}
                for rm, ps in self.wanted.items() for p in ps
            ],
            "proxies": len(self.proxies),
            "rmproxies": [
                {"name": p.name, "host": p.host, "pid": p.pid,
                 "heartbeatAge": round(max(0.0, now - (p.expires_at - self.expiry)), 3),
                 "rms": p.rm_states}
                for p in self.proxies.values()
            ],
            "routed": self.routed,
            "badFrames": self.bad_frames,
            "staleOutcomes": dict(self.stale_outcomes),
            "queueDepth": self.queue_depth,
            "replyToAsker": True,  # answers to queries go to the rmproxy that asked
        }
