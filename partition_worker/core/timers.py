"""Deadlines of one partition, fired by ``Partition.tick(now)`` (STYLE #2: time is an input).

What it owns: a heap of ``(deadline, kind, key, generation)`` and the handler of each kind.
Who may use it: the partition's components register a handler per kind once and schedule
deadlines; only the partition fires them. A handler gets ``(key, generation, now)`` and
checks the generation itself (a timer is never cancelled, a stale one does nothing).
"""

from __future__ import annotations

import heapq
from typing import Callable

__all__ = ["Timers", "Handler"]

Handler = Callable[[str, int, int], None]  # (key, generation, now)


class Timers:
    """Deadlines in time order; same-time deadlines fire in the order they were scheduled."""

    __slots__ = ("_heap", "_seq", "_handlers")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, str, int]] = []
        self._seq = 0
        self._handlers: dict[str, Handler] = {}

    def register(self, kind: str, handler: Handler) -> None:
        """Route deadlines of ``kind`` to ``handler``; a kind has one handler."""
        if kind in self._handlers:
            raise ValueError(f"timer kind {kind!r} already has a handler")
        self._handlers[kind] = handler

    def schedule(self, at: int, kind: str, key: str, gen: int = 0) -> None:
        """Call the handler of ``kind`` with ``(key, gen, now)`` at the first tick at or after ``at``."""
        if kind not in self._handlers:
            raise KeyError(f"timer kind {kind!r} has no handler")
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, key, gen))

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def fire_due(self, now: int) -> None:
        """Fire every deadline at or before ``now`` (handlers may schedule more)."""
        heap = self._heap
        handlers = self._handlers
        while heap and heap[0][0] <= now:
            _, _, kind, key, gen = heapq.heappop(heap)
            handlers[kind](key, gen, now)

    def __len__(self) -> int:
        return len(self._heap)
