"""Kubernetes events (events.k8s.io/v1) with YuniKorn's reasons, posted in the background.

``EventRecorder.post(regarding, type, reason, note)`` queues an event about a pod, node or
configmap and returns at once; while ``run()`` runs, they are posted with at most ``senders``
requests in flight (each a request with a callback, ``KubeClient.submit_event``: no task per
event). The queue of events waiting for a sender is bounded (``capacity``): when the API server
cannot keep up, events are dropped and counted (as client-go's broadcaster drops them), never the
scheduling, the least useful first: a routine notice (``Normal``) that finds the queue full is
dropped, a ``Warning`` takes the place of the oldest ``Normal`` waiting (dropped instead), and
is dropped only when every event waiting is a Warning. ``counters()`` has the counts, the drops
by reason too (in the shim's state dump as ``events``, and logged on SIGUSR1 and when the shim
stops), and the drops are logged as they happen (the 1st, 10th, 100th, every 1,000th). Events
wait for their token of the client's rate limit behind every other write (bindings first:
``KubeClient.submit_event``). An event the server refuses is logged, not retried (a throttled
one is sent again by the client). Notes are cut to the 1,024 characters the server accepts.

The reasons are YuniKorn's shim's (``REASONS``), so tooling that watches for them keeps working.
Two things keep a busy cluster's API server for the pods rather than for their events:

- **Series**, as client-go's events recorder makes them: an event isomorphic to one posted
  within the last six minutes (the same object, reason, action and reporting controller) is not
  posted again; the first event's ``series`` (``count``, ``lastObservedTime``) is patched instead,
  every ``series_interval`` seconds while it grows. Events that happen once per pod (``ONCE``)
  are not tracked.
- **Folding** a pod's routine notices (``settle`` seconds, 0 turns it off): an event posted with
  ``hold`` waits that long (at most ``EXPIRE_TICK``, 50 ms, more: held events falling due
  together are sent together, not with a timer each) before it is sent; a later event of the same object may ``supersede``
  it (it is dropped: the later one says more) or ``fold_into`` it (the later one is dropped and
  the held one sent at once: it said enough). Any other event of the object sends what is held
  first, so the order stays. The shim holds a pod's "queued" notice (superseded by
  ``Scheduled``) and its ``Scheduled`` (into which ``PodBindSuccessful`` folds when the binding is
  written within the window): a pod placed and bound at once gets one event, ``Scheduled``,
  where YuniKorn posts three; a pod that waits or whose binding is slow gets each of them, with
  the time it happened.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass
from functools import lru_cache

import orjson

from k8s_shim.kube.kubeclient import ApiError, KubeClient

__all__ = ["EventRecorder", "Regarding", "NORMAL", "WARNING", "REASONS", "ONCE", "micro_time"]

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
MAX_NOTE = 1024
CLUSTER_SCOPED_NAMESPACE = "default"  # where client-go puts events about cluster-scoped objects
SERIES_WINDOW = 360.0  # client-go's: an isomorphic event within 6 minutes joins the series
SERIES_LIMIT = 20_000  # series tracked at most (the oldest are forgotten first)
# events waiting at most (~1.5 KB each): 16 s of 1,000 pods/s's routine notices, which wait behind
# the bindings for the rate limit's tokens while pods come faster than it leaves room for both
CAPACITY = 16_384
EXPIRE_TICK = 0.05  # held events are sent at most this much after their window passed

# YuniKorn's shim's reasons (reason == action), and what each says
REASONS = {
    "Scheduling": "the pod is queued (or waits for scheduling gates), or its metadata is inconsistent",
    "Scheduled": "the scheduler placed the pod on a node",
    "PodBindSuccessful": "the binding to the node was written",
    "PodBindFailure": "the API server refused the binding",
    "FailedScheduling": "the pod cannot be asked for: a field is invalid, or it has constraints Korral does not evaluate",
    "PodUnschedulable": "the pod waits for resources (or is skipped: queue quota)",
    "TaskRejected": "the scheduler rejected the pod's request",
    "TaskCompleted": "the pod ended; its allocation was released",
    "ApplicationFailed": "the application was rejected or failed; its pending pods fail",
    "Preempted": "the scheduler released the pod's allocation to make room for another",
    "Informational": "an event of the scheduler about the pod or node",
    "GangScheduling": "a gang's progress (the action says which: CreatingPlaceholders, PlaceholderAllocated, "
                      "GangReservationComplete, PlaceholderTimeOut, GangSchedulingFailed, PlaceholderCreateFailed, "
                      "TaskGroupMatch, TaskGroupsError, TaskGroupNotFound, SchedulingPolicyParametersError)",
    "NodeAccepted": "the scheduler registered the node",
    "NodeRejected": "the scheduler refused the node",
    "NodeDeleted": "the node was removed from the scheduler",
    # Korral's own (partitions per node pool: k8s_shim.pools)
    "NodePartitionChanged": "the node's partition label changed: it left its partition",
    "NodePartitionPending": "the node waits for pods of another partition running on it to end before it is registered",
    "ConfigRejected": "a configmap could not be applied: the previous configuration stays",
    "ConfigKept": "a setting that is not reloadable changed: the running value stays until a restart",
}
ONCE = frozenset({"Scheduled", "PodBindSuccessful", "TaskCompleted", "NodeAccepted", "NodeDeleted"})


@dataclass(frozen=True, slots=True)
class Regarding:
    kind: str  # Pod, Node, ConfigMap, Namespace
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    def as_json(self) -> dict:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@lru_cache(maxsize=64)
def _second(whole: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))


def micro_time(seconds: float) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    whole = int(seconds)
    return f"{_second(whole)}.{int((seconds - whole) * 1e6):06d}Z"


@dataclass(slots=True)
class _Held:
    at: float
    regarding: Regarding
    type: str
    reason: str
    note: str
    action: str = ""


@dataclass(slots=True)
class _Series:
    namespace: str
    name: str  # of the event that started it
    first: float
    last: float
    count: int = 1
    patched: int = 1  # the count the server has


class EventRecorder:
    def __init__(self, client: KubeClient, controller: str, instance: str, *, capacity: int = CAPACITY,
                 senders: int = 8, clock=time.time, settle: float = 0.0, series_interval: float = 10.0) -> None:
        self.client, self.controller, self.instance = client, controller, instance
        # events waiting for a sender, ``(namespace, event)``, oldest first; at most ``capacity``
        self.queue: collections.deque[tuple[str, dict]] = collections.deque()
        self.capacity = capacity
        self.senders = senders
        self._sending = 0  # requests in flight
        self._running = False  # run() runs: events are sent
        self.clock = clock
        self.settle = settle
        self._tick = min(EXPIRE_TICK, settle)
        self.series_interval = series_interval
        self.posted = self.dropped = self.refused = 0
        self.dropped_by: collections.Counter[str] = collections.Counter()  # reason -> events dropped
        self.folded = 0  # held events not sent: a later event of the same object said more, or they said enough
        self.repeats = 0  # events counted in a series instead of posted
        self._serial = 0
        self._held: dict[Regarding, list[_Held]] = {}
        self._due: collections.deque[tuple[float, Regarding]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._series: collections.OrderedDict[tuple, _Series] = collections.OrderedDict()
        self._grown: set[tuple] = set()  # series whose count the server does not have yet
        self._finished: list[_Series] = []  # series left behind whose count the server does not have yet

    def counters(self) -> dict[str, int]:
        """Events posted, dropped (and ``dropped.<Reason>`` for each reason dropped), refused, folded,
        counted in series."""
        return {"posted": self.posted, "dropped": self.dropped, "refused": self.refused, "folded": self.folded,
                "inSeries": self.repeats, **{f"dropped.{r}": n for r, n in sorted(self.dropped_by.items())}}

    def post(self, regarding: Regarding, type_: str, reason: str, note: str, *, hold: bool = False,
             supersedes: tuple[str, ...] = (), fold_into: tuple[str, ...] = (), action: str = "") -> None:
        """Queue an event (see module doc for ``hold``, ``supersedes`` and ``fold_into``); dropped
        (and counted) when the queue is full. ``action`` is the reason unless given (YuniKorn's
        ``GangScheduling`` events name what happened there)."""
        now = self.clock()
        held = self._held.get(regarding)
        if held is not None:
            if fold_into and any(h.reason in fold_into for h in held):
                self.folded += 1
                self._release(regarding)
                return
            if supersedes:
                kept = [h for h in held if h.reason not in supersedes]
                self.folded += len(held) - len(kept)
                held[:] = kept
            if not hold:
                self._release(regarding)
        if hold and self.settle > 0:
            self._held.setdefault(regarding, []).append(_Held(now, regarding, type_, reason, note, action))
            self._due.append((now + self.settle, regarding))
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self.settle, self._expire)
            return
        self._emit(now, regarding, type_, reason, note, action)

    def _release(self, regarding: Regarding) -> None:
        for h in self._held.pop(regarding, ()):
            self._emit(h.at, h.regarding, h.type, h.reason, h.note, h.action)

    def _expire(self) -> None:
        """Send the held events whose window has passed."""
        self._timer = None
        now = self.clock()
        due = self._due
        while due and due[0][0] <= now:
            _, regarding = due.popleft()
            held = self._held.get(regarding)
            if not held:
                continue
            while held and held[0].at + self.settle <= now:
                h = held.pop(0)
                self._emit(h.at, h.regarding, h.type, h.reason, h.note, h.action)
            if not held:
                del self._held[regarding]
        if due:  # not a wake-up per pod: what falls due within a tick is sent together
            self._timer = asyncio.get_running_loop().call_later(max(due[0][0] - now, self._tick), self._expire)

    def _emit(self, at: float, regarding: Regarding, type_: str, reason: str, note: str, action: str = "") -> None:
        namespace = regarding.namespace or CLUSTER_SCOPED_NAMESPACE
        action = action or reason
        key = None
        if reason not in ONCE:
            key = (regarding, reason, type_, action)
            series = self._series.get(key)
            if series is not None and at - series.first <= SERIES_WINDOW:
                series.count += 1
                series.last = at
                self._grown.add(key)
                self.repeats += 1
                return
        self._serial += 1
        name = f"{regarding.name}.{time.time_ns():x}{self._serial % 4096:03x}"
        event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                 "metadata": {"name": name, "namespace": namespace},
                 "eventTime": micro_time(at), "reportingController": self.controller,
                 "reportingInstance": self.instance, "action": action, "reason": reason, "type": type_,
                 "note": note if len(note) <= MAX_NOTE else note[:MAX_NOTE - 3] + "...",
                 "regarding": regarding.as_json()}
        if self._running and self._sending < self.senders:
            self._send(namespace, event)
        elif len(self.queue) < self.capacity or (type_ != NORMAL and self._evict_routine()):
            self.queue.append((namespace, event))
        else:
            self._dropped(reason, regarding.name)
            return
        if key is not None:
            self._retire(self._series.pop(key, None), key)
            self._series[key] = _Series(namespace, name, at, at)
            if len(self._series) > SERIES_LIMIT:
                old, series = self._series.popitem(last=False)
                self._retire(series, old)

    def _evict_routine(self) -> bool:
        """Make room for a Warning: the oldest routine (Normal) event waiting is dropped instead;
        False when every event waiting is a Warning."""
        queue = self.queue
        for i, (_, event) in enumerate(queue):
            if event["type"] == NORMAL:
                del queue[i]
                self._dropped(event["reason"], event["regarding"]["name"])
                return True
        return False

    def _dropped(self, reason: str, name: str) -> None:
        self.dropped += 1
        self.dropped_by[reason] += 1
        if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
            log.warning("%d events dropped: the API server does not keep up (last: %s %s; by reason: %s)",
                        self.dropped, reason, name,
                        ", ".join(f"{r} {n}" for r, n in self.dropped_by.most_common()))

    def _retire(self, series: _Series | None, key: tuple) -> None:
        """A series leaves the books: its last count still goes to the server."""
        if series is not None and key in self._grown:
            self._grown.discard(key)
            self._finished.append(series)

    async def run(self) -> None:
        """Post the events (queued and to come) and keep the series' counts up to date, until cancelled."""
        self._running = True
        try:
            while self.queue and self._sending < self.senders:
                self._send(*self.queue.popleft())
            await self._patch_series()
        finally:
            self._running = False

    def _send(self, namespace: str, event: dict) -> None:
        self._sending += 1

        def answered(error: ApiError | None) -> None:
            self._sending -= 1
            if error is None:
                self.posted += 1
            else:
                self.refused += 1
                log.info("event %s about %s not posted: %s", event["reason"], event["regarding"]["name"], error)
            if self._running and self.queue:
                self._send(*self.queue.popleft())
        self.client.submit_event(namespace, orjson.dumps(event), answered)

    async def _patch_series(self) -> None:
        """Every ``series_interval``: the grown series' counts to the server; series older than
        the window are forgotten (after their last count is sent)."""
        while True:
            await asyncio.sleep(self.series_interval)
            now = self.clock()
            while self._series:
                key, oldest = next(iter(self._series.items()))
                if now - oldest.first <= SERIES_WINDOW:
                    break
                self._series.popitem(last=False)
                self._retire(oldest, key)
            due, self._finished = self._finished, []
            due += [self._series[key] for key in self._grown if key in self._series]
            self._grown = set()
            for series in due:
                if series.count > series.patched:
                    await self._patch(series)

    async def _patch(self, series: _Series) -> None:
        try:
            await self.client.patch_event_series(series.namespace, series.name, series.count, micro_time(series.last))
            series.patched = series.count
        except ApiError as exc:
            log.info("event series %s (%d) not patched: %s", series.name, series.count, exc)
