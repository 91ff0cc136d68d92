"""YuniKorn 1.8-1.9 semantics on the pure core (docs/yunikorn-compat.md, "Scheduling semantics"):
unschedulable-ask backoff, foreign allocations, app usage and summary, and the compatibility
switch's behaviours, each tested both ways where the seeds and today differ."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.compat import NEWEST, Compat
from common.config.model import PlacementRuleConfig, PreemptionConfig
from partition_worker.core.app_usage import summary_line
from partition_worker.core.commands import AddForeign, ReleaseForeign, RemoveApp, ReleaseAlloc
from partition_worker.core.outcomes import Termination
from partition_worker.core.settings import CoreSettings
from tests.core.harness import SECOND, Harness, partition_config, q, res

TODAY = Compat(NEWEST)


def _h(root=None, compat: Compat | None = None, rules=(), preemption: bool = False) -> Harness:
    cfg = partition_config(root, rules=rules)
    if preemption:
        cfg = replace(cfg, preemption=PreemptionConfig(enabled=True))
    return Harness(config=cfg, settings=CoreSettings(compat=compat or Compat()))


# ------------------------------------------------------------------------------ backoff
def _backoff_h(threshold: str = "3", delay: str = "10s") -> Harness:
    props = {"application.unschedasks.backoff": threshold, "application.unschedasks.backoff.delay": delay}
    h = _h(q("root", q("default", props=props), submitacl="*"))
    h.node("n1", memory=100, vcore=100)
    return h


def test_an_app_whose_asks_fit_nowhere_backs_off_for_the_delay_and_is_tried_again_after():
    h = _backoff_h()
    h.app("big", "root.default")
    for i in range(5):  # 4 unschedulable asks counted before the threshold (3) is checked
        h.ask(f"b{i}", "big", memory=500)
    h.step()
    app = h.p.apps["big"]
    assert app.backoff_deadline_ns == h.now + 10 * SECOND
    assert h.events("UnschedulableAsksBackoff")
    h.ask("small", "big", memory=10, priority=-1)  # behind the big ones: not tried while backing off
    h.step(SECOND)
    assert h.allocated_keys() == []
    h.step(10 * SECOND)  # the deadline passed: tried again; the threshold stops the walk before
    # the small ask again (it sorts last), so the app backs off again and the small ask waits
    assert h.allocated_keys() == []
    assert app.backoff_deadline_ns == h.now + 10 * SECOND


def test_without_the_property_there_is_no_backoff_and_a_small_ask_behind_is_placed():
    h = _h()
    h.node("n1", memory=100, vcore=100)
    h.app("big", "root.default")
    for i in range(5):
        h.ask(f"b{i}", "big", memory=500)
    h.ask("small", "big", memory=10, priority=-1)
    h.step()
    assert h.allocated_keys() == ["small"]
    assert h.p.apps["big"].backoff_deadline_ns == 0


def test_asks_held_by_the_queue_max_do_not_count_towards_the_backoff():
    props = {"application.unschedasks.backoff": "1"}
    h = _h(q("root", q("default", props=props, max={"memory": 50, "vcore": 50}), submitacl="*"))
    h.node("n1", memory=100, vcore=100)
    h.app("a", "root.default")
    for i in range(3):
        h.ask(f"a{i}", "a", memory=60)  # fits a node, not the queue headroom
    h.step()
    assert h.p.apps["a"].backoff_deadline_ns == 0


def test_other_apps_of_the_queue_are_scheduled_while_one_backs_off():
    h = _backoff_h(threshold="1")
    h.app("big", "root.default")
    h.ask("b0", "big", memory=500)
    h.ask("b1", "big", memory=500)
    h.step()
    h.app("ok", "root.default")
    h.ask("o1", "ok", memory=10)
    h.step(1)
    assert h.allocated_keys() == ["o1"]


# ------------------------------------------------------------------------------ foreign allocations
def test_a_foreign_allocation_occupies_its_node_and_counts_in_no_queue():
    h = _h()
    h.node("n1", memory=100, vcore=100)
    h.do(AddForeign("pod-x", "n1", res(memory=70, vcore=1), {"foreign": "static"}))
    node = h.p.nodes.get("n1")
    assert node.occupied.get("memory") == 70 and node.available.get("memory") == 30
    assert not node.foreign["pod-x"].preemptable
    assert h.p.root.allocated.is_zero()
    h.app("a", "root.default")
    h.ask("k1", "a", memory=40)
    h.step()
    assert h.allocated_keys() == []  # only 30 left on the node
    h.do(AddForeign("pod-x", "n1", res(memory=50, vcore=1), {"foreign": "default"}))  # updated
    assert node.occupied.get("memory") == 50
    h.do(ReleaseForeign("pod-x"))
    assert node.occupied.is_zero() and not node.foreign
    h.step()
    assert h.allocated_keys() == ["k1"]


def test_foreign_allocations_without_or_on_an_unknown_node_are_rejected_with_yunikorns_reasons():
    h = _h()
    h.do(AddForeign("p1", "", res(memory=1)), AddForeign("p2", "nope", res(memory=1)))
    assert h.rejected_ask_reasons() == {
        "p1": "trying to add a foreign request (non-allocation) p1",
        "p2": "failed to find node nope for allocation p2"}


def test_foreign_allocations_are_never_preemption_victims():
    root = q("root", q("high", guaranteed={"memory": 60}), q("low"), submitacl="*")
    h = _h(root, preemption=True)
    h.node("n1", memory=100, vcore=100)
    h.do(AddForeign("kubelet-pod", "n1", res(memory=100, vcore=1)))
    h.app("hi", "root.high")
    h.ask("h1", "hi", memory=10)
    h.step(60 * SECOND)
    h.step(1)
    assert not [r for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]
    assert "kubelet-pod" in h.p.foreign.by_key


def test_removing_a_node_forgets_its_foreign_allocations():
    from partition_worker.core.commands import RemoveNode
    h = _h()
    h.node("n1")
    h.do(AddForeign("p1", "n1", res(memory=1)), RemoveNode("n1"))
    assert h.p.foreign.by_key == {}


# ------------------------------------------------------------------------------ app usage and summary
def test_a_finished_app_that_ran_has_its_resource_seconds_and_one_summary():
    h = _h()
    h.node("n1", attrs={"si/instance-type": "m5.large"})
    h.app("a", "root.default", "alice")
    h.ask("k1", "a", memory=10, vcore=2)
    h.step()
    alloc = h.allocs_of("k1")[0]
    h.step(5 * SECOND)
    h.do(ReleaseAlloc("a", alloc.uuid))
    h.advance(30 * SECOND)  # Completing -> Completed
    assert h.app_state("a") == "Completed"
    [s] = h.log.app_summaries
    assert s.usage == {"resourceUsage": {"m5.large": {"memory": 50, "vcore": 10}}}
    line = summary_line(s, "rm1")
    assert line.startswith("YK_APP_SUMMARY: {ApplicationID: a, SubmissionTime: ")
    assert "User: alice, Queue: root.default, State: Completed, RmID: rm1, " \
           "ResourceUsage: TrackedResource{m5.large:memory=50,m5.large:vcore=10}, " \
           "PreemptedResource: TrackedResource{}, PlaceholderResource: TrackedResource{}}" in line
    assert h.p.finished_apps["a"].resource_history  # kept for REST after completion


def test_an_app_that_never_ran_has_no_summary_and_a_removed_one_that_ran_has_one():
    h = _h()
    h.node("n1")
    h.app("idle", "root.default")
    h.app("ran", "root.default")
    h.ask("k1", "ran", memory=10)
    h.step()
    h.do(RemoveApp("idle"), RemoveApp("ran"))
    assert [s.app_id for s in h.log.app_summaries] == ["ran"]


# ------------------------------------------------------------------------------ the switch's behaviours
@pytest.mark.parametrize("compat, states", [(Compat(), ["Accepted", "Starting"]), (TODAY, ["Accepted", "Running"])])
def test_no_starting_state_from_1_6(compat, states):
    h = _h(compat=compat)
    h.node("n1")
    h.app("a", "root.default")
    h.ask("k1", "a", memory=10)
    h.step()
    assert h.states("a") == states
    assert h.p.apps["a"].start_ns == h.now and h.p.root.running_apps == 1


@pytest.mark.parametrize("compat, placed", [(Compat(), False), (TODAY, True)])
def test_placement_falls_back_to_root_default_from_1_6(compat, placed):
    rules = (PlacementRuleConfig(name="provided", create=False),)
    h = _h(q("root", q("default"), q("a"), submitacl="*"), compat=compat, rules=rules)
    h.app("x", "root.nowhere")
    if placed:
        assert h.p.apps["x"].queue.path == "root.default"
    else:
        assert "no placement rule matched" in h.rejected_app_reasons()["x"]


def test_the_fallback_needs_root_default_to_exist():
    rules = (PlacementRuleConfig(name="provided", create=False),)
    h = _h(q("root", q("a"), submitacl="*"), compat=TODAY, rules=rules)
    h.app("x", "root.nowhere")
    assert "no placement rule matched" in h.rejected_app_reasons()["x"]


@pytest.mark.parametrize("compat, policy", [(Compat(), "stateaware"), (TODAY, "fifo")])
def test_stateaware_runs_as_fifo_from_1_6(compat, policy):
    h = _h(q("root", q("default", props={"application.sort.policy": "stateaware"}), submitacl="*"), compat=compat)
    assert h.p.queues.find("root.default").sort_policy.value == policy


def test_a_config_update_switches_the_compatibility_at_once():
    h = _h(q("root", q("default", props={"application.sort.policy": "stateaware"}), submitacl="*"))
    h.p.update_config(h.p.config, h.now, TODAY)
    assert h.p.queues.find("root.default").sort_policy.value == "fifo"
    assert h.p.settings.compat is TODAY


@pytest.mark.parametrize("compat, first", [(Compat(), "a"), (TODAY, "b")])
def test_the_fair_share_queue_order_of_1_6(compat, first):
    # a: guaranteed 100, uses 40 (share 0.4); b: no guarantee, max 1000, uses 20.
    # seeds (v1.2): an unguaranteed queue's share is its raw usage (20 > 0.4): a first.
    # 1.6: one number each, against guaranteed else the fair max: a 0.4, b 20/1000: b first.
    root = q("root", q("a", guaranteed={"memory": 100}), q("b", max={"memory": 1000}), submitacl="*")
    h = _h(root, compat=compat)
    h.node("n1", memory=1000, vcore=1000)
    h.app("pa", "root.a")
    h.app("pb", "root.b")
    h.ask("a0", "pa", memory=40)
    h.ask("b0", "pb", memory=20)
    h.step()
    h.log.allocations.clear()
    h.ask("a1", "pa", memory=1)
    h.ask("b1", "pb", memory=1)
    h.step(1)
    assert h.allocated_keys()[0] == f"{first}1"
