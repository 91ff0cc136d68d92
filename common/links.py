"""The DEALER socket a worker or an rmproxy keeps to the broker, made in one place."""

from __future__ import annotations

import os

import zmq

from common import security

__all__ = ["HWM", "broker_dealer"]

HWM = 100_000  # messages queued per direction before ZeroMQ drops; batches keep this far off


def broker_dealer(ctx: zmq.Context, address: str, name: str, curve: tuple[str | None, str | None]) -> zmq.Socket:
    """Connected DEALER with no linger, deep queues, a unique identity (``name`` plus random
    bytes, so a restarted process is a new peer) and CURVE when ``curve`` names key files."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.IDENTITY, f"{name}-{os.urandom(4).hex()}".encode())
    security.secure_client(sock, *curve)
    sock.connect(address)
    return sock
