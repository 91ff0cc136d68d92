"""Rows (common.si_rows): asks read once into rows, new allocations reported as rows, and the SI
written back from them in the RM's revision, with a session as the worker runs it (rows_out)."""

import logging

import pytest

from common import si_internal_pb2 as si
from common import si_pb2
from common.resources import Resource
from common.si_revision import Revision
from common.si_rows import ALLOCATION_FIELDS, ASK_FIELDS, ask_rows, fill_allocations, sizes_from_rows
from partition_worker.session import PartitionSession
from tests.core.harness import START, partition_config, q
from tests.si_builders import app, ask, node


def worker_session() -> PartitionSession:
    s = PartitionSession("rm1", "default", partition_config(q("root", q("a"), submitacl="*")), rows_out=True)
    s.apply_application_request(si_pb2.ApplicationRequest(new=[app("app1", "root.a")]), START)
    s.apply_node_request(si_pb2.NodeRequest(nodes=[node("n1", memory=1000, vcore=100)]), START)
    s.step(START)
    return s


def test_ask_rows_read_every_field_and_share_sizes() -> None:
    a = ask("k1", "app1", memory=10, vcore=1, repeat=3)
    a.priority = 7
    a.tags["kubernetes.io/meta/namespace"] = "ns"
    a.executionTimeoutMilliSeconds, a.taskGroupName, a.placeholder, a.Originator = 500, "tg", True, True
    a.preemptionPolicy.allowPreemptSelf = False
    a.preemptionPolicy.allowPreemptOther = True
    b = ask("k2", "app1", memory=10, vcore=1)
    body = ask_rows([a, b])
    assert body["sizes"] in ([["memory", 10, "vcore", 1]], [["vcore", 1, "memory", 10]])
    first, second = (dict(zip(ASK_FIELDS, row)) for row in body["asks"])
    assert first == {"allocationKey": "k1", "applicationID": "app1", "size": 0, "maxAllocations": 3,
                     "priority": 7, "executionTimeoutMilliSeconds": 500,
                     "tags": {"kubernetes.io/meta/namespace": "ns"}, "taskGroupName": "tg",
                     "placeholder": True, "Originator": True, "allowPreemptSelf": False,
                     "allowPreemptOther": True}
    # no preemptionPolicy: both allowed, as YuniKorn reads an unset policy; no tags: None
    assert second["size"] == 0 and second["tags"] is None
    assert (second["allowPreemptSelf"], second["allowPreemptOther"]) == (True, True)


def test_sizes_from_rows_refuses_what_an_si_resource_cannot_hold() -> None:
    ok, empty, text, odd = sizes_from_rows([["memory", 10], ["", 1], ["memory", "10"], ["memory"]])
    assert ok == Resource({"memory": 10})
    assert "non-empty" in str(empty) and "integer" in str(text) and "pairs" in str(odd)


@pytest.mark.parametrize("revision", [Revision.SEED, Revision.V18, None])
def test_fill_allocations_writes_the_rm_revision(revision) -> None:
    row = ["k1", "uuid-1", "n1", "app1", 0, 5, "tg", True, {"t": "v"}, True]
    assert len(row) == len(ALLOCATION_FIELDS)
    resp = fill_allocations(si.AllocationResponse(), {"sizes": [["memory", 10]], "new": [row]}, "default",
                            revision)
    (m,) = resp.new
    assert (m.allocationKey, m.nodeID, m.applicationID, m.partitionName) == ("k1", "n1", "app1", "default")
    assert (m.priority, m.taskGroupName, m.placeholder, dict(m.allocationTags)) == (5, "tg", True, {"t": "v"})
    assert m.resourcePerAlloc.resources["memory"].value == 10
    # a seed RM (and one not decided yet) names the allocation by UUID; v1.8 by key, with originator
    assert m.UUID == ("" if revision is Revision.V18 else "uuid-1")
    assert m.originator is (revision is Revision.V18)


def test_a_worker_session_reports_new_allocations_as_rows_when_the_step_made_nothing_else() -> None:
    s = worker_session()
    s.apply_allocation_request(si_pb2.AllocationRequest(asks=[ask("k1", "app1", repeat=2)]), START)
    out = s.step(START)
    assert out.allocation is None  # nothing but new allocations: no SI response at all
    rows = [dict(zip(ALLOCATION_FIELDS, r)) for r in out.allocations_new["new"]]
    assert [(r["allocationKey"], r["nodeID"], r["applicationID"]) for r in rows] == [("k1", "n1", "app1")] * 2
    assert rows[0]["UUID"] != rows[1]["UUID"]
    assert out.allocations_new["sizes"][rows[0]["size"]] in (["memory", 10, "vcore", 1], ["vcore", 1, "memory", 10])
    s.apply_allocation_request(si_pb2.AllocationRequest(releases=si_pb2.AllocationReleasesRequest(
        allocationsToRelease=[si_pb2.AllocationRelease(applicationID="app1", UUID=rows[0]["UUID"],
                                                      partitionName="default")])), START)
    s.apply_allocation_request(si_pb2.AllocationRequest(asks=[ask("k2", "app1")]), START)
    out = s.step(START)  # a release in the same step: one SI response holds both, as before
    assert out.allocations_new is None
    assert [r.UUID for r in out.allocation.released] == [rows[0]["UUID"]]
    assert [a.allocationKey for a in out.allocation.new] == ["k2"] and out.allocation.new[0].UUID


def test_ask_rows_apply_as_the_asks_they_were_read_from(caplog) -> None:
    s = worker_session()
    body = ask_rows([ask("k1", "app1"), ask("k2", "app1")])
    body["sizes"].append(["", 1])  # what no SI resource can hold: its asks are rejected by name
    body["asks"].append(["bad", "app1", 1, 1, 0, 0, None, "", False, False, True, True])
    body["asks"].insert(1, ["short row"])  # a bug of the sender: logged and skipped, the rest applied
    with caplog.at_level(logging.WARNING, logger="partition_worker.session"):
        s.apply_ask_rows(body, START)
    out = s.step(START)  # with a rejection, the new allocations are in the same SI response
    assert sorted(a.allocationKey for a in out.allocation.new) == ["k1", "k2"]
    (rej,) = out.allocation.rejected
    assert (rej.allocationKey, rej.reason) == (
        "bad", "invalid ask added to app app1: ask bad: resource name must be a non-empty string")
    assert "malformed ask row" in caplog.text and "short row" in caplog.text
