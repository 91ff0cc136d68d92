"""rmproxy's side of rows (common.si_rows): a request of asks only goes to the worker as rows,
in parts; the worker's new allocations come back as rows and go
down the RM's stream in its SI revision; asks no worker can take are rejected by name."""

from __future__ import annotations

import pytest

from common import si_internal_pb2 as si
from common.envelope import Envelope, Kind
from common.si_revision import Revision
from common.si_rows import ASK_FIELDS, unpack_rows
from rmproxy.server import proxy as proxy_module
from rmproxy.server.rms import RMSession
from tests.rmproxy.test_proxy_lifecycle import make_proxy
from tests.si_builders import internal

ROW = ["k1", "uuid-1", "n1", "app1", 0, 0, "", False, None, False]


def _proxy(revision: Revision | None = Revision.SEED):
    p, sent = make_proxy()
    rm = RMSession("rm-1", ["default"], epochs={"default": 3}, revision=revision, revision_why="declared")
    rm.revision_told["default"] = 3
    p.rms["rm-1"] = rm
    return p, sent, rm


def test_a_request_of_asks_only_goes_as_rows_in_parts_in_order(monkeypatch):
    monkeypatch.setattr(proxy_module, "ASK_BATCH", 2)
    p, sent, rm = _proxy()
    p.handle_request("allocation", rm, si.AllocationRequest(asks=[internal.ask(f"k{i}", "app1") for i in range(5)]))
    assert [e.kind for e in sent] == [Kind.SI_ASKS] * 3
    keys = [dict(zip(ASK_FIELDS, row))["allocationKey"] for e in sent for row in unpack_rows(e.body)["asks"]]
    assert keys == ["k0", "k1", "k2", "k3", "k4"]
    assert [e.seq for e in sent] == [1, 2, 3]  # in the RM's request sequence


def test_asks_with_releases_stay_one_protobuf_envelope():
    p, sent, rm = _proxy()
    req = si.AllocationRequest(asks=[internal.ask("k1", "app1")], releases=si.AllocationReleasesRequest(
        allocationsToRelease=[si.AllocationRelease(applicationID="app1", UUID="u1", partitionName="default")]))
    p.handle_request("allocation", rm, req)
    (env,) = sent
    got = si.AllocationRequest.FromString(env.body)
    assert env.kind is Kind.SI_ALLOCATION and [a.allocationKey for a in got.asks] == ["k1"]
    assert [r.UUID for r in got.releases.allocationsToRelease] == ["u1"]


@pytest.mark.parametrize("revision", [Revision.SEED, Revision.V18])
def test_new_allocations_go_down_the_stream_in_the_rm_revision(revision):
    p, _, rm = _proxy(revision)
    p._on_allocations(Envelope(Kind.SI_ALLOCATIONS, "rm-1", "default", 3, 0,
                               {"sizes": [["memory", 10]], "new": [ROW]}))
    (m,) = si.AllocationResponse.FromString(rm.buffers["allocation"][-1]).new
    assert (m.allocationKey, m.nodeID, m.partitionName) == ("k1", "n1", "default")
    assert m.UUID == ("uuid-1" if revision is Revision.SEED else "")


def test_new_allocations_of_an_old_epoch_or_malformed_are_dropped(caplog):
    p, _, rm = _proxy()
    p._on_allocations(Envelope(Kind.SI_ALLOCATIONS, "rm-1", "default", 2, 0, {"sizes": [], "new": [ROW]}))
    p._on_allocations(Envelope(Kind.SI_ALLOCATIONS, "rm-1", "default", 3, 0, {"sizes": [], "new": [["k1"]]}))
    assert not rm.buffers["allocation"] and p.dropped == 2
    assert "malformed rows" in caplog.text


def test_asks_no_worker_can_take_are_rejected_by_name():
    p, sent, rm = _proxy()
    p.handle_request("allocation", rm, si.AllocationRequest(asks=[internal.ask("k1", "app1")]))
    reason = "partition [rm-1]default has no worker: start more workers"
    p._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", "default", 3, 1, {
        "reason": reason, "kind": Kind.SI_ASKS.value, "body": sent[0].body}))
    (rej,) = si.AllocationResponse.FromString(rm.buffers["allocation"][-1]).rejected
    assert (rej.allocationKey, rej.applicationID, rej.reason) == ("k1", "app1", reason)


def test_a_v18_rms_asks_go_as_rows_marked_v18_unless_a_placed_one_is_among_them():
    p, sent, rm = _proxy(Revision.V18)
    asks = [si.Allocation(allocationKey=f"k{i}", applicationID="app1", partitionName="default") for i in range(2)]
    for a in asks:
        a.resourcePerAlloc.resources["memory"].value = 10
    p.handle_request("allocation", rm, si.AllocationRequest(allocations=asks))
    (env,) = sent
    body = unpack_rows(env.body)
    assert env.kind is Kind.SI_ASKS and body["v18"] is True
    assert [dict(zip(ASK_FIELDS, r))["maxAllocations"] for r in body["asks"]] == [1, 1]
    placed = si.Allocation(allocationKey="p1", applicationID="app1", nodeID="n1", partitionName="default")
    p.handle_request("allocation", rm, si.AllocationRequest(allocations=[asks[0], placed]))
    assert sent[-1].kind is Kind.SI_ALLOCATION  # kept in order, as protobuf
    assert [a.allocationKey for a in si.AllocationRequest.FromString(sent[-1].body).allocations] == ["k0", "p1"]
