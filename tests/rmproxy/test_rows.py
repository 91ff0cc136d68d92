"""rmproxy's side of rows (common.si_rows): every ask of either SI revision goes to the worker as a
row, in parts, with the rest of its request beside it in its place; the worker's new allocations
come back as rows and go down the RM's stream in its SI revision; asks no worker can take are
rejected by name."""

from __future__ import annotations

import pytest

from common import si_internal_pb2 as si
from common.envelope import Envelope, Kind
from common.si_revision import Revision
from common.si_rows import AllocationRow, AskRow, NewAllocations, RequestRows
from rmproxy import router as router_module
from rmproxy.rms import RMSession
from tests.rmproxy.test_proxy_lifecycle import make_proxy
from tests.si_builders import internal

ROW = AllocationRow("k1", "uuid-1", "n1", "app1", 0, "", False, None, False)


def _proxy(revision: Revision | None = Revision.SEED):
    p, sent = make_proxy()
    rm = RMSession("rm-1", ["default"], epochs={"default": 3}, revision=revision, revision_why="declared")
    rm.revision_told["default"] = 3
    p.registry.rms["rm-1"] = rm
    return p, sent, rm


def _bodies(sent) -> list[RequestRows]:
    assert all(e.kind is Kind.SI_ALLOCATION for e in sent)
    return [RequestRows.unpack(e.body) for e in sent]


def _keys(body: RequestRows) -> list[str]:
    return [AskRow._make(r).key for r in body.asks]


def test_a_request_of_asks_goes_as_rows_in_parts_in_order(monkeypatch):
    monkeypatch.setattr(router_module, "ASK_BATCH", 2)
    p, sent, rm = _proxy()
    p.router.request("allocation", rm, si.AllocationRequest(asks=[internal.ask(f"k{i}", "app1") for i in range(5)]))
    assert [_keys(b) for b in _bodies(sent)] == [["k0", "k1"], ["k2", "k3"], ["k4"]]
    assert [e.seq for e in sent] == [1, 2, 3]  # in the RM's request sequence


def test_asks_with_releases_go_in_one_envelope_the_releases_after_the_asks():
    p, sent, rm = _proxy()
    req = si.AllocationRequest(asks=[internal.ask("k1", "app1")], releases=si.AllocationReleasesRequest(
        allocationsToRelease=[si.AllocationRelease(applicationID="app1", UUID="u1", partitionName="default")]))
    p.router.request("allocation", rm, req)
    (body,) = _bodies(sent)
    assert _keys(body) == ["k1"] and not body.rest.asks
    assert [r.UUID for r in body.rest.releases.allocationsToRelease] == ["u1"]


def test_a_request_of_releases_only_goes_as_an_empty_set_of_rows_with_its_rest():
    p, sent, rm = _proxy()
    p.router.request("allocation", rm, si.AllocationRequest(releases=si.AllocationReleasesRequest(
        allocationsToRelease=[si.AllocationRelease(applicationID="app1", UUID="u1", partitionName="default")])))
    (body,) = _bodies(sent)
    assert body.asks == () and [r.UUID for r in body.rest.releases.allocationsToRelease] == ["u1"]


@pytest.mark.parametrize("revision", [Revision.SEED, Revision.V18])
def test_new_allocations_go_down_the_stream_in_the_rm_revision(revision):
    p, _, rm = _proxy(revision)
    p.router._on_allocations(Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm-1", "default", 3, 0,
                               NewAllocations([["memory", 10]], [ROW], [0]).wire()))
    (m,) = si.AllocationResponse.FromString(rm.buffers["allocation"][-1]).new
    assert (m.allocationKey, m.nodeID, m.partitionName, m.resourcePerAlloc.resources["memory"].value) == (
        "k1", "n1", "default", 10)
    assert m.UUID == ("uuid-1" if revision is Revision.SEED else "")


def test_a_release_beside_the_rows_reaches_the_rm_in_the_same_response():
    p, _, rm = _proxy()
    rest = si.AllocationResponse(released=[si.AllocationRelease(UUID="ph-1", applicationID="app1")])
    p.router._on_allocations(Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm-1", "default", 3, 0,
                               NewAllocations([["memory", 10]], [ROW], [0], rest.SerializeToString()).wire()))
    resp = si.AllocationResponse.FromString(rm.buffers["allocation"][-1])
    assert [m.allocationKey for m in resp.new] == ["k1"] and [r.UUID for r in resp.released] == ["ph-1"]


def test_new_allocations_of_an_old_epoch_or_malformed_are_dropped(caplog):
    p, _, rm = _proxy()
    p.router._on_allocations(Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm-1", "default", 2, 0,
                               NewAllocations([], [ROW], [0]).wire()))
    p.router._on_allocations(Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm-1", "default", 3, 0,
                               {"sizes": [], "new": [["k1"]], "size_of": [0]}))
    assert not rm.buffers["allocation"] and p.dropped == 2
    assert "malformed rows" in caplog.text


def test_asks_no_worker_can_take_are_rejected_by_name():
    p, sent, rm = _proxy()
    p.router.request("allocation", rm, si.AllocationRequest(asks=[internal.ask("k1", "app1")]))
    reason = "partition [rm-1]default has no worker: start more workers"
    p.broker._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", "default", 3, 1, {
        "reason": reason, "kind": Kind.SI_ALLOCATION.value, "body": sent[0].body}))
    (rej,) = si.AllocationResponse.FromString(rm.buffers["allocation"][-1]).rejected
    assert (rej.allocationKey, rej.applicationID, rej.reason) == ("k1", "app1", reason)


def test_a_v18_rms_asks_go_as_rows_and_placed_allocations_keep_their_place_among_them():
    p, sent, rm = _proxy(Revision.V18)
    asks = [si.Allocation(allocationKey=f"k{i}", applicationID="app1", partitionName="default") for i in range(3)]
    for a in asks:
        a.resourcePerAlloc.resources["memory"].value = 10
    placed = si.Allocation(allocationKey="p1", applicationID="app1", nodeID="n1", partitionName="default")
    p.router.request("allocation", rm, si.AllocationRequest(allocations=[asks[0], placed, asks[1], asks[2]]))
    (body,) = _bodies(sent)
    assert body.v18 and _keys(body) == ["k0", "k1", "k2"]
    assert [AskRow._make(r).max_allocations for r in body.asks] == [1, 1, 1]
    assert [a.allocationKey for a in body.rest.allocations] == ["p1"] and list(body.rest_at) == [1]


def test_a_v18_rms_asks_no_worker_can_take_are_rejected_as_allocations():
    p, sent, rm = _proxy(Revision.V18)
    ask = si.Allocation(allocationKey="k1", applicationID="app1", partitionName="default")
    placed = si.Allocation(allocationKey="p1", applicationID="app1", nodeID="n1", partitionName="default")
    p.router.request("allocation", rm, si.AllocationRequest(allocations=[ask, placed]))
    p.broker._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", "default", 3, 1, {
        "reason": "no worker", "kind": Kind.SI_ALLOCATION.value, "body": sent[0].body}))
    resp = si.AllocationResponse.FromString(rm.buffers["allocation"][-1])
    assert [r.allocationKey for r in resp.rejectedAllocations] == ["k1", "p1"] and not resp.rejected
