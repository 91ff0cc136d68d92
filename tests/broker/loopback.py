"""A broker for tests: both sockets on free loopback ports, epochs from an in-memory counter
(where Redis keeps them in production)."""

from __future__ import annotations

import itertools

import zmq

from broker.main import Broker
from broker.table import RoutingTable

__all__ = ["loopback_broker"]


def loopback_broker(ctx: zmq.Context) -> Broker:
    counter = itertools.count(1)
    return Broker(ctx, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                  RoutingTable(lambda rm, p, floor: max(next(counter), floor + 1)))
