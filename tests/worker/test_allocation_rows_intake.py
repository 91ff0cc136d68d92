"""The worker's intake of the allocation stream (Kind.SI_ALLOCATION: common.si_rows.RequestRows):
applied in its partition's session, a body that is not one dropped with a warning naming the
partition, the rest of the loop going on."""

from __future__ import annotations

import logging

import msgpack
import zmq

from common import si_internal_pb2 as si
from common.envelope import Envelope, Kind
from common.si_rows import AskRow, RequestRows
from partition_worker.main import Owned, WorkerLoop


class _Session:
    def __init__(self) -> None:
        self.applied: list[RequestRows] = []

    def apply_allocation_rows(self, body: RequestRows, now_ns: int) -> None:
        self.applied.append(body)


def _loop() -> tuple[WorkerLoop, _Session, zmq.Context]:
    ctx = zmq.Context()
    loop = WorkerLoop(ctx, "unused", store=None, name="w1", session_factory=object)
    session = _Session()
    loop.owned = Owned("rm-1", "default", 3, session)
    return loop, session, ctx


def test_rows_reach_the_session_decoded_with_the_rest_of_their_request():
    loop, session, ctx = _loop()
    rest = si.AllocationRequest(releases=si.AllocationReleasesRequest(
        allocationsToRelease=[si.AllocationRelease(applicationID="app1", UUID="u1")]))
    row = AskRow("k1", "app1", 0, 1, 0, 0, None, "", False, False, True, True)
    try:
        loop._on_allocation_rows(Envelope(Kind.SI_ALLOCATION, "rm-1", "default", 3, 1,
                                          RequestRows([["memory", 10]], [row], rest=rest).pack()))
    finally:
        ctx.term()
    (body,) = session.applied
    assert body.asks == (tuple(row),) and body.rest == rest and loop.dropped == 0


def test_a_body_that_is_not_rows_is_dropped_naming_the_partition(caplog):
    loop, session, ctx = _loop()
    try:
        with caplog.at_level(logging.WARNING):
            loop._on_allocation_rows(Envelope(Kind.SI_ALLOCATION, "rm-1", "default", 3, 1, b"\xc1"))  # not msgpack
            loop._on_allocation_rows(Envelope(Kind.SI_ALLOCATION, "rm-1", "default", 3, 2,
                                              msgpack.packb({"asks": []})))  # no sizes
    finally:
        ctx.term()
    assert session.applied == [] and loop.dropped == 2
    assert "dropped si.allocation for [rm-1]default: undecodable body" in caplog.text
