"""The broker loop on real ZeroMQ sockets: routed frames go through byte for byte without being
decoded, bad frames are counted and dropped, and a frame whose header is valid but whose body is
not is forwarded and dropped (logged, counted) by the receiving worker or rmproxy."""

from __future__ import annotations

import logging
import time

import msgpack
import pytest
import zmq

from common.envelope import VERSION, Envelope, Kind, decode, encode
from tests.broker.loopback import running_broker
from tests.conftest import wait_until

RM, PART = "rm", "default"
WAIT = 5.0


def _with_body(kind: Kind, epoch: int, body: bytes) -> bytes:
    """An envelope whose header is valid and whose body is the raw bytes ``body``."""
    return b"\x97" + msgpack.packb([VERSION, kind.value, RM, PART, epoch, 1])[1:] + body


def _recv(sock: zmq.Socket, want: Kind | bytes, copy: bool = True):
    """The next frame of kind ``want`` (or exactly the bytes ``want``), heartbeats and status
    skipped; with ``copy=False`` a ``zmq.Frame``, as rmproxy's link receives it."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if sock.poll(100):
            frame = sock.recv(copy=copy)
            raw = frame if copy else frame.bytes
            if raw == want if isinstance(want, bytes) else decode(raw).kind is want:
                return frame
    raise AssertionError(f"no {want!r} within {WAIT}s")


@pytest.fixture
def stack():
    """A broker in a thread, a worker that owns [rm]default, and an rmproxy holding the RM."""
    with running_broker() as (broker, peer):
        # a lost frame fails the test, not hangs it
        worker, proxy = (peer(bound, ident, int(WAIT * 1000))
                         for bound, ident in ((broker.backend, b"w1"), (broker.frontend, b"p1")))
        worker.send(encode(Envelope(Kind.WORKER_READY, body={"name": "w1"})))
        proxy.send(encode(Envelope(Kind.PROXY_HELLO, body={"name": "p1", "rms": {}})))
        proxy.send(encode(Envelope(Kind.RM_REGISTER, RM, body={"partitions": [PART]})))
        epoch = decode(_recv(worker, Kind.PARTITION_ASSIGN)).epoch
        worker.send(encode(Envelope(Kind.PARTITION_LOADED, RM, PART, epoch, 0, {"error": None})))
        _recv(proxy, Kind.PARTITION_OWNED)
        yield worker.context, broker, worker, proxy, epoch


def test_a_query_and_its_42mb_answer_pass_through_byte_for_byte(stack):
    _, broker, worker, proxy, epoch = stack
    query = encode(Envelope(Kind.QUERY, RM, PART, epoch, 0, {"what": "dump", "id": 41}))
    proxy.send(query)
    assert _recv(worker, Kind.QUERY) == query
    answer = encode(Envelope(Kind.QUERY_RESULT, RM, PART, epoch, 0, {"id": 41, "packed": b"x" * 42_000_000}))
    worker.send(answer)
    assert _recv(proxy, Kind.QUERY_RESULT) == answer
    assert broker.table.bad_frames == 0 and broker.table.routed >= 2


def test_bad_frames_are_counted_and_dropped_and_routing_goes_on(stack):
    _, broker, worker, proxy, epoch = stack
    worker.send(b"\xc1not msgpack")
    proxy.send(msgpack.packb([VERSION, "query", RM, PART, epoch]))  # a 5-element array
    proxy.send(_with_body(Kind.SI_NODE, epoch, b"\xc1")[:-1])  # no body at all
    wait_until(lambda: broker.table.bad_frames == 3, WAIT, "three bad frames counted", interval=0.01)
    # a bad body for a partition without a worker: the UNROUTABLE answer would quote it; dropped
    proxy.send(b"\x97" + msgpack.packb([VERSION, "si.node", RM, "nowhere", 1, 1])[1:] + b"\xc1")
    wait_until(lambda: broker.table.bad_frames == 4, WAIT, "four bad frames counted", interval=0.01)
    query = encode(Envelope(Kind.QUERY, RM, PART, epoch, 0, {"what": "partition", "id": 42}))
    proxy.send(query)
    assert _recv(worker, Kind.QUERY) == query
    while proxy.poll(200):  # nothing comes back for the dropped frames (status heartbeats aside)
        assert decode(proxy.recv()).kind is Kind.STATUS


def test_a_bad_body_is_forwarded_and_the_worker_drops_it(stack, caplog):
    from partition_worker.main import WorkerLoop

    ctx, broker, worker, proxy, epoch = stack
    bad = _with_body(Kind.SI_NODE, epoch, b"\xc1")
    proxy.send(bad)
    loop = WorkerLoop(ctx, "unused", store=None, name="w1", session_factory=object)
    loop.sock = worker  # the worker's own receive path (broker heartbeats are handled, not dropped)
    with caplog.at_level(logging.WARNING):
        wait_until(lambda: loop._drain() or loop.dropped, WAIT, "the worker dropping the frame", interval=0.01)
    assert loop.dropped == 1
    assert "worker w1 dropped a frame" in caplog.text and "not msgpack" in caplog.text
    assert broker.table.bad_frames == 0  # the broker routed it by its header


def test_a_bad_answer_body_is_forwarded_and_rmproxy_drops_it(stack, caplog):
    from rmproxy.proxy import Proxy

    _, broker, worker, proxy, epoch = stack
    bad = _with_body(Kind.QUERY_RESULT, epoch, b"\xc6\x00\x00\xff\xff")  # a bin cut short
    worker.send(bad)
    frame = _recv(proxy, bad, copy=False)
    rmproxy = Proxy("unused", store=None, name="p1")
    try:
        with caplog.at_level(logging.WARNING):
            rmproxy.broker._on_frame(frame)  # a ZeroMQ frame, as rmproxy's link receives it
    finally:
        rmproxy.broker.link.ctx.term()
    assert rmproxy.dropped == 1
    assert "rmproxy p1 dropped a frame" in caplog.text
