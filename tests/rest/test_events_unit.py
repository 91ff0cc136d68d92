"""The event follower and streams of rmproxy (``rmproxy.webapi.events``) against fake
workers: every record reaches a stream once, in order, without gaps between the history and the
live records; a new session's ring is followed from its start; a slow stream is dropped."""

from __future__ import annotations

import asyncio

from common.messages import EventsQuery
from rmproxy.webapi.cluster import Target
from rmproxy.webapi.events import POLL_INTERVAL, STREAM_BUFFER, EventFollower, EventStream


class FakeRing:
    """One partition's ring as a worker answers the ``events`` query."""

    def __init__(self, partition: str, ring: int = 1) -> None:
        self.partition = partition
        self.ring = ring
        self.records: list[dict] = []

    def add(self, n: int) -> None:
        for _ in range(n):
            i = len(self.records)
            self.records.append({"id": i, "timestampNano": 1000 + i, "partition": self.partition})

    def answer(self, query: EventsQuery) -> dict:
        total = len(self.records)
        if query.last is not None:
            end = min(total if query.before is None else query.before, total)
            first = max(0, end - query.last)
        else:
            first, end = query.start or 0, total
        return {"ring": self.ring, "lowest": 0, "next": max(first, end), "total": total,
                "items": self.records[first:end]}


class FakeReader:
    def __init__(self, *rings: FakeRing) -> None:
        self.rings = {r.partition: r for r in rings}
        self.asked: list[EventsQuery] = []

    def targets(self) -> list[Target]:
        return [Target("rm", p, 1) for p in sorted(self.rings)]

    async def query(self, target: Target, query: EventsQuery) -> dict:
        self.asked.append(query)
        await asyncio.sleep(0)  # answered later, as a worker does
        return self.rings[target.partition].answer(query)


def drain(stream: EventStream) -> list[tuple[str, int]]:
    out = []
    while not stream.queue.empty():
        rec = stream.queue.get_nowait()
        out.append((rec["partition"], rec["id"]))
    return out


def test_history_then_live_records_each_once() -> None:
    async def run():
        a, b = FakeRing("a"), FakeRing("b")
        a.add(5)
        b.add(2)
        follower = EventFollower(FakeReader(a, b))
        stream = EventStream("h", 0)
        history = await follower.subscribe(stream, 3)
        a.add(2)  # after the subscription: must arrive live, exactly once
        await follower.poll()
        await follower.poll()
        follower.unsubscribe(stream)
        return [(r["partition"], r["id"]) for r in history], drain(stream)
    history, live = asyncio.run(run())
    assert history == [("a", 2), ("a", 3), ("a", 4)]  # the last 3 of both partitions, by time
    assert live == [("a", 5), ("a", 6)]


def test_a_second_stream_starts_where_the_follower_is() -> None:
    async def run():
        a = FakeRing("a")
        follower = EventFollower(FakeReader(a))
        first, second = EventStream("h", 0), EventStream("h", 1)
        await follower.subscribe(first, 0)
        a.add(3)
        await follower.poll()
        history = await follower.subscribe(second, 10)
        a.add(1)
        await follower.poll()
        return drain(first), [r["id"] for r in history], drain(second)
    first, history, second = asyncio.run(run())
    assert first == [("a", 0), ("a", 1), ("a", 2), ("a", 3)]
    assert history == [0, 1, 2] and second == [("a", 3)]


def test_a_new_session_is_followed_from_its_first_record() -> None:
    async def run():
        a = FakeRing("a")
        a.add(4)
        follower = EventFollower(FakeReader(a))
        stream = EventStream("h", 0)
        await follower.subscribe(stream, 0)
        a.ring, a.records = 2, []  # re-registration: a new session numbers from 0 again
        a.add(2)
        await follower.poll()  # sees the new ring
        await follower.poll()  # reads it from its start
        return drain(stream)
    assert asyncio.run(run()) == [("a", 0), ("a", 1)]


def test_a_stream_that_falls_behind_is_dropped_not_buffered() -> None:
    async def run():
        a = FakeRing("a")
        follower = EventFollower(FakeReader(a))
        slow, reading = EventStream("h", 0), EventStream("h", 1)
        for stream in (slow, reading):
            await follower.subscribe(stream, 0)
        for batch in (STREAM_BUFFER - 10, 20):  # ``reading`` takes each batch, ``slow`` none
            a.add(batch)
            await follower.poll()
            taken = len(drain(reading))
        return slow, reading, taken
    slow, reading, taken = asyncio.run(run())
    assert slow.dropped and slow.queue.qsize() == STREAM_BUFFER  # bounded
    assert not reading.dropped and taken == 20


def test_nothing_is_read_while_no_stream_is_open() -> None:
    async def run():
        a = FakeRing("a")
        reader = FakeReader(a)
        follower = EventFollower(reader)
        stream = EventStream("h", 0)
        await follower.subscribe(stream, 0)
        follower.unsubscribe(stream)
        await asyncio.wait_for(follower._task, 5)  # the follower's loop ends with its last stream
        asked = len(reader.asked)
        await asyncio.sleep(2 * POLL_INTERVAL)  # and nothing reads after it: a poll would fall in here
        return asked, len(reader.asked), follower.cursors
    before, after, cursors = asyncio.run(run())
    assert before == after and cursors == {}
