"""The partition's parts through their public surfaces: timers, ledger, lifecycle, node
registry, the scheduler's admission, the partition's cross-part steps and what a cycle acts on,
and the partition's injected inputs (new_uuid, created_ns)."""

from __future__ import annotations

import pytest

from common.config.model import LimitConfig
from common.resources import Resource
from partition_worker.core import (AddNode, AppEvent, DrainNode, Partition, RemoveNode, Termination,
                                   UndrainNode, UpdateNode)
from partition_worker.core.dao import partition_dao
from partition_worker.core.timers import Timers
from tests.core.harness import START, Harness, partition_config, q, res


# --------------------------------------------------------------------------- timers
def test_timers_fire_in_deadline_order_and_same_time_in_scheduling_order() -> None:
    fired = []
    t = Timers()
    t.register("a", lambda key, gen, now: fired.append((key, gen, now)))
    t.schedule(20, "a", "late")
    t.schedule(10, "a", "first", 1)
    t.schedule(10, "a", "second", 2)
    assert t.next_deadline() == 10 and len(t) == 3
    t.fire_due(15)
    assert fired == [("first", 1, 15), ("second", 2, 15)]
    assert t.next_deadline() == 20
    t.fire_due(20)
    assert fired[-1] == ("late", 0, 20) and t.next_deadline() is None


def test_a_timer_kind_has_one_handler_and_must_have_one() -> None:
    t = Timers()
    t.register("a", lambda *args: None)
    with pytest.raises(ValueError, match="'a' already has a handler"):
        t.register("a", lambda *args: None)
    with pytest.raises(KeyError, match="'b' has no handler"):
        t.schedule(1, "b", "k")


def test_a_handler_may_schedule_a_timer_that_is_already_due() -> None:
    t = Timers()
    seen = []

    def again(key, gen, now):
        seen.append(key)
        if key == "one":
            t.schedule(now, "a", "two")
    t.register("a", again)
    t.schedule(5, "a", "one")
    t.fire_due(5)
    assert seen == ["one", "two"]


# --------------------------------------------------------------------------- ledger
def test_the_ledger_books_an_allocation_on_node_app_and_queues_and_takes_it_back(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1", memory=30, vcore=3)
    p = h.p
    app, node = p.apps["app1"], p.nodes.get("n1")
    alloc = p.ledger.allocate(app, app.asks["k1"], node, h.now)
    assert p.ledger.allocations == {alloc.uuid: alloc} and p.allocations is p.ledger.allocations
    assert node.allocated == res(memory=30, vcore=3) and app.allocated == res(memory=30, vcore=3)
    assert p.root.allocated == res(memory=30, vcore=3) and p.root.pending.is_zero()
    p.ledger.release(alloc, Termination.STOPPED_BY_RM, "gone", h.now, report=True)
    assert p.ledger.allocations == {} and node.allocated.is_zero() and p.root.allocated.is_zero()
    assert [r.uuid for r in p.outcomes.released] == [alloc.uuid]
    p.ledger.release(alloc, Termination.STOPPED_BY_RM, "gone", h.now, report=True)  # no-op
    assert len(p.outcomes.released) == 1


def test_the_ledger_keeps_both_sides_of_a_reservation(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    p = h.p
    app, node = p.apps["app1"], p.nodes.get("n1")
    ask = app.asks["k1"]
    p.ledger.reserve(app, ask, node, h.now)
    res_ = p.ledger.reservations[("app1", "k1")]
    assert node.reservation is res_ and app.reservations["k1"] is res_ and ask.reserved_node == "n1"
    assert node.node_id not in [key[1] for key in p.nodes.order]  # set aside: takes no other ask
    p.ledger.unreserve_ask(app, ask)
    assert node.reservation is None and app.reservations == {} and ask.reserved_node == ""
    assert p.ledger.reservations == {} and any(key[1] == "n1" for key in p.nodes.order)


def test_replacing_an_ask_drops_the_old_reservation_and_pending(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1", memory=30, repeat=2)
    p = h.p
    app = p.apps["app1"]
    p.ledger.reserve(app, app.asks["k1"], p.nodes.get("n1"), h.now)
    h.ask("k1", "app1", memory=5)
    assert p.ledger.reservations == {} and p.root.pending == res(memory=5, vcore=1)
    p.ledger.remove_ask(app, "k1")
    assert p.root.pending.is_zero() and "k1" not in app.asks


# --------------------------------------------------------------------------- lifecycle
def test_an_illegal_app_event_is_refused_with_an_event(h: Harness) -> None:
    h.app("app1")
    app = h.p.apps["app1"]
    assert h.p.lifecycle.fire(app, AppEvent.COMPLETE, h.now) is False
    assert app.state.value == "New"
    (ev,) = [e for e in h.p.outcomes.events if e.reason == "IllegalTransition"]
    assert "completeApplication" in ev.message and "New" in ev.message


def test_a_recovered_app_is_adopted_in_the_recovery_queue_once(h: Harness) -> None:
    lc = h.p.lifecycle
    app = lc.adopt_recovered("ghost", h.now)
    assert app.queue.path == "root.@recovery@" and app.recovered_only
    assert lc.adopt_recovered("ghost", h.now) is app and h.p.apps["ghost"] is app


# --------------------------------------------------------------------------- node registry
def test_the_total_capacity_and_root_max_follow_the_nodes(h: Harness) -> None:
    reg = h.p.node_registry
    h.node("n1", memory=100, vcore=10).node("n2", memory=50, vcore=5)
    assert reg.total == h.p.total == res(memory=150, vcore=15) == h.p.root.max
    h.do(UpdateNode("n2", Resource({"memory": 70, "vcore": 5})))
    assert reg.total == res(memory=170, vcore=15)
    h.do(RemoveNode("n1"), RemoveNode("n2"))
    assert reg.total.is_zero() and h.p.root.max is None


def test_a_shrunk_node_drops_a_reservation_it_can_no_longer_hold(h: Harness) -> None:
    h.node("n1", memory=100, vcore=10).app("app1").ask("k1", "app1", memory=80)
    app = h.p.apps["app1"]
    h.p.ledger.reserve(app, app.asks["k1"], h.p.nodes.get("n1"), h.now)
    h.do(UpdateNode("n1", Resource({"memory": 90, "vcore": 10})))
    assert h.p.ledger.reservations  # still holds it
    h.do(UpdateNode("n1", occupied=Resource({"memory": 20})))
    assert h.p.ledger.reservations == {}


# --------------------------------------------------------------------------- injected inputs
def test_uuids_and_the_creation_time_are_inputs() -> None:
    with pytest.raises(TypeError):
        Partition("default", partition_config(), rm_id="rm1")  # no uuid4 fallback, no clock
    p = Partition("default", partition_config(), rm_id="rm1", new_uuid=lambda: "u-1",
                  created_ns=START + 5)
    assert p.state_time_ns == START + 5
    assert partition_dao(p, "default", "rm1")["lastStateTransitionTime"] == START + 5
    p.handle(AddNode("n1", Resource({"memory": 10, "vcore": 1})), START + 6)
    p.stop(START + 9)
    assert partition_dao(p, "default", "rm1")["lastStateTransitionTime"] == START + 9


def test_a_relabelled_node_drops_a_reservation_whose_selector_it_no_longer_matches(h: Harness) -> None:
    h.node("n1", memory=100, vcore=10, attrs={"zone": "a"}).app("app1")
    h.ask("k1", "app1", memory=80, tags={"korral.io/node-selector/zone": "a"})
    app = h.p.apps["app1"]
    h.p.ledger.reserve(app, app.asks["k1"], h.p.nodes.get("n1"), h.now)
    h.do(UpdateNode("n1", attributes={"ready": "false"}))
    assert h.p.ledger.reservations  # not ready may pass: the reservation stays
    h.do(UpdateNode("n1", attributes={"ready": "true", "zone": "b"}))
    assert h.p.ledger.reservations == {}
    h.step()
    assert h.allocs_of("k1") == []


# --------------------------------------------------------------------------- cross-part steps
def test_the_ledger_books_a_release_and_the_partition_moves_the_app_on(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    p = h.p
    app = p.apps["app1"]
    (alloc,) = app.allocations.values()
    assert p.ledger.release(alloc, Termination.STOPPED_BY_RM, "gone", h.now, report=True) is app
    assert app.state.value == "Starting" and app.is_idle()  # the ledger does not move the app on
    assert p.ledger.release(alloc, Termination.STOPPED_BY_RM, "gone", h.now, report=True) is None
    h.ask("k2", "app1").step()
    (alloc,) = app.allocations.values()
    p.release(alloc, Termination.STOPPED_BY_RM, "gone", h.now)
    assert app.state.value == "Completing"  # its last work ended


def test_admission_checks_the_user_limit_before_the_queue_headroom() -> None:
    limit = LimitConfig(users=("alice",), maxresources={"memory": 25})
    h = Harness(partition_config(q("root", q("default", max={"memory": 20}, limits=(limit,)), submitacl="*")))
    h.node("n1").app("app1")
    admit = h.p.scheduler.admit
    app = h.p.apps["app1"]
    lim, path = admit(app, res(memory=30, vcore=1))  # both would hold it: the limit is named
    assert path == "root.default" and (lim.kind, lim.name, lim.max) == ("user", "alice", res(memory=25))
    assert admit(app, res(memory=22, vcore=1)).path == "root.default"  # the queue's max
    assert admit(app, res(memory=5, vcore=1)) is None
    assert admit(app, res(memory=5, vcore=5000)) is h.p.root  # root's max: the cluster's size


# --------------------------------------------------------------------------- what a cycle acts on
def test_a_cycle_runs_only_after_something_it_may_act_on(h: Harness) -> None:
    h.node("n1", memory=100).app("app1").ask("k1", "app1", memory=200)
    h.step()
    assert not h.p.changed
    h.do(DrainNode("n1"))
    assert not h.p.changed  # a drained node gives a cycle nothing more to place
    h.do(UndrainNode("n1"))
    assert h.p.changed
    h.step()
    h.app("app2")
    assert not h.p.changed  # an app without asks neither
    h.ask("k2", "app2", memory=5)
    assert h.p.changed
    cycles = h.p.cycles
    h.step()
    assert h.p.cycles == cycles + 1 and not h.p.changed
    h.do(UpdateNode("n1", capacity=Resource({"memory": 300, "vcore": 10})))
    assert h.p.changed and h.p.next_wakeup_ns() == h.p.last_cycle_ns  # due now
