"""Quota-change preemption (YuniKorn 1.8/1.9) and per-resource-type guarantee preemption (1.8)
on the pure core, with the fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.compat import Compat
from common.config.model import PreemptionConfig
from partition_worker.core.outcomes import EventType, Termination
from partition_worker.core.settings import CoreSettings
from tests.core.harness import SECOND, Harness, partition_config, q

DELAY = {"quota.preemption.delay": "10s"}


def _cfg(a_max: int, enabled: bool = True, props=DELAY, a_g: int | None = None, b=()):
    root = q("root", q("a", max={"memory": a_max}, props=props,
                       guaranteed={"memory": a_g} if a_g else None), *b, submitacl="*")
    return replace(partition_config(root), preemption=PreemptionConfig(quotapreemptionenabled=enabled))


def _filled(enabled: bool = True, props=DELAY, a_g: int | None = None, n: int = 10, **kw) -> Harness:
    h = Harness(config=_cfg(100, enabled, props, a_g))
    h.node("n1", memory=1000, vcore=1000)
    h.app("app", "root.a", "bob")
    for i in range(n):
        h.ask(f"k{i}", "app", memory=10, **kw)
        h.step(SECOND)  # distinct creation times
    return h


def _preempted(h: Harness) -> list[str]:
    return [r.allocation_key for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]


def test_a_lowered_max_is_enforced_after_the_delay_newest_first():
    h = _filled()
    h.p.update_config(_cfg(70), h.now)
    a = h.p.queues.find("root.a")
    assert a.quota_preemption_at_ns == h.now + 10 * SECOND
    h.step(9 * SECOND)
    assert _preempted(h) == []
    h.step(SECOND)
    # YuniKorn orders by the hour of creation then share: same hour, same size -> newest first here
    assert sorted(_preempted(h)) == ["k7", "k8", "k9"] and a.allocated.get("memory") == 70
    assert a.quota_preemption_at_ns == 0
    rel = [r for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER][0]
    assert rel.message == "preempting allocations to enforce new max quota for queue : root.a"
    summary = [e for e in h.log.events if e.type is EventType.QUEUE and e.reason == "QuotaPreemption"]
    assert summary and "selected victims: 3" in summary[0].message


@pytest.mark.parametrize("enabled, props", [(False, DELAY), (True, {})])
def test_nothing_happens_without_the_partition_flag_or_a_delay(enabled, props):
    h = _filled(enabled, props)
    h.p.update_config(_cfg(70, enabled, props), h.now)
    h.step(60 * SECOND)
    assert _preempted(h) == [] and h.p.queues.find("root.a").allocated.get("memory") == 100


def test_raising_the_max_back_before_the_delay_cancels_it():
    h = _filled()
    h.p.update_config(_cfg(70), h.now)
    h.step(5 * SECOND)
    h.p.update_config(_cfg(100), h.now)
    h.step(20 * SECOND)
    assert _preempted(h) == []


def test_a_changed_delay_shifts_the_due_time():
    h = _filled()
    h.p.update_config(_cfg(70), h.now)
    due = h.p.queues.find("root.a").quota_preemption_at_ns
    h.p.update_config(_cfg(70, props={"quota.preemption.delay": "30s"}), h.now)
    assert h.p.queues.find("root.a").quota_preemption_at_ns == due + 20 * SECOND


def test_never_below_the_guarantee():
    h = _filled(a_g=90)
    h.p.update_config(_cfg(70, a_g=60), h.now)  # guaranteed must stay <= max: 60
    h.p.update_config(_cfg(70, a_g=60), h.now)
    h.step(10 * SECOND)
    assert h.p.queues.find("root.a").allocated.get("memory") == 70


def test_opted_out_allocations_are_never_victims():
    h = _filled(n=10, allow_preempt_self=False)
    h.p.update_config(_cfg(70), h.now)
    h.step(10 * SECOND)
    assert _preempted(h) == []


def test_victims_never_exceed_the_excess():
    h = _filled()
    h.p.update_config(_cfg(95), h.now)  # 5 over, every allocation is 10: YuniKorn takes none
    h.step(10 * SECOND)
    assert _preempted(h) == []


def test_a_parent_shares_its_excess_among_children_above_their_guarantee():
    def cfg(p_max):
        root = q("root", q("p", q("x", guaranteed={"memory": 20}), q("y"), max={"memory": p_max}, props=DELAY),
                 submitacl="*")
        return replace(partition_config(root), preemption=PreemptionConfig(quotapreemptionenabled=True))
    h = Harness(config=cfg(100))
    h.node("n1", memory=1000, vcore=1000)
    h.app("ax", "root.p.x")
    h.app("ay", "root.p.y")
    for i in range(4):
        h.ask(f"x{i}", "ax", memory=10)
        h.ask(f"y{i}", "ay", memory=10)
    h.step()
    h.p.update_config(cfg(40), h.now)  # 40 over; x is 20 over its guarantee, y 40 (no guarantee)
    h.step(10 * SECOND)
    keys = _preempted(h)
    assert sum(k.startswith("x") for k in keys) == 1 and sum(k.startswith("y") for k in keys) == 2


def test_recovered_allocations_over_a_lowered_max_re_arm_it():
    from partition_worker.core.commands import RecoveredAlloc
    from common.resources import Resource
    h = Harness(config=_cfg(20))
    h.app("app", "root.a")
    existing = tuple(RecoveredAlloc(f"u{i}", f"r{i}", "app", Resource({"memory": 10})) for i in range(4))
    h.node("n1", memory=1000, vcore=1000, existing=existing)
    assert h.p.queues.find("root.a").quota_preemption_at_ns == h.now + 10 * SECOND
    h.step(10 * SECOND)
    assert len(_preempted(h)) == 2


# ------------------------------------------------------------------------------ per resource type (1.8)
def _per_type(compat: Compat) -> Harness:
    # low is over its guarantee in memory (60 > 20) and under it in vcore (6 < 50)
    root = q("root", q("high", guaranteed={"memory": 60, "vcore": 60}),
             q("low", guaranteed={"memory": 20, "vcore": 50}), submitacl="*")
    cfg = replace(partition_config(root), preemption=PreemptionConfig(enabled=True))
    h = Harness(config=cfg, settings=CoreSettings(compat=compat))
    h.node("n1", memory=60, vcore=100)
    h.app("lo", "root.low", "bob")
    for i in range(6):
        h.ask(f"lo-{i}", "lo", memory=10, vcore=1)
        h.step(1)
    return h


@pytest.mark.parametrize("compat, victims", [(Compat(), 0), (Compat((1, 8)), 1)])
def test_a_queue_over_its_guarantee_in_the_asked_type_is_a_victim_though_under_in_another(compat, victims):
    h = _per_type(compat)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10, vcore=1)
    h.step(30 * SECOND)
    assert len(_preempted(h)) == victims
