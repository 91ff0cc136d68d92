"""Liveness on every ZeroMQ link, the same numbers on both ends (Majordomo's heartbeating).

The broker, the rmproxies and the workers each send a heartbeat every ``INTERVAL`` and count a
peer silent for ``EXPIRY`` as dead; the broker purges it at its next heartbeat turn, so a dead
peer is noticed within ``EXPIRY + INTERVAL`` (3 s) even when its connection stays open.
"""

from __future__ import annotations

__all__ = ["INTERVAL", "LIVENESS", "EXPIRY"]

INTERVAL = 0.5  # seconds between heartbeats, both ways
LIVENESS = 5  # heartbeats a peer may miss before it counts as dead (purged within EXPIRY + INTERVAL = 3 s)
EXPIRY = INTERVAL * LIVENESS
