"""``/ws/v1/events/batch`` and ``/ws/v1/events/stream``: the events of every partition, in YuniKorn
1.9's record shape (``partition_worker.events``).

Events are produced by each partition's core and kept by its worker in a ring (ids 0, 1, 2, ...
per partition session). A batch asks each worker for a slice of its ring. A stream on any
rmproxy sees every partition's events: while this rmproxy has at least one stream open, one
``EventFollower`` reads each worker's ring by id (one query per partition every
``POLL_INTERVAL``) and hands new records to every open stream; with no stream open it does
nothing at all. Each stream buffers at most ``STREAM_BUFFER`` records: a client that falls that
far behind is dropped (the stream ends with YuniKorn's closing line), never buffered without
bound; a write that takes longer than ``WRITE_TIMEOUT`` ends the stream too.

Limits, as YuniKorn's: at most ``event.maxStreams`` streams at once (default 100) and
``event.maxStreamsPerHost`` per ``Host`` header (default 15), read from the RMs' extraConfig
(the strictest RM wins), counted per rmproxy; beyond them 503 ``Too many streaming connections``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from aiohttp import web

from common.config.extra import stream_limits
from common.messages import EventsQuery
from common.timefmt import rfc3339_nano
from rmproxy.webapi._http import CORS_HEADERS, ApiError, int_query, json_response
from rmproxy.webapi.cluster import ClusterReader, Target
from rmproxy.webapi.seams import Registrations

__all__ = ["EventsApi", "EventFollower", "EventStream", "POLL_INTERVAL", "STREAM_BUFFER", "BATCH_MAX",
           "CLOSED_BY_PRODUCER"]

log = logging.getLogger("korral.rmproxy")

BATCH_MAX = 10_000  # records per batch answer at most (YuniKorn's event.RESTResponseSize default)
POLL_INTERVAL = 0.25  # seconds between two reads of every ring while streams are open
STREAM_BUFFER = 1000  # records a stream may fall behind before it is dropped (YuniKorn's)
WRITE_TIMEOUT = 5.0  # seconds one record may take to write (YuniKorn's)
IDLE_CHECK = 1.0  # seconds between checks that an idle stream's client is still there
CLOSED_BY_PRODUCER = "Event stream was closed by the producer"
_COMPACT = json.JSONEncoder(separators=(",", ":"))
Key = tuple[str, str]  # (rmID, partition)


def _by_time(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda e: (e["timestampNano"], e["partition"], e["id"]))


@dataclass(eq=False)
class EventStream:
    """One open stream: who opened it, and the records waiting to be written."""

    host: str
    created_ns: int
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(STREAM_BUFFER))
    dropped: bool = False
    # per partition, (ring, id): the records of that ring below that id were sent as history
    skip: dict[Key, tuple[int, int]] = field(default_factory=dict)

    def offer(self, key: Key, ring: int, records: list[dict]) -> None:
        """Queue ``records`` of one partition's ``ring``; a full queue drops the stream."""
        if self.dropped:
            return
        skip_ring, floor = self.skip.get(key, (ring, 0))
        if skip_ring != ring:
            floor = 0
        for rec in records:
            if rec["id"] < floor:
                continue
            try:
                self.queue.put_nowait(rec)
            except asyncio.QueueFull:
                self.dropped = True  # the writer sees it at its next record (the queue is full)
                return

    def info(self) -> dict:
        """The state dump's ``eventStreams`` entry."""
        return {"Name": self.host, "CreatedAt": rfc3339_nano(self.created_ns)}


class EventFollower:
    """Reads every partition's ring by id while streams are open, and hands new records to them."""

    def __init__(self, reader: ClusterReader) -> None:
        self.reader = reader
        self.streams: set[EventStream] = set()
        self.cursors: dict[Key, tuple[int, int]] = {}  # (rmID, partition) -> (ring, next id)
        self._task: asyncio.Task | None = None

    async def subscribe(self, stream: EventStream, count: int) -> list[dict]:
        """Add ``stream``; return the last ``count`` records before it (oldest first). Every later
        record reaches the stream exactly once: the history ends where the follower's deliveries
        to it begin."""
        targets = self.reader.targets()
        await asyncio.gather(*(self._init_cursor(t) for t in targets if self._key(t) not in self.cursors))
        # from here to add(): no await, so no delivery falls between the history and the stream
        snapshot = dict(self.cursors)
        stream.skip = dict(snapshot)
        self.streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())
        if count <= 0:
            return []
        history: list[dict] = []
        answers = await asyncio.gather(*(
            self.reader.query(t, EventsQuery(last=count, before=snapshot[self._key(t)][1]))
            for t in targets if self._key(t) in snapshot), return_exceptions=True)
        for page in answers:
            if isinstance(page, dict):
                history.extend(page["items"])
        return _by_time(history)[-count:]

    def unsubscribe(self, stream: EventStream) -> None:
        self.streams.discard(stream)

    @staticmethod
    def _key(t: Target) -> Key:
        return (t.rm_id, t.partition)

    async def _init_cursor(self, t: Target) -> None:
        try:
            page = await self.reader.query(t, EventsQuery(last=0))
        except ApiError:
            return  # no worker now: followed from its first record once it has one
        self.cursors.setdefault(self._key(t), (page["ring"], page["next"]))

    async def _run(self) -> None:
        try:
            while self.streams:
                try:
                    await self.poll()
                except Exception:  # a bug must not stop every stream: logged, tried again
                    log.exception("event stream: reading the partitions' events failed")
                await asyncio.sleep(POLL_INTERVAL)
        finally:
            self.cursors.clear()  # nobody follows: the next stream starts from the rings' ends

    async def poll(self) -> None:
        """One read of every ring from its cursor; the new records go to every stream."""
        targets = self.reader.targets()
        starts = {self._key(t): self.cursors.get(self._key(t)) for t in targets}
        answers = await asyncio.gather(*(
            self.reader.query(t, EventsQuery(start=starts[self._key(t)][1] if starts[self._key(t)] else 0))
            for t in targets), return_exceptions=True)
        for t, page in zip(targets, answers):
            if not isinstance(page, dict):
                continue
            key = self._key(t)
            if self.cursors.get(key) != starts[key]:
                continue  # a subscription set this cursor meanwhile: read again next time
            known = starts[key]
            if known is not None and known[0] != page["ring"]:
                # a new session (re-registration): its ids start again; read it from its start
                self.cursors[key] = (page["ring"], page["lowest"])
                continue
            if known is not None and page["lowest"] > known[1]:
                log.warning("event stream: %d events of [%s]%s left its ring before they were read",
                            page["lowest"] - known[1], *key)
            self.cursors[key] = (page["ring"], page["next"])
            if page["items"]:
                for stream in list(self.streams):
                    stream.offer(key, page["ring"], page["items"])


class EventsApi:
    def __init__(self, store: Registrations, reader: ClusterReader) -> None:
        self.store = store
        self.reader = reader
        self.instance = str(uuid.uuid4())  # names this rmproxy's answers (YuniKorn's InstanceUUID)
        self.follower = EventFollower(reader)
        self.open: set[EventStream] = set()

    async def batch(self, request: web.Request) -> web.Response:
        """YuniKorn's batch: up to ``count`` records (default and cap ``BATCH_MAX``; 0 is refused)
        from id ``start`` (default 0) of each partition (or of ``?partition=``), merged by time.
        Ids are per partition: with one partition they are exactly YuniKorn's."""
        count = min(int_query(request, "count", BATCH_MAX), BATCH_MAX)
        if count == 0:
            raise ApiError(400, '0 is not a valid value for "count"')
        start = int_query(request, "start", 0)
        name = request.query.get("partition")
        targets = [self.reader.resolve(name, request.query.get("rmID"))] if name else self.reader.targets()
        answers = await asyncio.gather(*(self.reader.query(t, EventsQuery(start=start, limit=count))
                                         for t in targets), return_exceptions=not name)
        pages = [a for a in answers if isinstance(a, dict)]
        lowest = min((p["lowest"] for p in pages), default=0)
        highest = max((p["total"] - 1 for p in pages), default=0)
        held = [p for p in pages if p["lowest"] <= start < p["total"]]  # YuniKorn: null when start is not held
        records = _by_time([e for p in held for e in p["items"]])[:count] if held else None
        return json_response({"InstanceUUID": self.instance, "LowestID": lowest, "HighestID": max(highest, 0),
                              "EventRecords": records})

    async def _limits(self):
        extras = []
        for rm_id in self.reader.rm_ids():
            try:
                reg = await self.store.load(rm_id)
            except Exception:  # Redis down: that RM's settings are unknown, the defaults apply
                continue
            if reg is not None:
                extras.append(reg.extra_config)
        return stream_limits(extras)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """YuniKorn's stream: one JSON object per line, first ``{"InstanceUUID"}``, then the last
        ``count`` records (default 0), then every new record as its worker's ring gets it."""
        limits = await self._limits()
        host = request.host
        same_host = sum(1 for s in self.open if s.host == host)
        if len(self.open) >= limits.total or same_host >= limits.per_host:
            raise ApiError(503, "Too many streaming connections",
                           f"{len(self.open)} event streams open on this rmproxy ({same_host} for host {host}); "
                           f"limits: event.maxStreams {limits.total}, event.maxStreamsPerHost {limits.per_host}")
        count = int_query(request, "count", 0)
        if request.method == "HEAD":  # the headers a stream would have; no stream is opened
            return web.Response(headers=CORS_HEADERS, content_type="application/json", charset="UTF-8")
        stream = EventStream(host, time.time_ns())
        self.open.add(stream)
        resp = web.StreamResponse(headers=CORS_HEADERS)
        resp.content_type = "application/json"
        resp.charset = "UTF-8"
        try:
            history = await self.follower.subscribe(stream, count)
            await resp.prepare(request)
            await resp.write(_line({"InstanceUUID": self.instance}))
            for rec in history:
                await asyncio.wait_for(resp.write(_line(rec)), WRITE_TIMEOUT)
            await self._follow(request, resp, stream)
        except (ConnectionResetError, asyncio.TimeoutError):
            pass  # the client is gone or too slow to take one record: the stream ends
        finally:
            self.follower.unsubscribe(stream)
            self.open.discard(stream)
        return resp

    async def _follow(self, request: web.Request, resp: web.StreamResponse, stream: EventStream) -> None:
        while True:
            try:
                rec = await asyncio.wait_for(stream.queue.get(), IDLE_CHECK)
            except asyncio.TimeoutError:
                if request.transport is None or request.transport.is_closing():
                    return
                continue
            if rec is None or stream.dropped:
                await asyncio.wait_for(resp.write(_line({"status_code": 200, "message": CLOSED_BY_PRODUCER,
                                                         "description": CLOSED_BY_PRODUCER})), WRITE_TIMEOUT)
                await resp.write_eof()
                return
            await asyncio.wait_for(resp.write(_line(rec)), WRITE_TIMEOUT)

    def streams_info(self) -> list[dict]:
        return [s.info() for s in sorted(self.open, key=lambda s: s.created_ns)]


def _line(doc: dict) -> bytes:
    return _COMPACT.encode(doc).encode() + b"\n"
