"""A broker for tests: both sockets on free loopback ports, epochs from an in-memory counter
(where Redis keeps them in production); ``running_broker`` runs one in a thread with peers."""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import zmq

from broker.main import Broker
from broker.table import RoutingTable

__all__ = ["loopback_broker", "running_broker", "Peer"]

Peer = Callable[..., zmq.Socket]  # (bound socket, identity, rcvtimeo_ms=None) -> a connected DEALER


def loopback_broker(ctx: zmq.Context) -> Broker:
    counter = itertools.count(1)
    return Broker(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                  RoutingTable(lambda rm, p, floor: max(next(counter), floor + 1)))


@contextmanager
def running_broker() -> Iterator[tuple[Broker, Peer]]:
    """A broker running in a thread, and ``peer(bound, identity)``: a DEALER connected to one of
    its sockets (``b.backend`` as a worker, ``b.frontend`` as an rmproxy). All stopped at the end."""
    ctx = zmq.Context()
    b = loopback_broker(ctx)
    thread = threading.Thread(target=b.run, daemon=True)
    thread.start()
    socks: list[zmq.Socket] = []

    def peer(bound: zmq.Socket, identity: bytes, rcvtimeo_ms: int | None = None) -> zmq.Socket:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, identity)
        s.setsockopt(zmq.LINGER, 0)
        if rcvtimeo_ms is not None:
            s.setsockopt(zmq.RCVTIMEO, rcvtimeo_ms)
        s.connect(bound.getsockopt(zmq.LAST_ENDPOINT).decode())
        socks.append(s)
        return s

    try:
        yield b, peer
    finally:
        b.running = False
        thread.join(5)
        for s in socks:
            s.close(0)
        b.close()
        ctx.term()
