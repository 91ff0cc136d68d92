"""Reconnect delays: capped exponential backoff with full jitter (pure; randomness passed in)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(slots=True)
class Backoff:
    """Delay before reconnect attempt *n* (0-based): ``uniform(0, min(cap, base * 2**n))``.

    Full jitter keeps many RMs that lost the same rmproxy from reconnecting in
    lockstep. ``rng`` is injected so tests and post-mortems can seed it.
    """

    base: float = 0.05
    cap: float = 2.0
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError(f"backoff: need 0 < base <= cap, got base={self.base} cap={self.cap}")

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * (2 ** min(attempt, 30)))
        return self.rng.uniform(ceiling / 2, ceiling) if attempt == 0 else self.rng.uniform(0, ceiling)
