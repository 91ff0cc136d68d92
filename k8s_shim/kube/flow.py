"""Client-side flow control: the shim's writes through a token bucket, and how long to wait when
the API server says it is too busy.

- ``TokenBucket(qps, burst)``: client-go's rate limiter (``kubernetes.qps`` / ``kubernetes.burst``
  of the configmap): ``burst`` tokens at most, ``qps`` more a second; a request takes one. It
  does not block: ``take(go)`` calls ``go()`` at once when a token is there, else queues it and
  calls it when its token comes, first come first served (one timer for the whole queue).
  ``qps <= 0`` turns the limit off. The client keeps two (``KubeClient``): one for the
  scheduling writes, one for events, as kube-scheduler gives its events a client of their own.
- ``retry_delay(status, retry_after, attempt)``: how long to wait before sending a refused
  request again, or None when it should not be. As client-go's request retry: a 429, or a 5xx
  that names a ``Retry-After``, is retried after at least that many seconds, up to
  ``MAX_RETRIES`` times; a 429 without ``Retry-After`` after a bounded exponential backoff.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from typing import Callable

__all__ = ["TokenBucket", "retry_delay", "MAX_RETRIES", "MAX_RETRY_AFTER", "BACKOFF_BASE", "BACKOFF_CAP"]

MAX_RETRIES = 10  # client-go's default for a request answered 429 (or 5xx with Retry-After)
MAX_RETRY_AFTER = 60.0  # a server asking for longer is waited for this long (APF asks for 1-a few seconds)
BACKOFF_BASE, BACKOFF_CAP = 0.5, 8.0  # a 429 without Retry-After: 0.25-0.5 s, then doubling, at most 8 s
_jitter = random.Random()


def retry_delay(status: int, retry_after: float | None, attempt: int, rng: random.Random = _jitter) -> float | None:
    """Seconds to wait before attempt ``attempt + 1`` of a request answered ``status`` (with
    ``retry_after`` seconds named, or None); None: do not retry it here (the caller decides)."""
    if attempt >= MAX_RETRIES:
        return None
    if retry_after is not None and (status == 429 or status >= 500):
        return min(max(retry_after, 0.0), MAX_RETRY_AFTER)
    if status == 429:  # jittered, so that many clients throttled together do not come back together
        ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** attempt)
        return rng.uniform(ceiling / 2, ceiling)
    return None


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self.waited = 0  # requests that waited for a token (counters)
        self.set_rate(qps, burst)

    def set_rate(self, qps: float, burst: int) -> None:
        """New limits (the bucket starts full, as client-go's does)."""
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._at = self.clock()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiting:
            self._drain()

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now

    def take(self, go: Callable[[], None]) -> None:
        """``go()`` once a token is free: now if one is and nobody waits before this request."""
        if self.qps <= 0:
            go()
            return
        if not self._waiting:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                go()
                return
        self.waited += 1
        self._waiting.append(go)
        if self._timer is None:
            self._schedule()

    def _schedule(self) -> None:
        wait = max(0.0, (1.0 - self._tokens) / self.qps)
        self._timer = asyncio.get_running_loop().call_later(wait, self._drain)

    def _drain(self) -> None:
        """Hand the tokens come meanwhile to the waiting requests, first come first served."""
        self._timer = None
        if self.qps <= 0:
            ready = list(self._waiting)
            self._waiting.clear()
        else:
            self._refill()
            ready = []
            while self._waiting and self._tokens >= 1.0:
                self._tokens -= 1.0
                ready.append(self._waiting.popleft())
            if self._waiting:
                self._schedule()
        for go in ready:
            go()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting.clear()
