"""Rows (common.si_rows) at the worker's session: asks come in only as rows, new allocations leave
only as rows, each field where its row type names it; the rest of a request keeps its place."""

import logging

import pytest

from common import si_internal_pb2 as si
from common import si_pb2
from common.resources import Resource
from common.si_revision import Revision
from common.si_rows import AllocationRow, AskRow, RequestRows, sizes_from_rows
from partition_worker.session import PartitionSession
from tests.core.harness import START, partition_config, q
from tests.si_builders import app, internal, node


def worker_session(revision: Revision | None = Revision.SEED) -> PartitionSession:
    s = PartitionSession("rm1", "default", partition_config(q("root", q("a"), submitacl="*")))
    if revision is not None:
        s.set_revision(revision)
    s.apply_application_request(si_pb2.ApplicationRequest(new=[app("app1", "root.a")]), START)
    s.apply_node_request(si_pb2.NodeRequest(nodes=[node("n1", memory=1000, vcore=100)]), START)
    s.step(START)
    return s


def row(key: str, size: int = 0, **fields) -> AskRow:
    """An ask row of app1, one allocation, every field by name."""
    values = dict(key=key, app_id="app1", size=size, max_allocations=1, priority=0, execution_timeout_ms=0,
                  tags=None, task_group="", placeholder=False, originator=False, allow_preempt_self=True,
                  allow_preempt_other=True)
    return AskRow(**(values | fields))


def through_the_wire(body: RequestRows) -> RequestRows:
    return RequestRows.unpack(body.pack())


SIZES = [["memory", 10, "vcore", 1]]


def test_every_field_of_an_ask_row_reaches_the_ask_it_names() -> None:
    s = worker_session()
    ask = row("k1", max_allocations=3, priority=7, execution_timeout_ms=500, tags={"kubernetes.io/meta/namespace": "ns"},
              task_group="tg", placeholder=True, originator=True, allow_preempt_self=False, allow_preempt_other=True)
    s.apply_allocation_rows(through_the_wire(RequestRows(SIZES, [ask])), START)
    got = s.core.apps["app1"].asks["k1"]
    assert (got.key, got.app_id, got.resource, got.max_allocations, got.priority) == (
        "k1", "app1", Resource({"memory": 10, "vcore": 1}), 3, 7)
    assert (got.execution_timeout_ms, got.tags, got.task_group, got.placeholder, got.originator) == (
        500, {"kubernetes.io/meta/namespace": "ns"}, "tg", True, True)
    assert (got.allow_preempt_self, got.allow_preempt_other) == (False, True)


def test_sizes_from_rows_refuses_what_an_si_resource_cannot_hold() -> None:
    ok, empty, text, odd = sizes_from_rows([["memory", 10], ["", 1], ["memory", "10"], ["memory"]])
    assert ok == Resource({"memory": 10})
    assert "non-empty" in str(empty) and "integer" in str(text) and "pairs" in str(odd)


def test_new_allocations_leave_as_rows_each_field_by_name() -> None:
    s = worker_session()
    s.apply_allocation_rows(RequestRows(SIZES, [row("k1", max_allocations=2, priority=5, task_group="tg",
                                                    tags={"t": "v"}, originator=True)]), START)
    out = s.step(START)
    assert out.allocation_rest is None  # nothing else: rows alone
    body = out.allocation_outcomes()
    rows = [AllocationRow._make(r) for r in body.new]
    assert [(r.key, r.node_id, r.app_id, r.priority, r.task_group, r.tags, r.originator) for r in rows] == [
        ("k1", "n1", "app1", 5, "tg", {"t": "v"}, True)] * 2
    assert rows[0].uuid != rows[1].uuid and not rows[0].placeholder
    assert [body.sizes[i] for i in body.size_of] in ([["memory", 10, "vcore", 1]] * 2, [["vcore", 1, "memory", 10]] * 2)
    assert body.rest is None


def test_a_release_in_the_same_step_travels_beside_the_rows() -> None:
    s = worker_session()
    s.apply_allocation_rows(RequestRows(SIZES, [row("k1")]), START)
    (first,) = s.step(START).new_allocations.new
    release = si.AllocationRequest(releases=si.AllocationReleasesRequest(allocationsToRelease=[
        internal.release_key("k1", "app1", uuid=AllocationRow._make(first).uuid)]))
    s.apply_allocation_rows(through_the_wire(RequestRows(SIZES, [row("k2")], rest=release)), START)
    out = s.step(START)
    assert [AllocationRow._make(r).key for r in out.new_allocations.new] == ["k2"]
    assert [r.UUID for r in si.AllocationResponse.FromString(out.allocation_outcomes().rest).released] == [
        AllocationRow._make(first).uuid]


def test_a_v18_request_keeps_its_order_between_asks_and_placed_allocations() -> None:
    placed = si.AllocationRequest(allocations=[internal.allocation("k1", "n1", "app1", uuid="", memory=10, vcore=1)])

    def apply(rest_at: list[int]) -> PartitionSession:
        s = worker_session(Revision.V18)
        s.apply_allocation_rows(through_the_wire(RequestRows(SIZES, [row("k1"), row("k2")], v18=True,
                                                             rest=placed, rest_at=rest_at)), START)
        return s

    def unchanged(s: PartitionSession) -> list[str]:
        return [e.objectID for e in s.step(START).events if e.reason == "AllocationUnchanged"]

    # placed first: the ask of the same key that follows changes nothing (YuniKorn's no-op event)
    first = apply([0])
    assert "k1" in first.core.allocations and unchanged(first) == ["k1"]
    # asked first: the ask is added, then the allocation reported for it
    second = apply([1])
    assert "k1" in second.core.allocations and unchanged(second) == []


def test_ask_rows_apply_as_the_asks_they_were_read_from(caplog) -> None:
    s = worker_session()
    body = RequestRows(SIZES + [["", 1]], [row("k1"), ("short row",), row("k2"), row("bad", size=1)])
    with caplog.at_level(logging.WARNING, logger="partition_worker.session"):
        s.apply_allocation_rows(through_the_wire(body), START)
    out = s.step(START)  # a rejection: it travels beside the new allocations' rows
    assert sorted(AllocationRow._make(r).key for r in out.new_allocations.new) == ["k1", "k2"]
    (rej,) = out.allocation_rest.rejected
    assert (rej.allocationKey, rej.reason) == (
        "bad", "invalid ask added to app app1: ask bad: resource name must be a non-empty string")
    assert "malformed ask row" in caplog.text and "short row" in caplog.text


@pytest.mark.parametrize("raw, error", [
    (b"\xc1", "not msgpack"), (RequestRows([], []).pack()[:-1], "not msgpack"),
    (b"\x81\xa4asks\x90", "sizes and asks"),
])
def test_a_body_that_is_not_request_rows_is_refused_naming_why(raw, error) -> None:
    with pytest.raises(ValueError, match=error):
        RequestRows.unpack(raw)
