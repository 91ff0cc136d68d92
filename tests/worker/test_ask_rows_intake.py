"""The worker's intake of asks as rows (Kind.SI_ASKS): applied in its partition's session, a body
that is not a rows body dropped with a warning naming the partition, the rest of the loop going on."""

from __future__ import annotations

import logging

import zmq

from common.envelope import Envelope, Kind
from common.si_rows import ask_rows, pack_rows
from partition_worker.main import Owned, WorkerLoop
from tests.si_builders import internal


class _Session:
    def __init__(self) -> None:
        self.applied: list[dict] = []

    def apply_ask_rows(self, body: dict, now_ns: int) -> None:
        self.applied.append(body)


def _loop() -> tuple[WorkerLoop, _Session, zmq.Context]:
    ctx = zmq.Context()
    loop = WorkerLoop(ctx, "unused", store=None, name="w1", session_factory=object)
    session = _Session()
    loop.owned = Owned("rm-1", "default", 3, session)
    return loop, session, ctx


def test_ask_rows_reach_the_session_decoded():
    loop, session, ctx = _loop()
    try:
        body = pack_rows(ask_rows([internal.ask("k1", "app1")]))
        loop._on_asks(Envelope(Kind.SI_ASKS, "rm-1", "default", 3, 1, body))
    finally:
        ctx.term()
    (body,) = session.applied
    assert [row[0] for row in body["asks"]] == ["k1"] and loop.dropped == 0


def test_a_body_that_is_not_rows_is_dropped_naming_the_partition(caplog):
    loop, session, ctx = _loop()
    try:
        with caplog.at_level(logging.WARNING):
            loop._on_asks(Envelope(Kind.SI_ASKS, "rm-1", "default", 3, 1, b"\xc1"))  # not msgpack
            loop._on_asks(Envelope(Kind.SI_ASKS, "rm-1", "default", 3, 2, pack_rows({"asks": []})))  # no sizes
    finally:
        ctx.term()
    assert session.applied == [] and loop.dropped == 2
    assert "dropped si.asks for [rm-1]default: undecodable body" in caplog.text
