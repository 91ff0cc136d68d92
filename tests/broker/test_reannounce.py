"""A restarted broker tells every peer it does not know to announce itself, on the socket the
peer spoke on. Found by the chaos soak: the answer to an unknown worker went out on the frontend
(the rmproxies' socket) and was dropped, so after a broker restart the workers came back only
when they noticed the broker's silence (2.5 s), and every RM's re-registration waited for them."""

from __future__ import annotations


import pytest
import zmq

from common.envelope import Envelope, Kind, decode, encode
from tests.broker.loopback import running_broker

WAIT_MS = 5_000


@pytest.fixture
def broker():
    with running_broker() as (b, peer):
        yield b, peer


def reannounce_asked(sock: zmq.Socket) -> bool:
    """Whether the broker's next messages to ``sock`` include "announce yourself"."""
    while sock.poll(WAIT_MS):
        env = decode(sock.recv())
        if env.kind is Kind.HEARTBEAT and (env.body or {}).get("reannounce"):
            return True
    return False


def test_an_unknown_worker_is_asked_to_announce_itself(broker):
    b, peer = broker
    worker = peer(b.backend, b"worker-1-abcd")  # it owned a partition of the broker that died
    worker.send(encode(Envelope(Kind.HEARTBEAT)))
    assert reannounce_asked(worker)


def test_an_unknown_rmproxy_is_asked_to_announce_itself(broker):
    b, peer = broker
    proxy = peer(b.frontend, b"proxy-p1")
    proxy.send(encode(Envelope(Kind.HEARTBEAT, body={"rms": {}})))
    assert reannounce_asked(proxy)
