"""``SteadyCollector``: survivors of a turn leave the collector's scans; a full pass now and then; the idle loop built on it."""

from __future__ import annotations

import asyncio
import gc
import weakref

from common.gcpause import SteadyCollector, steady_until_stopped


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_survivors_leave_the_scans_and_the_periodic_full_pass_frees_frozen_cycles():
    clock = Clock()
    before = gc.get_threshold()
    collector = SteadyCollector(full_every=60.0, clock=clock, young_threshold=5000)
    try:
        assert gc.get_threshold() == (5000, *before[1:])
        kept = [[i] for i in range(1000)]
        collector.after_turn()
        assert gc.get_freeze_count() >= len(kept)
        garbage = Node()
        alive = weakref.ref(garbage)
        collector.after_turn()  # frozen while still referenced
        del garbage
        gc.collect()
        assert alive() is not None  # frozen: ordinary collections do not look at it
        clock.now = 59.0
        collector.after_turn()
        assert collector.full_collections == 0 and alive() is not None
        clock.now = 61.0
        collector.after_turn()
        assert collector.full_collections == 1 and collector.next_full == 121.0
        assert alive() is None
    finally:
        collector.release()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_the_idle_loop_ends_when_stopped_or_when_no_longer_healthy_and_restores_the_collector():
    thresholds = gc.get_threshold()

    async def stopped_soon() -> bool:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return await steady_until_stopped(stop, interval=0.01)

    async def unhealthy_after_two_turns() -> bool:
        turns = []
        return await steady_until_stopped(asyncio.Event(), interval=0.01,
                                          healthy=lambda: turns.append(1) or len(turns) < 2)

    assert asyncio.run(stopped_soon()) is True
    assert asyncio.run(unhealthy_after_two_turns()) is False
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() == 0
