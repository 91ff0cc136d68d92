"""Node actions: CREATE (with recovery), UPDATE, DRAIN_NODE, DRAIN_TO_SCHEDULABLE, DECOMISSION."""

from partition_worker.core import (AddApp, DrainNode, RecoveredAlloc, RemoveNode, Termination,
                                   UndrainNode, UpdateNode)
from tests.core.harness import Harness, partition_config, q, res


def test_create_accepts_a_node_and_grows_root_max(h: Harness) -> None:
    h.node("n1", memory=100, vcore=10).node("n2", memory=50, vcore=5)
    assert [n.node_id for n in h.log.nodes_accepted] == ["n1", "n2"]
    assert h.p.root.max == res(memory=150, vcore=15)
    assert [e.object_id for e in h.events("NodeAdded")] == ["n1", "n2"]


def test_create_of_an_existing_node_is_rejected_with_yunikorn_reason(h: Harness) -> None:
    h.node("n1").node("n1")
    (rej,) = h.log.nodes_rejected
    assert rej.reason == ("failure while adding new node, node rejected with error: failed to add "
                          "node n1 to partition [rm1]default, error: partition [rm1]default has an "
                          "existing node n1, node name must be unique")


def test_occupied_resources_reduce_what_the_core_may_use(h: Harness) -> None:
    h.node("n1", memory=100, occupied={"memory": 70}).app("app1").ask("k", "app1", memory=20, repeat=3)
    assert h.step() == 1


def test_not_ready_node_is_not_scheduled_until_ready(h: Harness) -> None:
    h.node("n1", attrs={"ready": "false"}).app("app1").ask("k", "app1")
    assert h.step() == 0
    h.do(UpdateNode("n1", attributes={"ready": "true"}))
    assert h.step() == 1


def test_update_changes_capacity_at_once(h: Harness) -> None:
    h.node("n1", memory=10).app("app1").ask("k", "app1", memory=10, repeat=3)
    assert h.step() == 1
    h.do(UpdateNode("n1", capacity=res(memory=30, vcore=1000)))
    assert h.p.root.max == res(memory=30, vcore=1000)
    assert h.step() == 2


def test_a_shrunk_node_stays_over_allocated_until_allocations_end(h: Harness) -> None:
    h.node("n1", memory=30).app("app1").ask("k", "app1", memory=10, repeat=3)
    h.step()
    h.do(UpdateNode("n1", capacity=res(memory=10, vcore=1000)))
    node = h.p.nodes.get("n1")
    assert node.available["memory"] == -20 and len(node.allocations) == 3
    h.ask("k2", "app1", memory=1)
    assert h.step() == 0


def test_update_of_an_unknown_node_fails_with_an_event(h: Harness) -> None:
    h.do(UpdateNode("ghost", capacity=res(memory=1)))
    (ev,) = h.events("NodeNotFound")
    assert "ghost" in ev.message and "UPDATE" in ev.message


def test_drained_node_gets_no_new_allocations_until_schedulable(h: Harness) -> None:
    h.node("n1").app("app1").ask("k", "app1")
    h.do(DrainNode("n1"))
    assert h.step() == 0
    h.do(UndrainNode("n1"))
    assert h.step() == 1


def test_drain_to_schedulable_on_a_node_that_is_not_draining_is_an_error(h: Harness) -> None:
    h.node("n1").do(UndrainNode("n1"))
    (ev,) = h.events("NodeNotDraining")
    assert "not draining" in ev.message


def test_decommission_releases_every_allocation_on_the_node(h: Harness) -> None:
    h.node("n1", memory=20).node("n2", memory=20).app("app1").ask("k", "app1", memory=10, repeat=4)
    h.step()
    on_n1 = {a.alloc.uuid for a in h.log.allocations if a.alloc.node_id == "n1"}
    h.do(RemoveNode("n1"))
    assert {r.uuid for r in h.log.released} == on_n1
    assert all(r.message == "Node n1 Removed" and r.termination is Termination.STOPPED_BY_RM
               for r in h.log.released)
    assert h.p.nodes.get("n1") is None
    assert h.p.root.allocated == res(memory=20, vcore=2)
    assert h.p.root.max == res(memory=20, vcore=1000)


def test_existing_allocations_are_recovered_without_scheduling_and_over_max() -> None:
    root = q("root", q("small", max={"memory": 5}), submitacl="*")
    h = Harness(partition_config(root))
    h.app("app1", queue="root.small")
    ra = RecoveredAlloc(uuid="rm-uuid-1", key="pod1", app_id="app1", resource=res(memory=50, vcore=1))
    h.node("n1", existing=[ra])
    assert h.log.allocations == []
    assert h.p.queues.find("root.small").allocated == res(memory=50, vcore=1)
    assert h.p.nodes.get("n1").allocated == res(memory=50, vcore=1)
    assert h.p.allocations["rm-uuid-1"].recovered
    assert h.states("app1") == ["Accepted", "Starting"]


def test_recovered_allocation_of_an_unknown_app_creates_it_then_adopts_it(h: Harness) -> None:
    ra = RecoveredAlloc(uuid="u1", key="pod1", app_id="late", resource=res(memory=5, vcore=1))
    h.node("n1", existing=[ra])
    assert h.p.apps["late"].queue.path == "root.@recovery@"
    h.app("late", queue="root.default")
    assert h.log.apps_accepted[-1].app_id == "late"
    assert h.p.apps["late"].queue.path == "root.default"
    assert h.p.queues.find("root.default").allocated == res(memory=5, vcore=1)
    h.step()
    assert h.p.queues.find("root.@recovery@") is None


def test_recovered_allocation_without_uuid_rejects_the_node(h: Harness) -> None:
    h.app("app1")
    ra = RecoveredAlloc(uuid="", key="pod1", app_id="app1", resource=res(memory=5))
    h.node("n1", existing=[ra])
    (rej,) = h.log.nodes_rejected
    assert rej.reason.endswith("failing to restore allocation pod1 for application app1: missing uuid")
    assert h.p.nodes.get("n1") is None and h.p.root.allocated.is_zero()


def test_required_node_tag_places_only_on_that_node(h: Harness) -> None:
    h.node("n1").node("n2").app("app1")
    h.ask("ds", "app1", tags={"yunikorn.apache.org/requiredNode": "n2"})
    h.step()
    assert h.allocs_of("ds")[0].node_id == "n2"


def test_node_selector_tag_matches_attributes_and_node_labels(h: Harness) -> None:
    h.node("n1", attrs={"zone": "a"}).node("n2", attrs={"si.io/nodelabels": '{"zone": "b"}'})
    h.app("app1").ask("k", "app1", tags={"korral.io/node-selector/zone": "b"})
    h.ask("k2", "app1", tags={"korral.io/node-selector/zone": "c"})
    h.step()
    assert [a.alloc.node_id for a in h.log.allocations] == ["n2"]


def test_adding_an_app_to_a_stopped_partition_is_rejected(h: Harness) -> None:
    h.p.stop(h.now)
    h.do(AddApp("a1", "root.default", "alice"))
    assert h.rejected_app_reasons()["a1"] == \
        "partition [rm1]default is stopped cannot add a new application a1"


def test_negative_node_resources_are_refused_naming_the_node(h: Harness) -> None:
    h.node("n1", memory=-5)
    (rej,) = h.log.nodes_rejected
    assert "node n1: schedulable resource" in rej.reason and "negative" in rej.reason
    h.node("n2").do(UpdateNode("n2", occupied=res(memory=-1)))
    (ev,) = h.events("InvalidNodeUpdate")
    assert ev.object_id == "n2" and "occupied" in ev.message
    assert h.p.nodes.get("n2").occupied.is_zero()


def test_negative_placeholder_ask_rejects_the_app(h: Harness) -> None:
    h.app("a1", placeholder_ask=res(memory=-1))
    assert "placeholderAsk" in h.rejected_app_reasons()["a1"]
