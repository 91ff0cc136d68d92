"""With a stage timer injected, a scheduling cycle records its time per stage; without, nothing."""

from __future__ import annotations

import itertools

import pytest

from common import si_pb2
from common.config import load_config
from partition_worker.core.settings import CoreSettings
from tests.si_session import SISession
from tests.si_builders import app, ask, node

CONFIG = "partitions: [{name: default, queues: [{name: root, submitacl: '*', queues: [{name: a}]}]}]"


def _run(settings: CoreSettings | None, asks: int = 1) -> SISession:
    s = SISession("rm", "default", load_config(CONFIG).partitions[0], settings)
    s.apply_node_request(si_pb2.NodeRequest(nodes=[node("n1", memory=10 * asks, vcore=asks)]), 1)
    s.apply_application_request(si_pb2.ApplicationRequest(new=[app("app", "root.a", user="u")]), 1)
    s.apply_allocation_request(si_pb2.AllocationRequest(asks=[ask(f"k{i}", "app") for i in range(asks)]), 2)
    assert len(s.step(3).allocation.new) == asks
    return s


def test_stages_are_timed_with_the_injected_clock():
    ticks = itertools.count()
    s = _run(CoreSettings(stage_timer=lambda: float(next(ticks))))  # every reading 1 s later
    stages = s.core.last_cycle_stages
    assert set(stages) == {"queue", "app", "node"}
    assert all(seconds >= 1.0 for seconds in stages.values())


def test_without_a_timer_nothing_is_recorded():
    assert _run(None).core.last_cycle_stages is None


def test_a_big_cycle_times_a_sample_of_its_node_selections_and_scales_it_to_all():
    """The first 16 selections are timed, then one in 16: 22 of 100, their time times 100/22."""
    reads = 0

    def clock() -> float:  # every reading 1 s later: each timed selection takes 1 s
        nonlocal reads
        reads += 1
        return float(reads)

    stages = _run(CoreSettings(stage_timer=clock), asks=100).core.last_cycle_stages
    assert stages["node"] == pytest.approx(100.0)
    assert reads < 2 * 100  # untimed selections read no clock
