"""PartitionSession for an RM of SI v1.8: internal-model requests in (as the worker reads them),
responses in v1.8's fields out; and while the revision is undecided."""

from __future__ import annotations

import pytest

from common import si_internal_pb2 as si
from common.constants import TAG_FOREIGN
from common.si_revision import Revision
from tests.si_session import SISession
from tests.core.harness import SECOND, START, partition_config, q
from tests.si_builders import internal


def session(revision: Revision | None = Revision.V18) -> SISession:
    s = SISession("rm1", "default", partition_config(q("root", q("a"), submitacl="*")))
    if revision is not None:
        s.set_revision(revision)
    return s


def add_app(s, app_id, now=START, timeout_ms=0, placeholder_memory=0):
    a = internal.app(app_id, "root.a", tags={})
    a.executionTimeoutMilliSeconds = timeout_ms
    if placeholder_memory:
        a.placeholderAsk.CopyFrom(internal.resource(memory=placeholder_memory))
    s.apply_application_request(si.ApplicationRequest(new=[a]), now)


def add_node(s, node_id, memory=100, action=si.NodeInfo.CREATE, now=START):
    s.apply_node_request(si.NodeRequest(nodes=[internal.node(node_id, action=action, memory=memory, vcore=None)]), now)


def alloc(key, app_id="app1", memory=10, node="", placeholder=False, taskGroupName="", allocationTags=None,
          **fields) -> si.Allocation:
    """An allocation of v1.8's form (by key, no UUID) in the internal model: memory only."""
    a = internal.allocation(key, node, app_id, uuid="", placeholder=placeholder, task_group=taskGroupName,
                            tags=allocationTags, memory=memory, vcore=None)
    for name, value in fields.items():
        setattr(a, name, value)
    return a


def send(s, *allocations, now=START):
    s.apply_allocation_request(si.AllocationRequest(allocations=list(allocations)), now)


def release(s, key, app_id="app1", term=si.STOPPED_BY_RM, now=START):
    s.apply_allocation_request(si.AllocationRequest(releases=si.AllocationReleasesRequest(
        allocationsToRelease=[internal.release_key(key, app_id, termination=term)])), now)


def ready(revision=Revision.V18) -> SISession:
    s = session(revision)
    add_app(s, "app1")
    add_node(s, "n1")
    s.step(START)
    return s


def test_an_ask_is_an_allocation_without_node_and_comes_back_named_by_its_key() -> None:
    s = ready()
    send(s, alloc("k1", originator=True), alloc("k2"))
    out = s.step(START).allocation
    assert [(a.allocationKey, a.nodeID, a.UUID) for a in out.new] == [("k1", "n1", ""), ("k2", "n1", "")]
    assert out.new[0].originator and not out.new[1].originator
    assert set(s.core.allocations) == {"k1", "k2"}  # the key is the identity


def test_a_release_by_key_releases_that_allocation_and_is_confirmed_by_key() -> None:
    s = ready()
    send(s, alloc("k1"), alloc("k2"))
    s.step(START)
    release(s, "k1")
    out = s.step(START).allocation
    assert [(r.allocationKey, r.UUID, r.terminationType, r.message) for r in out.released] == \
        [("k1", "", si.STOPPED_BY_RM, "allocation remove as per RM request")]
    assert set(s.core.allocations) == {"k2"}


def test_a_release_by_key_of_a_pending_ask_removes_it() -> None:
    s = ready()
    send(s, alloc("big", memory=1000))
    s.step(START)
    release(s, "big")
    s.step(START)
    assert "big" not in s.core.apps["app1"].asks


def test_a_release_without_key_releases_every_allocation_and_ask_of_the_app() -> None:
    s = ready()
    send(s, alloc("k1"), alloc("big", memory=1000))
    s.step(START)
    release(s, "")
    out = s.step(START).allocation
    assert [r.allocationKey for r in out.released] == ["k1"]
    assert not s.core.allocations and not s.core.apps["app1"].asks


def test_a_seed_rm_releasing_without_uuid_still_releases_all_of_the_app() -> None:
    s = ready(Revision.SEED)
    ask = si.AllocationAsk(allocationKey="k1", applicationID="app1", maxAllocations=2)
    ask.resourceAsk.resources["memory"].value = 10
    s.apply_allocation_request(si.AllocationRequest(asks=[ask]), START)
    assert all(a.UUID for a in s.step(START).allocation.new)
    release(s, "k1")  # seed: no UUID means every allocation of the app, whatever the key
    assert len(s.step(START).allocation.released) == 2


@pytest.mark.parametrize("allocation, reason", [
    (alloc("k", app_id="ghost"), "failed to find application ghost"),
    (alloc("k", memory=None), "allocation contains no resources"),
    (alloc("k", memory=0), "allocation contains no resources"),
    (alloc("k", memory=-1), "allocation contains negative resources"),
    (alloc("k", node="nowhere"), "failed to find node nowhere"),
    (alloc("", memory=10), "allocation of application app1 has no allocationKey"),
    (alloc("k", app_id=""), "allocation k has no applicationID"),
], ids=["unknown app", "no resource", "zero", "negative", "unknown node", "no key", "no app"])
def test_bad_allocations_are_rejected_with_yunikorns_reasons_in_rejected_allocations(allocation, reason) -> None:
    s = ready()
    send(s, allocation)
    out = s.step(START).allocation
    assert [(r.allocationKey, r.reason) for r in out.rejectedAllocations] == [(allocation.allocationKey, reason)]
    assert not out.rejected and not s.core.allocations


def test_an_allocation_the_rm_placed_is_booked_and_confirmed_and_replaces_its_ask() -> None:
    s = ready()
    send(s, alloc("pending", memory=1000))  # fits nowhere: stays an ask
    s.step(START)
    send(s, alloc("pending", memory=10, node="n1"), alloc("recovered", node="n1"))
    out = s.step(START).allocation
    assert [(a.allocationKey, a.nodeID) for a in out.new] == [("pending", "n1"), ("recovered", "n1")]
    assert s.core.nodes.get("n1").allocated.get("memory") == 20
    assert "pending" not in s.core.apps["app1"].asks and s.core.root.pending.is_zero()
    send(s, alloc("recovered", node="n1"))  # sent again: nothing changes, nothing is echoed
    assert s.step(START).allocation is None


def test_a_key_placed_for_another_app_or_node_is_refused() -> None:
    s = ready()
    add_app(s, "app2")
    add_node(s, "n2")
    send(s, alloc("k1", node="n1"))
    s.step(START)
    send(s, alloc("k1", app_id="app2"), alloc("k1", node="n2"))
    reasons = [r.reason for r in s.step(START).allocation.rejectedAllocations]
    assert reasons == ["allocation k1 of application app2: the key is in use by application app1",
                       "allocation k1 is placed on node n1, not on node n2"]


def test_create_drain_adds_a_node_that_takes_work_only_once_undrained() -> None:
    s = session()
    add_app(s, "app1")
    add_node(s, "n1", action=si.NodeInfo.CREATE_DRAIN)
    send(s, alloc("k1"))
    out = s.step(START)
    assert [n.nodeID for n in out.node.accepted] == ["n1"] and out.allocation is None
    s.apply_node_request(si.NodeRequest(nodes=[si.NodeInfo(nodeID="n1", action=si.NodeInfo.DRAIN_TO_SCHEDULABLE)]),
                         START)
    assert [a.allocationKey for a in s.step(START).allocation.new] == ["k1"]


def test_a_placeholder_replaced_is_released_naming_the_real_allocation_by_key() -> None:
    s = session()
    add_app(s, "app1", placeholder_memory=20)
    add_node(s, "n1")
    send(s, *(alloc(f"ph-{i}", placeholder=True, taskGroupName="tg") for i in range(2)))
    s.step(START)
    send(s, alloc("real-1", taskGroupName="tg", memory=8))
    out = s.step(START).allocation
    assert [a.allocationKey for a in out.new] == ["real-1"]
    [rel] = out.released
    assert (rel.allocationKey, rel.terminationType, rel.message) == \
        ("ph-0", si.PLACEHOLDER_REPLACED, "replacing allocationKey: real-1")
    release(s, "ph-0", term=si.PLACEHOLDER_REPLACED)  # the RM confirms: not echoed
    assert s.step(START).allocation is None
    assert set(s.core.allocations) == {"ph-1", "real-1"}


def test_pending_placeholders_that_time_out_are_released_by_key() -> None:
    s = session()
    add_app(s, "app1", timeout_ms=1000, placeholder_memory=300)
    add_node(s, "n1")
    send(s, *(alloc(f"ph-{i}", placeholder=True, taskGroupName="tg", memory=100) for i in range(3)))
    s.step(START)  # one fits, two wait
    out = s.step(START + 2 * SECOND).allocation
    released = {(r.allocationKey, r.terminationType) for r in out.released}
    assert released == {("ph-0", si.TIMEOUT), ("ph-1", si.TIMEOUT), ("ph-2", si.TIMEOUT)}
    assert not out.releasedAsks


def test_a_foreign_allocation_reaches_the_core_in_the_seeds_form(monkeypatch) -> None:
    s = ready()
    seen = []
    monkeypatch.setattr(s, "apply_node_request", lambda req, now: seen.append(req))
    foreign = alloc("pod-x", app_id="", node="n1", allocationTags={TAG_FOREIGN: "default"})
    send(s, foreign)
    [req] = seen
    [info] = req.nodes
    assert (info.nodeID, info.action) == ("n1", si.NodeInfo.UPDATE)
    assert list(info.existingAllocations) == [foreign]


def test_while_undecided_rejections_go_in_both_revisions_fields_and_allocations_carry_a_uuid() -> None:
    s = ready(revision=None)
    ask = si.AllocationAsk(allocationKey="k1", applicationID="ghost", maxAllocations=1)
    ask.resourceAsk.resources["memory"].value = 10
    s.apply_allocation_request(si.AllocationRequest(asks=[ask]), START)
    out = s.step(START).allocation
    assert [r.allocationKey for r in out.rejected] == [r.allocationKey for r in out.rejectedAllocations] == ["k1"]


def test_the_revision_cannot_change_within_an_epoch(caplog) -> None:
    s = ready(Revision.SEED)
    s.set_revision(Revision.V18)
    assert s.revision is Revision.SEED and not s.core.key_is_uuid
    assert "cannot change from seed to v1.8" in caplog.text


def test_a_foreign_allocation_on_a_node_not_open_yet_is_confirmed_and_on_an_open_one_not() -> None:
    """The RM opens a new node once every pod on it is counted: the confirmation tells it."""
    s = ready()
    add_node(s, "drained", action=si.NodeInfo.CREATE_DRAIN)
    s.step(START)
    send(s, alloc("pod-x", app_id="", node="drained", allocationTags={TAG_FOREIGN: "default"}),
         alloc("pod-y", app_id="", node="n1", allocationTags={TAG_FOREIGN: "default"}))
    out = s.step(START).allocation
    assert [(a.allocationKey, a.nodeID, a.applicationID, a.partitionName) for a in out.new] == \
        [("pod-x", "drained", "", "default")]
    assert s.step(START).allocation is None  # confirmed once
    send(s, alloc("pod-z", app_id="", node="ghost", allocationTags={TAG_FOREIGN: "default"}))
    out = s.step(START).allocation
    assert not out.new and [r.allocationKey for r in out.rejectedAllocations] == ["pod-z"]


def test_a_placed_allocation_keeps_its_preemption_opt_out_and_originator() -> None:
    """A pod reported on its node after a restart stays out of preemption if it opted out (its
    preemptionPolicy or the allowPreemption tag), as YuniKorn books it."""
    s = ready()
    kept = alloc("kept", node="n1", originator=True)
    kept.preemptionPolicy.allowPreemptSelf = False
    send(s, kept,
         alloc("tagged", node="n1", allocationTags={"yunikorn.apache.org/allowPreemption": "false"}),
         alloc("plain", node="n1"))
    s.step(START)
    got = {k: (a.allow_preempt_self, a.allow_preemption, a.originator) for k, a in s.core.allocations.items()}
    assert got == {"kept": (False, True, True), "tagged": (True, False, False), "plain": (True, True, False)}
