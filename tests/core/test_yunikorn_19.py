"""Today's YuniKorn (1.9) on the pure core and a worker's session: the compatibility switch
chosen by the RM (its extraConfig, its build, its SI revision) and what follows from it; in-place
resize; the recovery rule; reservations held by quota cancelled after the wait timeout; the
app-added and quota-preemption events."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common import si_internal_pb2 as si, si_pb2
from common.compat import NEWEST, Compat
from common.config.errors import ConfigError
from common.config.model import LimitConfig, PlacementRuleConfig, PreemptionConfig
from common.resources import Resource
from common.si_revision import Revision
from partition_worker.core.commands import AddAllocation, RecoveredAlloc, ResizeAllocation
from partition_worker.core.dao import placement_rules_dao
from partition_worker.core.outcomes import Event, EventType
from partition_worker.core.settings import CoreSettings
from partition_worker.events import event_dao
from tests.core.harness import SECOND, START, Harness, partition_config, q
from tests.si_builders import internal
from tests.si_session import SISession

TODAY = Compat(NEWEST)
KEY = "korral.compatibility"


def _session(extra=None, build=None, root=None, preemption: bool | None = None) -> SISession:
    cfg = partition_config(root or q("root", q("a"), submitacl="*"))
    if preemption is not None:
        cfg = replace(cfg, preemption=PreemptionConfig(enabled=preemption))
    s = SISession("rm1", "default", cfg)
    s.follow_rm(extra, build)
    return s


# ------------------------------------------------------------------------------ the switch, per RM
def test_an_undecided_rm_has_the_seeds_switch_until_its_revision_says_v1_8():
    s = _session()
    assert s.compatibility.source == "default" and s.core.settings.compat.text == "1.2"
    assert not s.core.preemption_enabled  # preemption.enabled unset: off, as v1.2
    s.set_revision(Revision.V18)
    assert s.compatibility.as_dict() == {"version": "1.9", "source": "SI revision", "detail": "v1.8"}
    assert s.core.settings.compat == TODAY
    assert s.core.preemption_enabled  # unset means on since YuniKorn 1.4


def test_a_seed_rm_keeps_the_seeds_switch():
    s = _session()
    s.set_revision(Revision.SEED)
    assert s.compatibility.describe() == "1.2 (SI revision: seed)"
    assert not s.core.preemption_enabled


def test_a_build_of_today_chooses_the_newest_release_at_once_and_an_explicit_value_beats_everything():
    assert _session(build={"buildVersion": "1.7.0"}).core.settings.compat == TODAY
    s = _session(extra={KEY: "1.2"}, build={"buildVersion": "1.9.0"})
    s.set_revision(Revision.V18)
    assert s.core.settings.compat.text == "1.2" and s.compatibility.source == "explicit"


@pytest.mark.parametrize("configured, compat, on", [(None, "1.2", False), (None, "1.4", True), (None, "1.9", True),
                                                    (False, "1.9", False), (True, "1.2", True)])
def test_preemption_enabled_unset_follows_the_switch_and_a_configured_value_stays(configured, compat, on):
    s = _session(extra={KEY: compat}, preemption=configured)
    assert s.core.preemption_enabled is on


def test_an_unknown_switch_value_is_refused_naming_the_rm_and_a_config_update_keeps_the_old_one():
    with pytest.raises(ConfigError, match=r"RM rm1: extraConfig korral.compatibility: unknown value '2.0'"):
        _session(extra={KEY: "2.0"})
    s = _session(extra={KEY: "1.8"})
    with pytest.raises(ConfigError, match=r"RM rm1: extraConfig korral.compatibility: unknown value '1.11'"):
        s.update_config(s.core.config, START, {KEY: "1.11"})
    assert s.core.settings.compat.text == "1.8" and s.compatibility.source == "explicit"
    s.update_config(s.core.config, START, {})  # the key removed: chosen by the RM again
    assert s.compatibility.source == "default"
    s.set_revision(Revision.V18)
    assert s.core.settings.compat == TODAY


def test_a_v1_8_rm_never_sees_starting():
    s = _session()
    s.set_revision(Revision.V18)
    s.apply_node_request(si.NodeRequest(nodes=[internal.node("n1", memory=100, vcore=None)]), START)
    s.apply_application_request(si.ApplicationRequest(new=[internal.app("app1", "root.a", tags={})]), START)
    s.apply_allocation_request(si.AllocationRequest(allocations=[
        internal.allocation("k1", "", "app1", uuid="", memory=10, vcore=None)]), START)
    states = []
    for i in range(3):
        out = s.step(START + i * SECOND)
        if out.application is not None:
            states += [u.state for u in out.application.updated]
    assert "Running" in states and "Starting" not in states


# ------------------------------------------------------------------------------ the core follows at once
def test_the_core_follows_a_new_switch_at_once():
    h = Harness(config=partition_config(q("root", q("a", props={"application.sort.policy": "stateaware"}),
                                          submitacl="*")), settings=CoreSettings())
    assert not h.p.preemption_enabled and not h.p.queues.stateaware_fifo
    h.p.set_compat(TODAY)
    assert h.p.preemption_enabled and h.p.queues.stateaware_fifo and h.p.changed


# ------------------------------------------------------------------------------ in-place resize


def _resize_h(limit: int = 0, quota: bool = False) -> Harness:
    limits = (LimitConfig(users=("alice",), maxresources={"memory": limit}),) if limit else ()
    props = {"quota.preemption.delay": "10s"} if quota else None
    root = q("root", q("a", max={"memory": 200}, limits=limits, props=props), q("b"), submitacl="*")
    cfg = partition_config(root)
    if quota:
        cfg = replace(cfg, preemption=PreemptionConfig(quotapreemptionenabled=True))
    h = Harness(config=cfg, settings=CoreSettings(compat=TODAY))
    h.node("n1", memory=300, vcore=100)
    h.app("app1", "root.a", "alice")
    h.ask("k1", "app1", memory=100, vcore=1)
    h.step()
    assert h.allocated_keys() == ["k1"]
    return h


def _books(h: Harness) -> tuple:
    n = h.p.nodes.get("n1")
    return (n.allocated.get("memory"), h.p.apps["app1"].allocated.get("memory"),
            h.p.queues.find("root.a").allocated.get("memory"), h.p.root.allocated.get("memory"))


def _resize(h: Harness, memory: int | None, vcore: int | None = 1, key: str = "k1") -> None:
    uuid = h.allocs_of(key)[0].uuid
    values = {k: v for k, v in (("memory", memory), ("vcore", vcore)) if v is not None}
    h.do(ResizeAllocation("app1", uuid, Resource(values)))


def test_a_resize_changes_node_app_queue_and_user_usage():
    h = _resize_h(limit=250)
    _resize(h, 180)
    assert _books(h) == (180, 180, 180, 180)
    assert h.events("AllocationResized")[0].message == (
        "allocation k1 of application app1 on node n1 resized from Resource({memory:100, vcore:1}) to "
        "Resource({memory:180, vcore:1})")
    h.ask("k2", "app1", memory=80, vcore=1)  # alice: 180 + 80 > her 250
    h.step()
    assert "k2" not in h.allocated_keys() and h.events("UserLimitReached")
    _resize(h, 50)  # a shrink frees room: the held ask is placed by the next cycle
    h.step()
    assert "k2" in h.allocated_keys() and _books(h) == (130, 130, 130, 130)


def test_a_growth_past_the_nodes_room_is_refused_naming_the_allocation_and_nothing_changes():
    h = _resize_h()
    h.app("other", "root.b", "bob")
    h.ask("o1", "other", memory=150, vcore=1)
    h.step()
    _resize(h, 200)  # 50 free on n1, 100 more asked
    assert _books(h) == (250, 100, 100, 250)
    reason = h.rejected_ask_reasons()["k1"]
    assert reason == ("resize of allocation k1 of application app1 on node n1 to Resource({memory:200, vcore:1}) "
                      "refused: node n1 has no room to grow it by Resource({memory:100}) (free: "
                      "Resource({memory:50, vcore:98})); it keeps Resource({memory:100, vcore:1})")
    assert h.events("AllocationResizeRefused")


@pytest.mark.parametrize("memory, vcore, why", [(-5, 1, "allocation contains negative resources"),
                                                (0, 0, "allocation contains no resources")])
def test_a_resize_to_a_negative_or_empty_size_is_refused(memory, vcore, why):
    h = _resize_h()
    _resize(h, memory, vcore)
    assert _books(h) == (100, 100, 100, 100)
    assert h.rejected_ask_reasons()["k1"].endswith(f"refused: {why}; it keeps Resource({{memory:100, vcore:1}})")


def test_a_resize_over_the_queue_max_is_booked_and_arms_quota_preemption():
    h = _resize_h(quota=True)
    _resize(h, 250)  # root.a's max is 200: YuniKorn books it "at any cost"
    assert _books(h)[2] == 250
    assert h.p.queues.find("root.a").quota_preemption_at_ns == h.now + 10 * SECOND


def test_resizing_what_is_not_placed_or_a_placeholder_is_refused():
    h = _resize_h()
    h.do(ResizeAllocation("app1", "nope", Resource({"memory": 10})))
    assert h.rejected_ask_reasons()["nope"] == "allocation nope of application app1 is not placed: nothing to resize"
    h.do(AddAllocation(RecoveredAlloc(uuid="ph1", key="ph1", app_id="app1", resource=Resource({"memory": 10}),
                                      node_id="n1", placeholder=True, task_group="tg")))
    h.do(ResizeAllocation("app1", "ph1", Resource({"memory": 20})))
    assert "a placeholder is not resized" in h.rejected_ask_reasons()["ph1"]


def _v18_session() -> SISession:
    s = _session(root=q("root", q("a"), submitacl="*"))
    s.set_revision(Revision.V18)
    s.apply_node_request(si.NodeRequest(nodes=[internal.node("n1", memory=100, vcore=None)]), START)
    s.apply_application_request(si.ApplicationRequest(new=[internal.app("app1", "root.a", tags={})]), START)
    return s


def _send(s: SISession, memory: int, node: str = "n1"):
    s.apply_allocation_request(si.AllocationRequest(allocations=[
        internal.allocation("k1", node, "app1", uuid="", memory=memory, vcore=None)]), START)
    return s.step(START)


def test_a_v1_8_rm_resizes_a_placed_allocation_by_sending_it_again():
    s = _v18_session()
    assert [a.allocationKey for a in _send(s, 40).allocation.new] == ["k1"]
    out = _send(s, 70)  # the pod was resized in place: nothing comes back, the books follow
    assert out.allocation is None or not (out.allocation.new or out.allocation.rejectedAllocations)
    assert s.core.allocations["k1"].resource == Resource({"memory": 70})
    assert s.core.nodes.get("n1").allocated == Resource({"memory": 70})
    assert [e.reason for e in _send(s, 70).events] == ["AllocationUnchanged"]
    out = _send(s, 30, node="")  # an allocation without its node: the same update (YuniKorn)
    assert s.core.allocations["k1"].resource == Resource({"memory": 30})
    refused = _send(s, 200).allocation.rejectedAllocations
    assert [(r.allocationKey, r.applicationID) for r in refused] == [("k1", "app1")]
    assert "it keeps Resource({memory:30})" in refused[0].reason and s.core.allocations["k1"].resource == Resource({"memory": 30})
    refused = _send(s, -1).allocation.rejectedAllocations
    assert refused[0].reason == ("resize of allocation k1 of application app1 on node n1 to Resource({memory:-1}) "
                                 "refused: allocation contains negative resources; it keeps Resource({memory:30})")


def test_a_seed_rm_cannot_resize_and_is_told_so():
    s = _session(root=q("root", q("a"), submitacl="*"))
    s.set_revision(Revision.SEED)
    s.apply_node_request(si.NodeRequest(nodes=[internal.node("n1", memory=100, vcore=None)]), START)
    s.apply_application_request(si.ApplicationRequest(new=[internal.app("app1", "root.a", tags={})]), START)
    s.apply_allocation_request(si.AllocationRequest(asks=[internal.ask("k1", "app1", memory=40, vcore=None)]), START)
    placed = s.step(START).allocation.new[0]
    again = internal.allocation("k1", "n1", "app1", uuid=placed.UUID, memory=70, vcore=None)
    s.apply_node_request(si.NodeRequest(nodes=[internal.node("n1", action=si.NodeInfo.UPDATE, memory=100, vcore=None,
                                                             existing=[again])]), START)
    events = [e for e in s.step(START).events if e.reason == "AllocationResizeUnsupported"]
    assert len(events) == 1 and "the seed's SI has no in-place resize" in events[0].message
    assert s.core.allocations[placed.UUID].resource == Resource({"memory": 40})


# ------------------------------------------------------------------------------ the recovery rule
def _placement_h(compat: Compat, default: bool = False) -> Harness:
    leaves = (q("a"), q("default")) if default else (q("a"),)
    root = q("root", *leaves, submitacl="*")
    rules = (PlacementRuleConfig(name="provided", create=False),)
    return Harness(config=partition_config(root, rules=rules), settings=CoreSettings(compat=compat))


@pytest.mark.parametrize("compat, forced_to", [(Compat((1, 2)), None), (Compat((1, 4)), "root.@recovery@"),
                                               (TODAY, "root.@recovery@")])
def test_a_forced_app_no_rule_places_goes_to_the_recovery_queue_from_1_4(compat, forced_to):
    h = _placement_h(compat)
    h.app("forced", "root.nowhere", tags={"application.create.force": "true"})
    h.app("plain", "root.nowhere")
    assert h.rejected_app_reasons().keys() == ({"plain"} if forced_to else {"forced", "plain"})
    if forced_to:
        assert h.p.apps["forced"].queue.path == forced_to


def test_the_recovery_rule_comes_before_the_default_queue_and_is_listed_last():
    h = _placement_h(TODAY, default=True)
    h.app("forced", "root.nowhere", tags={"application.create.force": "true"})
    h.app("plain", "root.nowhere")
    assert h.p.apps["forced"].queue.path == "root.@recovery@" and h.p.apps["plain"].queue.path == "root.default"
    assert [r["name"] for r in placement_rules_dao(h.p)] == ["provided", "recovery"]
    assert placement_rules_dao(h.p)[-1]["parameters"] == {"queue": "root.@recovery@"}
    assert [r["name"] for r in placement_rules_dao(_placement_h(Compat()).p)] == ["provided"]
    plain = Harness(settings=CoreSettings(compat=TODAY))  # no rules: the implicit provided rule, then recovery
    assert [r["name"] for r in placement_rules_dao(plain.p)] == ["provided", "recovery"]


# ------------------------------------------------------------------------------ reservations held by quota
def _held_reservation(compat: Compat) -> Harness:
    root = q("root", q("a", max={"memory": 200}), q("b"), submitacl="*")
    h = Harness(config=partition_config(root), settings=CoreSettings(compat=compat))
    h.node("n1", memory=100, vcore=100)
    h.app("other", "root.b", "bob").ask("o1", "other", memory=60, vcore=1)
    h.step()
    h.app("app1", "root.a", "alice").ask("big", "app1", memory=80, vcore=1)
    h.step(3 * SECOND)  # older than the reservation delay, fits no node: reserves n1
    assert h.p.nodes.get("n1").reservation is not None
    h.p.update_config(partition_config(q("root", q("a", max={"memory": 50}), q("b"), submitacl="*")), h.now)
    return h


def test_a_reservation_held_by_a_queue_max_is_cancelled_after_yunikorns_wait_timeout():
    h = _held_reservation(TODAY)
    wait = h.p.settings.reservation_wait_timeout_ns
    h.step(h.p.nodes.get("n1").reservation.created_ns + 2 * wait - h.now)  # two timeouts after it, not past

    assert h.p.nodes.get("n1").reservation is not None and not h.events("ReservationCancelled")
    h.step(SECOND)  # the next (idle) cycle
    assert h.p.nodes.get("n1").reservation is None and not h.p.reservations
    ev = h.events("ReservationCancelled")
    assert len(ev) == 1 and ev[0].object_id == "n1" and ev[0].group_id == "big"
    assert "the max of queue root.a held the ask" in ev[0].message
    h.ask("small", "app1", memory=30, vcore=1)  # the node takes other asks again
    h.step()
    assert "small" in h.allocated_keys()
    rec = _record(ev[0])
    assert (rec["eventChangeType"], rec["eventChangeDetail"]) == (3, 306)


def test_before_1_9_a_held_reservation_stays():
    h = _held_reservation(Compat((1, 8)))
    h.step(3 * h.p.settings.reservation_wait_timeout_ns)
    assert h.p.nodes.get("n1").reservation is not None


# ------------------------------------------------------------------------------ events
def _record(e) -> dict:
    """A core event as the REST record shows it (the worker's ring, ``partition_worker.events``)."""
    rec = si_pb2.EventRecord(type=si_pb2.EventRecord.Type.Value(e.type.value), objectID=e.object_id,
                             groupID=e.group_id, reason=e.reason, message=e.message, timestampNano=e.timestamp_ns)
    return event_dao(rec, 0, "default")


def test_adding_an_app_records_yunikorns_app_added_event_even_when_it_is_rejected():
    h = _placement_h(TODAY)
    h.app("good", "root.a")
    h.app("bad", "root.nowhere")
    added = h.events("AppAdded")
    assert [e.object_id for e in added] == ["good", "bad"]
    rec = _record(added[0])
    assert (rec["eventChangeType"], rec["eventChangeDetail"]) == (2, 203)


def test_the_quota_preemption_summary_carries_queue_preemption():
    rec = _record(Event(EventType.QUEUE, "root.a", "", "QuotaPreemption", "Quota Preemption results summary: ...", 1))
    assert (rec["eventChangeType"], rec["eventChangeDetail"]) == (1, 407)
