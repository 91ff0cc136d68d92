"""PartitionSession: real si_pb2 messages in, SI responses out, through rmproxy's rows (tests/si_session.py)."""

import json

from common import si_pb2
from tests.si_session import SISession
from tests.core.harness import START, partition_config, q
from tests.si_builders import allocation, app, ask, node, remove_app


def session() -> SISession:
    return SISession("rm1", "default", partition_config(
        q("root", q("a"), q("b"), submitacl="*")))


def add_app(s, app_id, queue="root.a", now=START, user="alice"):
    s.apply_application_request(si_pb2.ApplicationRequest(new=[app(app_id, queue, user=user)]), now)


def add_node(s, node_id, memory=1000, vcore=100, now=START, **kw):
    """``kw``: the node builder's ``action``, ``existing``."""
    s.apply_node_request(si_pb2.NodeRequest(nodes=[node(node_id, memory=memory, vcore=vcore, **kw)]), now)


def add_asks(s, *asks, now=START):
    s.apply_allocation_request(si_pb2.AllocationRequest(asks=list(asks)), now)


def app1_and_n1(**node_kw) -> SISession:
    """A session holding app1 (root.a) and node n1 (``node_kw`` as ``add_node``'s)."""
    s = session()
    add_app(s, "app1")
    add_node(s, "n1", **node_kw)
    return s


def test_allocations_come_out_as_an_allocation_response() -> None:
    s = app1_and_n1()
    add_asks(s, ask("k1", "app1", repeat=2))
    out = s.step(START)
    assert [a.allocationKey for a in out.allocation.new] == ["k1", "k1"]
    a = out.allocation.new[0]
    assert (a.nodeID, a.applicationID, a.partitionName) == ("n1", "app1", "default")
    assert a.resourcePerAlloc.resources["memory"].value == 10 and a.UUID
    assert [x.applicationID for x in out.application.accepted] == ["app1"]
    assert [u.state for u in out.application.updated] == ["New", "Accepted", "Starting", "Running"]
    assert out.application.updated[0].message == "placed in queue root.a"
    assert [n.nodeID for n in out.node.accepted] == ["n1"]
    assert s.step(START).is_empty()


def test_rejections_carry_reasons() -> None:
    s = session()
    add_app(s, "app1", queue="root.nope")
    add_asks(s, ask("k1", "ghost"))
    add_node(s, "n1")
    add_node(s, "n1")
    out = s.step(START)
    assert out.application.rejected[0].reason.startswith("application 'app1' rejected")
    assert out.allocation.rejected[0].reason == "failed to find application ghost, for allocation ask k1"
    assert "node name must be unique" in out.node.rejected[0].reason


def test_release_by_rm_is_confirmed_and_decommission_releases() -> None:
    s = app1_and_n1()
    add_asks(s, ask("k1", "app1", repeat=2))
    uuids = [a.UUID for a in s.step(START).allocation.new]
    rel = si_pb2.AllocationReleasesRequest(allocationsToRelease=[si_pb2.AllocationRelease(
        applicationID="app1", partitionName="default", UUID=uuids[0],
        terminationType=si_pb2.STOPPED_BY_RM)])
    s.apply_allocation_request(si_pb2.AllocationRequest(releases=rel), START)
    out = s.step(START)
    assert [(r.UUID, r.terminationType) for r in out.allocation.released] == [(uuids[0], si_pb2.STOPPED_BY_RM)]
    add_node(s, "n1", action=si_pb2.NodeInfo.DECOMISSION)
    out = s.step(START)
    assert [(r.UUID, r.message) for r in out.allocation.released] == [(uuids[1], "Node n1 Removed")]
    assert out.allocation.released[0].partitionName == "default"


def test_existing_allocations_are_recovered_from_node_create() -> None:
    s = app1_and_n1(existing=[allocation("pod1", "n1", "app1", memory=100, vcore=None)])
    out = s.step(START)
    assert out.allocation is None  # recovered, not newly allocated
    assert [n.nodeID for n in out.node.accepted] == ["n1"]
    snap = s.snapshot()
    assert snap["nodes"][0]["allocated"] == {"memory": 100}


def test_scheduling_states_and_events_are_forwarded() -> None:
    s = app1_and_n1(memory=5)
    add_asks(s, ask("big", "app1", memory=50))
    out = s.step(START)
    (st,) = out.scheduling_states
    assert (st.applicartionID, st.allocationKey, st.state) == (
        "app1", "big", si_pb2.UpdateContainerSchedulingStateRequest.FAILED)
    assert {e.type for e in out.events} >= {si_pb2.EventRecord.NODE, si_pb2.EventRecord.APP}
    assert len(s.event_ring) == len(out.events)


def test_snapshot_is_json_serialisable_with_yunikorn_names() -> None:
    s = app1_and_n1()
    add_asks(s, ask("k1", "app1"))
    s.step(START)
    snap = json.loads(json.dumps(s.snapshot()))
    assert snap["queues"]["queuename"] == "root"
    assert [c["queuename"] for c in snap["queues"]["children"]] == ["root.a", "root.b"]
    (app,) = snap["applications"]
    assert app["applicationID"] == "app1" and app["applicationState"] == "Starting"
    assert app["allocations"][0]["nodeId"] == "n1"
    assert snap["partition"]["totalNodes"] == 1


def test_next_wakeup_is_now_after_input_and_none_when_idle() -> None:
    s = session()
    add_node(s, "n1")
    assert s.next_wakeup_ns() is not None and s.next_wakeup_ns() <= START
    s.step(START)
    assert s.next_wakeup_ns() is None


def test_config_update_for_another_partition_is_refused() -> None:
    import pytest

    from common.config.errors import ConfigError
    from common.config.model import PartitionConfig
    s = session()
    with pytest.raises(ConfigError, match="partition other"):
        s.update_config(PartitionConfig(name="other", queues=(q("root"),)), START)


def test_stopping_the_partition_fails_apps_and_releases_everything() -> None:
    s = app1_and_n1()
    add_asks(s, ask("k1", "app1"))
    s.step(START)
    s.stop(START + 1)
    out = s.step(START + 1)
    assert [(u.state, u.message) for u in out.application.updated] == [
        ("Failing", "PartitionRemoved"), ("Failed", "PartitionRemoved")]
    assert len(out.allocation.released) == 1
    add_app(s, "app2")
    assert "is stopped" in s.step(START + 2).application.rejected[0].reason


def test_an_empty_resource_name_is_rejected_naming_the_ask_and_the_node() -> None:
    s = session()
    add_app(s, "app1")
    bad = ask("k1", "app1")
    bad.resourceAsk.resources[""].value = 1
    add_asks(s, bad)
    s.apply_node_request(si_pb2.NodeRequest(nodes=[node("n9", memory=None, vcore=None, **{"": 5})]), START)
    out = s.step(START)
    assert "ask k1" in out.allocation.rejected[0].reason
    assert out.node.rejected[0].nodeID == "n9" and "node n9" in out.node.rejected[0].reason


def test_an_unknown_node_action_is_ignored_with_an_event() -> None:
    s = session()
    s.apply_node_request(si_pb2.NodeRequest(nodes=[si_pb2.NodeInfo(nodeID="n1")]), START)
    out = s.step(START)
    assert out.node is None
    assert [e.reason for e in out.events] == ["UnknownNodeAction"]


def test_an_internal_error_becomes_an_event_and_the_rest_is_applied(monkeypatch) -> None:
    s = session()

    def boom(self, cmd, now):
        raise RuntimeError("bug")
    from partition_worker.core import partition as part_mod
    monkeypatch.setitem(part_mod._HANDLERS, part_mod.RemoveApp, boom)
    s.apply_application_request(si_pb2.ApplicationRequest(
        new=[app("a1", "root.a", user="u")], remove=[remove_app("a1")]), START)
    out = s.step(START)
    assert [a.applicationID for a in out.application.accepted] == ["a1"]
    (ev,) = [e for e in out.events if e.reason == "InternalError"]
    assert ev.objectID == "a1" and "RemoveApp for a1 failed: bug" in ev.message


def test_the_event_ring_is_bounded() -> None:
    from partition_worker.session import EVENT_RING_SIZE
    s = session()
    for i in range(EVENT_RING_SIZE + 50):
        add_node(s, f"n{i}", memory=10, vcore=1)
    s.step(START)
    assert len(s.event_ring) == EVENT_RING_SIZE
    assert s.event_ring[-1].objectID == f"n{EVENT_RING_SIZE + 49}"


def test_node_update_and_drain_through_the_session() -> None:
    s = app1_and_n1(memory=100)
    upd = si_pb2.NodeInfo(nodeID="n1", action=si_pb2.NodeInfo.UPDATE)
    upd.occupiedResource.resources["memory"].value = 95
    s.apply_node_request(si_pb2.NodeRequest(nodes=[upd]), START)
    node = s.core.nodes.get("n1")
    assert node.capacity["memory"] == 100 and node.available["memory"] == 5  # capacity kept
    s.apply_node_request(si_pb2.NodeRequest(nodes=[si_pb2.NodeInfo(
        nodeID="n1", action=si_pb2.NodeInfo.DRAIN_NODE)]), START)
    assert not node.schedulable
    s.apply_node_request(si_pb2.NodeRequest(nodes=[si_pb2.NodeInfo(
        nodeID="n1", action=si_pb2.NodeInfo.DRAIN_TO_SCHEDULABLE)]), START)
    assert node.schedulable


def test_recovered_allocation_keeps_the_creation_time_tag() -> None:
    s = app1_and_n1(existing=[allocation("pod1", "n1", "app1", partition="", tags={"creationTime": "1700000000"},
                                         vcore=None)])
    assert s.core.allocations["pod1"].create_time_ns == 1_700_000_000 * 10**9


def test_explain_counts_node_rejections_by_stage() -> None:
    import pytest
    s = app1_and_n1(memory=5)
    add_node(s, "n2", memory=500)
    s.apply_node_request(si_pb2.NodeRequest(nodes=[si_pb2.NodeInfo(
        nodeID="n2", action=si_pb2.NodeInfo.DRAIN_NODE)]), START)
    add_asks(s, ask("big", "app1", memory=50))
    s.step(START)
    why = s.explain("app1", "big")
    assert why["nodes"] == {"node(s) were unschedulable": 1, "Insufficient memory": 1}
    assert why["checks"] == {"schedulable": 1, "resources": 1}
    assert why["state"] == "FAILED" and why["queueHeadroomBlockedBy"] == ""
    with pytest.raises(LookupError, match="allocation ask nope not found for application app1"):
        s.explain("app1", "nope")


def test_a_rejected_placement_update_is_logged_by_the_session_and_the_old_rules_stay(caplog) -> None:
    import logging

    import pytest

    from common.config.errors import ConfigError
    from common.config.model import PlacementRuleConfig
    rules = (PlacementRuleConfig("fixed", value="root.a"),)
    s = SISession("rm1", "default", partition_config(q("root", q("a"), q("b"), submitacl="*"),
                                                            rules=rules))
    bad = partition_config(q("root", q("a"), q("b"), submitacl="*"), rules=(PlacementRuleConfig("fixed"),))
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError):
        s.update_config(bad, START)
    assert "new config rejected, the old one stays active" in caplog.text
    assert "a fixed queue rule must have a queue name set" in caplog.text
    add_app(s, "app1", queue="root.b")
    out = s.step(START)
    assert out.application.updated[0].message == "placed in queue root.a"


def test_allocation_uuids_are_valid_unique_and_differ_between_sources():
    import uuid

    from partition_worker.session import uuid_source
    one, other = uuid_source(), uuid_source()
    ids = [one() for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(str(uuid.UUID(i)) == i for i in ids)
    assert not set(ids) & {other() for _ in range(1000)}
