"""The object store: one resourceVersion counter, a bucket per resource, a bounded history.

Objects are kept encoded (orjson bytes without ``kind``/``apiVersion``) next to the few values
selectors need (labels, field-selector fields), so a list is a join of bytes and a watch event is
encoded once however many watchers read it. Every write takes the next resourceVersion from the
one counter and appends an :class:`Event` to its bucket's history; the history keeps the state
before each write, so a list at an exact older version and a watch from one are served from it.
History is bounded (``history`` events per bucket) and can be compacted at once; a version older
than what the history holds is "too old" (410), as after etcd compaction / a watch-cache window.

Single-threaded: every method runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import orjson

from k8s_shim.fake.selectors import FieldSelector, LabelSelector

__all__ = ["Entry", "Event", "Bucket", "Store", "Filter", "WatchQueue"]


@dataclass(slots=True)
class Entry:
    """One stored version of one object."""

    key: str  # "namespace/name" or "name"
    namespace: str
    name: str
    uid: str
    rv: int
    raw: bytes  # the object's JSON without kind/apiVersion
    labels: dict[str, str]
    fields: dict[str, str]

    def decode(self) -> dict[str, Any]:
        return orjson.loads(self.raw)


@dataclass(slots=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: str
    new: Entry  # for DELETED: the last state, at the delete's resourceVersion
    prev: Entry | None  # the state before this write (None for ADDED)
    _prev_at_rv: bytes | None = None

    def prev_at_rv(self) -> bytes:
        """The previous state stamped with this event's resourceVersion: what a filtered watch
        sends as DELETED when the write moved the object out of its selector."""
        if self._prev_at_rv is None:
            obj = orjson.loads(self.prev.raw)  # type: ignore[union-attr]
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._prev_at_rv = orjson.dumps(obj)
        return self._prev_at_rv


@dataclass(frozen=True, slots=True)
class Filter:
    """What a list or a watch selects: a namespace (None: all), labels and fields."""

    namespace: str | None = None
    labels: LabelSelector | None = None
    fields: FieldSelector | None = None

    def matches(self, entry: Entry) -> bool:
        if self.namespace is not None and entry.namespace != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(entry.labels):
            return False
        if self.fields is not None and not self.fields.matches(entry.fields):
            return False
        return True


class WatchQueue:
    """The events one open watch has not sent yet. Filled at write time, so a watch never depends
    on the history window while it keeps up; one that falls ``limit`` events behind is ended
    (as a real server closes a watcher whose buffer is full)."""

    __slots__ = ("events", "limit", "overflowed", "_wake")

    def __init__(self, limit: int = 1_000_000):
        self.events: list[Event] = []
        self.limit = limit
        self.overflowed = False
        self._wake: asyncio.Future | None = None

    def push(self, event: Event) -> None:
        if self.overflowed:
            return
        self.events.append(event)
        if len(self.events) > self.limit:
            self.overflowed = True
            self.events.clear()
        self.poke()

    def poke(self) -> None:
        """Wake the watch (for an event, its own timer, the server stopping)."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def take(self) -> list[Event]:
        out, self.events = self.events, []
        return out

    def wake(self) -> asyncio.Future:
        if self._wake is None or self._wake.done():
            self._wake = asyncio.get_running_loop().create_future()
            if self.events or self.overflowed:
                self._wake.set_result(None)
        return self._wake


class Bucket:
    """The objects of one resource and their recent history."""

    def __init__(self, name: str, history: int, extract: Callable[[dict[str, Any]], dict[str, str]]):
        self.name = name
        self.items: dict[str, Entry] = {}
        self.events: list[Event] = []
        self.offset = 0  # absolute index of events[0]
        self.compacted_rv = 0  # every event with rv > compacted_rv is in events
        self.history = history
        self.extract = extract
        self.last_rv = 0  # the newest write to this resource
        self._sorted: list[str] | None = None
        self.watchers: set[WatchQueue] = set()

    # -- reading -----------------------------------------------------------------------------

    def sorted_keys(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.items)
        return self._sorted

    def end(self) -> int:
        """Absolute index one past the newest event."""
        return self.offset + len(self.events)

    def index_after(self, rv: int) -> int:
        """Absolute index of the first event newer than ``rv`` (rv >= compacted_rv)."""
        lo, hi = 0, len(self.events)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.events[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return self.offset + lo

    def events_from(self, index: int) -> list[Event]:
        return self.events[index - self.offset:]

    def snapshot(self, rv: int) -> dict[str, Entry]:
        """The objects as they were at ``rv`` (compacted_rv <= rv): the current ones with every
        newer write undone."""
        items = dict(self.items)
        start = self.index_after(rv) - self.offset
        for ev in reversed(self.events[start:]):
            if ev.prev is None:
                items.pop(ev.key, None)
            else:
                items[ev.key] = ev.prev
        return items

    # -- writing -----------------------------------------------------------------------------

    def record(self, event: Event) -> None:
        if event.type == "DELETED":
            self.items.pop(event.key, None)
        else:
            self.items[event.key] = event.new
        if event.prev is None or event.type == "DELETED":
            self._sorted = None
        self.last_rv = event.rv
        self.events.append(event)
        if len(self.events) > self.history + max(16, self.history // 4):
            self.trim(len(self.events) - self.history)
        for watcher in self.watchers:
            watcher.push(event)

    def trim(self, count: int) -> None:
        count = min(count, len(self.events))
        if count <= 0:
            return
        self.compacted_rv = self.events[count - 1].rv
        del self.events[:count]
        self.offset += count

    def compact(self, rv: int) -> None:
        """Forget the history up to ``rv``: versions older than that become too old."""
        self.trim(self.index_after(rv) - self.offset)
        self.compacted_rv = max(self.compacted_rv, rv)


class Store:
    """Buckets by resource name, the one resourceVersion counter, and in-process listeners."""

    def __init__(self, history: int = 10_000):
        self.rv = 0
        self.history = history
        self.buckets: dict[str, Bucket] = {}
        self.listeners: dict[str, list[Callable[[Event], None]]] = {}
        self._advanced: asyncio.Future | None = None

    def bucket(self, resource: str, extract: Callable[[dict[str, Any]], dict[str, str]] | None = None) -> Bucket:
        b = self.buckets.get(resource)
        if b is None:
            b = self.buckets[resource] = Bucket(resource, self.history, extract or (lambda obj: {}))
        return b

    def listen(self, resource: str, callback: Callable[[Event], None]) -> None:
        """Call ``callback(event)`` after every write to ``resource`` (controllers: kubelet, GC)."""
        self.listeners.setdefault(resource, []).append(callback)

    def get(self, resource: str, key: str) -> Entry | None:
        return self.buckets[resource].items.get(key)

    def entries(self, resource: str) -> Iterable[Entry]:
        return self.buckets[resource].items.values()

    def write(self, resource: str, key: str, obj: dict[str, Any] | None, *, delete: bool = False) -> Entry:
        """Store ``obj`` under ``key`` at the next resourceVersion (or remove the object when
        ``delete``: the DELETED event carries its last state). Returns the new entry."""
        bucket = self.buckets[resource]
        prev = bucket.items.get(key)
        self.rv += 1
        if delete:
            assert prev is not None
            obj = orjson.loads(prev.raw)
            kind = "DELETED"
        else:
            assert obj is not None
            kind = "ADDED" if prev is None else "MODIFIED"
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        raw = orjson.dumps(obj)
        entry = Entry(key, meta.get("namespace", ""), meta["name"], meta.get("uid", ""), self.rv, raw,
                      meta.get("labels") or {}, bucket.extract(obj))
        event = Event(self.rv, kind, key, entry, prev)
        bucket.record(event)
        for callback in self.listeners.get(resource, ()):
            callback(event)
        if self._advanced is not None and not self._advanced.done():
            self._advanced.set_result(None)
        return entry

    async def wait_for_rv(self, rv: int, timeout: float) -> bool:
        """Wait until the counter reaches ``rv`` (a list "not older than" a future version)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.rv < rv:
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._advanced is None or self._advanced.done():
                self._advanced = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._advanced), left)
            except asyncio.TimeoutError:
                return self.rv >= rv
        return True

    def compact(self, resource: str | None = None) -> int:
        """Drop every bucket's history (or one's) up to now; returns the version compacted to."""
        for name, bucket in self.buckets.items():
            if resource is None or name == resource:
                bucket.compact(self.rv)
        return self.rv
