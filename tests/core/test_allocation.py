"""Asks become allocations: fifo cycle, maxAllocations, priorities, headroom, rejections."""

import pytest

from partition_worker.core import AddAsk, CoreSettings, ReleaseAlloc, ReleaseAsk, Termination
from tests.core.harness import Harness, partition_config, q, res


def test_an_ask_on_a_fitting_node_is_allocated_in_one_step(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    assert h.step() == 1
    (alloc,) = h.allocs_of("k1")
    assert alloc.node_id == "n1" and alloc.app_id == "app1" and alloc.uuid == "uuid-1"
    assert h.p.root.allocated == res(memory=10, vcore=1)
    assert h.p.queues.find("root.default").pending.is_zero()


def test_max_allocations_allocates_the_ask_that_many_times(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1", repeat=5)
    assert h.step() == 5
    assert len({a.uuid for a in h.allocs_of("k1")}) == 5


def test_ten_thousand_asks_are_one_cycle_of_work(h: Harness) -> None:
    h.nodes(20, memory=10_000, vcore=10_000).app("app1")
    for i in range(10_000):
        h.p.handle(AddAsk(f"k{i}", "app1", res(memory=10, vcore=1)), h.now)
    assert h.step() == 10_000
    assert h.p.cycles == 1


def test_a_bounded_cycle_goes_on_in_the_next_step_in_the_same_order() -> None:
    h = Harness(settings=CoreSettings(cycle_allocation_limit=3))
    h.node("n1").app("app1")
    for i in range(7):
        h.ask(f"k{i}", "app1")
    assert h.step() == 3
    assert h.p.next_wakeup_ns() <= h.now  # stopped at the bound: the next step is due at once
    assert [h.step(), h.step(), h.step()] == [3, 1, 0]
    assert h.allocated_keys() == [f"k{i}" for i in range(7)]


def test_exhausted_asks_leave_the_order_whether_first_or_in_the_middle(h: Harness) -> None:
    h.node("n1").app("app1")
    for i in range(5):
        h.ask(f"k{i}", "app1")
    app = h.p.apps["app1"]
    assert [a.key for a in app.ordered_asks()] == ["k0", "k1", "k2", "k3", "k4"]
    h.do(ReleaseAsk("app1", "k0"), ReleaseAsk("app1", "k3"))  # the head and one in the middle
    assert [a.key for a in app.ordered_asks()] == ["k1", "k2", "k4"]
    h.step()
    assert h.allocated_keys() == ["k1", "k2", "k4"] and app.ordered_asks() == []


def test_higher_priority_asks_are_allocated_first(h: Harness) -> None:
    h.node("n1", memory=20).app("app1")
    h.ask("low", "app1", priority=1).ask("high", "app1", priority=10).ask("mid", "app1", priority=5)
    h.step()
    assert h.allocated_keys() == ["high", "mid"]


def test_same_priority_asks_go_in_creation_order(h: Harness) -> None:
    h.node("n1", memory=20).app("app1")
    h.ask("first", "app1").ask("second", "app1").ask("third", "app1")
    h.step()
    assert h.allocated_keys() == ["first", "second"]


def test_replacing_an_ask_adjusts_pending_by_the_delta(h: Harness) -> None:
    h.app("app1").ask("k1", "app1", memory=10, repeat=2)
    assert h.p.root.pending == res(memory=20, vcore=2)
    h.ask("k1", "app1", memory=30, repeat=1)
    assert h.p.root.pending == res(memory=30, vcore=1)
    assert h.p.apps["app1"].pending == res(memory=30, vcore=1)


def test_releasing_an_ask_by_key_removes_its_pending(h: Harness) -> None:
    h.app("app1").ask("k1", "app1").ask("k2", "app1")
    h.do(ReleaseAsk("app1", "k1"))
    assert set(h.p.apps["app1"].asks) == {"k2"}
    assert h.p.root.pending == res(memory=10, vcore=1)


def test_releasing_all_asks_of_an_app_with_an_empty_key(h: Harness) -> None:
    h.app("app1").ask("k1", "app1").ask("k2", "app1")
    h.do(ReleaseAsk("app1", ""))
    assert h.p.apps["app1"].asks == {}
    assert h.p.root.pending.is_zero()


def test_an_rm_release_of_an_allocation_is_confirmed_as_stopped_by_rm(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    (alloc,) = h.allocs_of("k1")
    h.do(ReleaseAlloc("app1", alloc.uuid, Termination.STOPPED_BY_RM, "done"))
    (rel,) = h.log.released
    assert (rel.uuid, rel.termination, rel.message) == (
        alloc.uuid, Termination.STOPPED_BY_RM, "allocation remove as per RM request")
    assert h.p.root.allocated.is_zero() and h.p.nodes.get("n1").allocated.is_zero()


def test_a_timeout_release_from_the_rm_is_not_echoed(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid, Termination.TIMEOUT))
    assert h.log.released == [] and h.p.allocations == {}


@pytest.mark.parametrize("cmd, reason", [
    (AddAsk("k", "nope", res(memory=1)), "failed to find application nope, for allocation ask k"),
    (AddAsk("k", "app1", res()), "invalid ask added to app app1: "),
    (AddAsk("k", "app1", res(memory=0)), "invalid ask added to app app1: "),
    (AddAsk("k", "app1", res(memory=-5, vcore=1)), "invalid ask added to app app1: "),
    (AddAsk("k", "app1", res(memory=1), max_allocations=0), "invalid ask added to app app1: "),
    (AddAsk("k", "app1", res(memory=1), placeholder=True), "ask cannot be nil when added to app app1"),
], ids=["unknown app", "empty resource", "zero quantity", "negative quantity",
        "zero maxAllocations", "placeholder without task group"])
def test_bad_asks_are_rejected_with_yunikorn_reasons(h: Harness, cmd, reason) -> None:
    h.app("app1").do(cmd)
    assert h.rejected_ask_reasons()["k"].startswith(reason)
    assert "app1" not in h.p.apps or "k" not in h.p.apps["app1"].asks


def test_an_ask_that_fits_no_node_stays_pending_with_a_failed_state(h: Harness) -> None:
    h.node("n1", memory=5).app("app1").ask("big", "app1", memory=10)
    assert h.step() == 0
    assert h.p.apps["app1"].asks["big"].pending == 1
    (st,) = h.log.sched_states
    assert st.state.value == "FAILED"
    assert st.reason == "request is waiting for cluster resources become available"
    h.node("n2", memory=50)
    assert h.step() == 1
    assert h.allocs_of("big")[0].node_id == "n2"
    assert h.log.sched_states[-1].state.value == "SCHEDULED"


@pytest.mark.parametrize("level", ["leaf", "parent"])
def test_a_queue_never_allocates_beyond_its_or_an_ancestors_max(level) -> None:
    leaf_max = {"memory": 25} if level == "leaf" else None
    parent_max = {"memory": 25} if level == "parent" else None
    root = q("root", q("p", q("leaf", max=leaf_max), max=parent_max), submitacl="*")
    h = Harness(partition_config(root))
    h.node("n1").app("app1", queue="root.p.leaf").ask("k", "app1", memory=10, repeat=5)
    assert h.step() == 2
    blocked = "root.p.leaf" if level == "leaf" else "root.p"
    (ev,) = h.events("InsufficientQueueResources")
    assert ev.message == f"Application app1 does not fit into {blocked} queue"
    assert h.log.sched_states[-1].state.value == "SKIPPED"


def test_root_headroom_is_the_cluster_size(h: Harness) -> None:
    h.node("n1", memory=30).app("app1").ask("k", "app1", memory=10, repeat=5)
    assert h.step() == 3
    assert h.p.root.max == res(memory=30, vcore=1000)


def test_a_fully_placed_ask_is_forgotten_once_its_allocation_ends(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1").ask("k2", "app1", repeat=2)
    h.step()
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid))
    assert "k1" not in h.p.apps["app1"].asks
    h.ask("k1", "app1")  # the same key again is a new ask
    assert h.step() == 1


def test_app_priority_follows_its_remaining_asks(h: Harness) -> None:
    h.node("n1", memory=20).app("app1")
    h.ask("a", "app1", priority=9).ask("b", "app1", priority=5).ask("c", "app1", priority=1)
    app = h.p.apps["app1"]
    assert app.max_pending_priority() == 9
    h.step()  # a and b placed, c waits
    assert app.max_pending_priority() == 1
    h.ask("d", "app1", priority=7)
    assert app.max_pending_priority() == 7
    h.do(ReleaseAsk("app1", "d"))
    assert app.max_pending_priority() == 1
    assert [x.key for x in app.ordered_asks()] == ["c"]
