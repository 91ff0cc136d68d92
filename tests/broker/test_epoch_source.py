"""The broker's epochs from Redis: bounded, and not asked again for a while once Redis failed, so
an unreachable Redis cannot stall the broker's loop past its peers' heartbeat expiry."""

from __future__ import annotations

import pytest
import redis

from broker.main import REDIS_RETRY_AFTER, REDIS_TIMEOUT, EpochSource
from broker.table import EpochUnavailable
from common.heartbeat import EXPIRY, INTERVAL


class Store:
    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def next_epoch(self, rm_id, partition, floor):
        self.calls += 1
        if self.down:
            raise redis.TimeoutError("Timeout reading from socket")
        return floor + 1


def test_an_unreachable_redis_is_not_asked_again_until_the_retry_interval_passed():
    """Found by the network-fault soak: with the broker cut from Redis, every registration attempt
    blocked the broker's loop for Redis' 2 s timeout, long enough to miss heartbeats."""
    store, now = Store(), [100.0]
    source = EpochSource(store, clock=lambda: now[0])
    assert source("rm", "a", 4) == 5
    store.down = True
    with pytest.raises(EpochUnavailable, match="Redis unreachable: Timeout reading from socket"):
        source("rm", "a", 5)
    for _ in range(50):  # a burst of registrations: one call to Redis, not fifty
        with pytest.raises(EpochUnavailable, match=r"Redis unreachable 0\.0s ago"):
            source("rm", "b", 0)
    assert store.calls == 2
    store.down = False
    now[0] += REDIS_RETRY_AFTER
    assert source("rm", "b", 0) == 1 and store.calls == 3


def test_a_stalled_redis_call_and_the_next_heartbeat_stay_within_the_peers_expiry():
    # one bounded call per retry interval: at worst the loop stalls REDIS_TIMEOUT (the connect,
    # or the reply) between two heartbeats
    assert REDIS_TIMEOUT + INTERVAL < EXPIRY / 2
