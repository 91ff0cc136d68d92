"""The broker notices a killed peer at once, and never takes a live peer for a dead one.

Found by the chaos soak: a worker that reconnected (new identity, new connection) right after
another connection closed got the closed one's file descriptor; its first message reached the
broker before the monitor's report of the close, so the broker, which named the dead peer by the
descriptor alone, declared the live worker gone (its partition lost, a resync, and the RM's
registration waiting 10 s for it) and kept the dead one until its heartbeats expired.

The peers are separate processes (as in a real stack), so the broker's descriptors are its own
and the kernel hands a closed descriptor to the next accepted connection; the broker's loop is
driven step by step to put the two events in the order of the incident.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import zmq

from broker.main import Broker
from tests.broker.loopback import loopback_broker
from tests.conftest import wait_until

WAIT_MS = 10_000

PEER = """
import sys, zmq
from common.envelope import Envelope, Kind, encode
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.IDENTITY, sys.argv[2].encode())
s.setsockopt(zmq.LINGER, 0)
s.connect(sys.argv[1])
s.send(encode(Envelope(Kind.WORKER_READY, body={"name": sys.argv[2]})))
sys.stdin.read()
"""


@pytest.fixture
def broker():
    ctx = zmq.Context()
    b = loopback_broker(ctx)
    peers: list[subprocess.Popen] = []
    yield b, peers
    for p in peers:
        p.kill()
        p.wait(10)
    b.close()
    ctx.term()


def start_worker(b: Broker, peers: list, name: str) -> int:
    """A worker process announces itself; the broker reads it; returns the descriptor it used."""
    endpoint = b.backend.getsockopt(zmq.LAST_ENDPOINT).decode()
    peers.append(subprocess.Popen([sys.executable, "-c", PEER, endpoint, name], stdin=subprocess.PIPE))
    assert b.backend.poll(WAIT_MS), f"{name} did not announce itself"
    b._drain(b.backend, b._from_worker, set())
    assert name.encode() in b.table.workers
    return b.peer_fd[name.encode()]


def kill(peers: list, index: int) -> None:
    peers[index].kill()
    peers[index].wait(10)


def backend_monitor(b: Broker) -> zmq.Socket:
    return next(m for m, sock in b.monitors.items() if sock is b.backend)


def settle(b: Broker, mon: zmq.Socket, gone: bytes) -> None:
    """The broker's own handling of the close: the monitor's report, then its probes."""
    b._on_monitor(mon)

    def probed_gone() -> bool:
        b._probe_suspects(time.monotonic())
        return gone not in b.table.workers

    wait_until(probed_gone, 5, f"{gone.decode()} declared gone by the broker's probes", interval=0.01)


def test_a_killed_worker_is_gone_at_once(broker):
    b, peers = broker
    start_worker(b, peers, "A")
    kill(peers, 0)
    mon = backend_monitor(b)
    assert mon.poll(WAIT_MS), "no report of the closed connection"
    settle(b, mon, b"A")
    assert b"A" not in b.table.workers


def test_a_live_worker_that_got_a_dead_ones_descriptor_is_not_taken_for_dead(broker):
    b, peers = broker
    fd_a = start_worker(b, peers, "A")
    kill(peers, 0)
    mon = backend_monitor(b)
    assert mon.poll(WAIT_MS), "no report of the closed connection"  # reported, not read yet
    fd_b = start_worker(b, peers, "B")  # read before the report: the incident's order
    assert fd_b == fd_a, "precondition: the kernel reuses the lowest free descriptor"
    settle(b, mon, b"A")
    assert b"B" in b.table.workers, "the live worker was declared gone"
    assert b"A" not in b.table.workers, "the dead worker was kept"
    # B stays known after the probing window, and its own later death is noticed at once
    b._probe_suspects(time.monotonic() + 10)
    assert b"B" in b.table.workers and not b.suspects
    kill(peers, 1)
    assert mon.poll(WAIT_MS)
    settle(b, mon, b"B")
    assert b"B" not in b.table.workers
