"""Sorting policies: queues (fair by share of guaranteed), apps (fifo/fair/stateaware), nodes."""

import pytest

from partition_worker.core import ReleaseAlloc
from tests.core.harness import Harness, partition_config, q, res


def leaf_with(policy: str, **kw) -> Harness:
    root = q("root", q("leaf", props={"application.sort.policy": policy}, **kw), submitacl="*")
    return Harness(partition_config(root))


def test_fifo_gives_the_oldest_app_everything_it_asks_first() -> None:
    h = leaf_with("fifo")
    h.node("n1", memory=40).app("old", queue="root.leaf").step(1)
    h.app("young", queue="root.leaf")
    h.ask("y", "young", repeat=4).ask("o", "old", repeat=4)
    h.step()
    assert h.allocated_keys() == ["o"] * 4


def test_fifo_with_priority_puts_the_app_with_the_highest_ask_first() -> None:
    h = leaf_with("fifo")
    h.node("n1", memory=20).app("old", queue="root.leaf").app("young", queue="root.leaf")
    h.ask("o", "old", repeat=2).ask("y", "young", repeat=2, priority=5)
    h.step()
    assert h.allocated_keys() == ["y", "y"]


def test_fair_alternates_between_apps_by_usage() -> None:
    h = leaf_with("fair", guaranteed={"memory": 100, "vcore": 100})
    h.node("n1", memory=40).app("a1", queue="root.leaf").app("a2", queue="root.leaf")
    h.ask("x", "a1", repeat=4).ask("y", "a2", repeat=4)
    h.step()
    assert sorted(h.allocated_keys()) == ["x", "x", "y", "y"]


def test_stateaware_starts_one_app_at_a_time() -> None:
    h = leaf_with("stateaware")
    h.node("n1").app("a1", queue="root.leaf").app("a2", queue="root.leaf")
    h.ask("x", "a1", repeat=1).ask("y", "a2", repeat=1)
    h.step()
    assert h.allocated_keys() == ["x"]  # a1 is Starting: a2 must wait
    h.ask("x2", "a1")
    h.step()
    # a1 reached Running with x2, so no app is Starting and a2 may start in the same cycle
    assert h.allocated_keys() == ["x", "x2", "y"]
    assert h.app_state("a1") == "Running"


def test_queues_are_ordered_fair_by_share_of_guaranteed() -> None:
    root = q("root", q("a", guaranteed={"memory": 10}), q("b", guaranteed={"memory": 100}),
             submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1", memory=55).app("aa", queue="root.a").app("bb", queue="root.b")
    h.ask("ka", "aa", repeat=20, memory=5).ask("kb", "bb", repeat=20, memory=5)
    h.step()
    got = h.allocated_keys()
    # one allocation is 50% of a's guarantee but 5% of b's: b catches up to 50% first
    assert got[0] == "ka" and got.count("ka") == 1 and got.count("kb") == 10


def test_maxapplications_holds_back_new_apps() -> None:
    root = q("root", q("leaf", maxapps=1), submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1").app("a1", queue="root.leaf").app("a2", queue="root.leaf")
    h.ask("x", "a1").ask("y", "a2")
    h.step()
    assert h.allocated_keys() == ["x"]
    st = h.log.sched_states[-1]
    assert (st.allocation_key, st.state.value) == ("y", "SKIPPED")
    assert st.reason == "queue root.leaf has reached its maxapplications (1)"
    h.do(ReleaseAlloc("a1", h.allocs_of("x")[0].uuid))  # a1 Completing: no longer counted
    h.step()
    assert h.allocated_keys() == ["x", "y"]


@pytest.mark.parametrize("policy, expected", [("fair", "empty"), ("binpacking", "busy")])
def test_node_policy_chooses_least_or_most_used_node(policy, expected) -> None:
    h = Harness(partition_config(policy=policy))
    h.node("busy", memory=100, vcore=100).node("empty", memory=100, vcore=100).app("app1")
    h.ask("filler", "app1", memory=50, vcore=50, tags={"yunikorn.apache.org/requiredNode": "busy"})
    h.step()
    h.ask("k", "app1", memory=10, vcore=10)
    h.step()
    assert h.allocs_of("k")[0].node_id == expected


def test_fair_node_policy_spreads_allocations() -> None:
    h = Harness(partition_config())
    h.nodes(4, memory=100, vcore=100).app("app1").ask("k", "app1", repeat=8, memory=10, vcore=10)
    h.step()
    nodes = [a.alloc.node_id for a in h.log.allocations]
    assert sorted(nodes) == ["n0", "n0", "n1", "n1", "n2", "n2", "n3", "n3"]


def test_binpacking_fills_one_node_before_the_next() -> None:
    h = Harness(partition_config(policy="binpacking"))
    h.nodes(3, memory=30, vcore=30).app("app1").ask("k", "app1", repeat=4, memory=10, vcore=10)
    h.step()
    nodes = [a.alloc.node_id for a in h.log.allocations]
    assert nodes[:3] == [nodes[0]] * 3 and nodes[3] != nodes[0]


def test_resource_weights_change_the_node_score() -> None:
    h = Harness(partition_config(weights={"memory": 1.0, "vcore": 0.0}))
    h.node("memfull", memory=100, vcore=100).node("cpufull", memory=100, vcore=100).app("app1")
    h.ask("m", "app1", memory=90, vcore=1, tags={"yunikorn.apache.org/requiredNode": "memfull"})
    h.ask("c", "app1", memory=1, vcore=90, tags={"yunikorn.apache.org/requiredNode": "cpufull"})
    h.step()
    h.ask("k", "app1", memory=5, vcore=5)
    h.step()
    assert h.allocs_of("k")[0].node_id == "cpufull"  # only memory counts


def test_node_order_is_kept_sorted_incrementally() -> None:
    h = Harness(partition_config())
    h.nodes(50, memory=1000, vcore=1000).app("app1").ask("k", "app1", repeat=137, memory=7, vcore=3)
    h.step()
    coll = h.p.nodes
    assert coll.order == sorted((coll._score(n), n.node_id) for n in coll.nodes.values()
                                if n.node_id not in coll.full)
    assert h.p.root.allocated == res(memory=7 * 137, vcore=3 * 137)


def test_full_nodes_are_set_aside_and_come_back_when_freed() -> None:
    from partition_worker.core import ReleaseAlloc
    h = Harness(partition_config(policy="binpacking"))
    h.node("n1", memory=20, vcore=2).node("n2", memory=100, vcore=100).app("app1")
    h.ask("k", "app1", memory=10, vcore=1, repeat=2)
    h.step()
    assert [a.alloc.node_id for a in h.log.allocations] == ["n1", "n1"]
    assert "n1" in h.p.nodes.full and all(k[1] != "n1" for k in h.p.nodes.order)
    h.do(ReleaseAlloc("app1", h.log.allocations[0].alloc.uuid))
    assert "n1" not in h.p.nodes.full
    h.ask("k2", "app1", memory=10, vcore=1)
    h.step()
    assert h.allocs_of("k2")[0].node_id == "n1"


def test_best_effort_ask_may_use_a_node_with_memory_used_up() -> None:
    h = Harness(partition_config())
    h.node("n1", memory=10, vcore=10, pods=10).app("app1")
    h.ask("fill", "app1", memory=10, vcore=1)
    h.step()
    assert "n1" in h.p.nodes.full
    from common.resources import Resource
    from partition_worker.core import AddAsk
    h.do(AddAsk("be", "app1", Resource({"pods": 1})))
    h.step()
    assert h.allocs_of("be")[0].node_id == "n1"


def test_queue_priority_offset_orders_queues_before_usage() -> None:
    root = q("root", q("low", guaranteed={"memory": 1000}),
             q("high", guaranteed={"memory": 10}, props={"priority.offset": "100"}), submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1", memory=50).app("l", queue="root.low").app("h", queue="root.high")
    h.ask("kl", "l", repeat=5).ask("kh", "h", repeat=5)
    h.step()
    assert h.allocated_keys() == ["kh"] * 5


def test_fence_priority_policy_reports_only_the_offset() -> None:
    root = q("root", q("fenced", props={"priority.policy": "fence", "priority.offset": "-5"}),
             q("open"), submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1", memory=30).app("f", queue="root.fenced").app("o", queue="root.open")
    h.ask("kf", "f", repeat=3, priority=1000).ask("ko", "o", repeat=3, priority=0)
    h.step()
    assert h.allocated_keys() == ["ko"] * 3  # fenced queue reports -5 < 0


def test_disabled_priority_sorting_uses_submission_order_only() -> None:
    h = leaf_with("fifo")
    h.p.queues.find("root.leaf").priority_enabled = False
    h.node("n1", memory=20).app("old", queue="root.leaf").app("young", queue="root.leaf")
    h.ask("o", "old", repeat=2).ask("y", "young", repeat=2, priority=5)
    h.step()
    assert h.allocated_keys() == ["o", "o"]


def test_stateaware_many_apps_all_get_scheduled_in_order() -> None:
    h = leaf_with("stateaware")
    h.node("n1", memory=10_000)
    for i in range(20):
        h.app(f"a{i:02d}", queue="root.leaf").ask(f"k{i:02d}", f"a{i:02d}", repeat=2)
    h.step()
    assert h.allocated_keys() == [f"k{i:02d}" for i in range(20) for _ in range(2)]


def test_an_app_whose_top_priority_ask_is_placed_yields_to_a_higher_one_in_the_same_cycle() -> None:
    h = leaf_with("fifo")
    h.node("n1", memory=1000).app("x", queue="root.leaf").app("y", queue="root.leaf")
    h.ask("x-top", "x", priority=100).ask("x-low", "x", repeat=3, priority=0)
    h.ask("y-mid", "y", repeat=2, priority=50)
    h.step()
    assert h.allocated_keys() == ["x-top", "y-mid", "y-mid", "x-low", "x-low", "x-low"]


def test_a_queue_whose_top_priority_is_placed_yields_in_the_same_cycle() -> None:
    root = q("root", q("a"), q("b"), submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1", memory=1000).app("x", queue="root.a").app("y", queue="root.b")
    h.ask("a-top", "x", priority=100).ask("a-low", "x", repeat=2, priority=0)
    h.ask("b-mid", "y", repeat=2, priority=50)
    h.step()
    assert h.allocated_keys() == ["a-top", "b-mid", "b-mid", "a-low", "a-low"]


def test_queues_with_equal_usage_serve_the_one_with_more_pending_first() -> None:
    root = q("root", q("a"), q("b"), submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1", memory=10).app("x", queue="root.a").app("y", queue="root.b")
    h.ask("small", "x", memory=10).ask("big", "y", memory=10, repeat=3)
    h.step()
    assert h.allocated_keys() == ["big"]
