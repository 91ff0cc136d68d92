"""The shim's event loop: while it is busy, it waits a moment before each poll, so that what
arrives meanwhile is handled in one wake-up.

At a few hundred pods a second the shim is woken several thousand times a second (watch lines,
the answers of bindings and events, the scheduler's answers), mostly for one thing each: at
250 pods a second it spent nearly twice the CPU per pod it spends at 500, where each wake-up
carries more. ``CoalescingSelector`` sleeps ``pause`` (1 ms) before it polls when the last
poll found something ready within ``pause`` (the loop is busy), and polls at once otherwise:
a lone event after a quiet spell is handled as soon as it comes, a busy loop's events wait at
most ``pause`` and are handled together. A timer due sooner than ``pause`` is not delayed. The
sleep lets the gRPC client's threads run meanwhile.
"""

from __future__ import annotations

import asyncio
import selectors
import time

__all__ = ["CoalescingSelector", "new_event_loop"]

PAUSE = 0.001


class CoalescingSelector(selectors.DefaultSelector):
    def __init__(self, pause: float = PAUSE) -> None:
        super().__init__()
        self.pause = pause
        self.busy = False  # the last poll found something ready within ``pause``
        self.pauses = 0  # how often it waited (for tests and profiles)

    def select(self, timeout: float | None = None):
        if self.busy and (timeout is None or timeout > 0):
            pause = self.pause if timeout is None else min(self.pause, timeout)
            time.sleep(pause)
            self.pauses += 1
            if timeout is not None:
                timeout = max(0.0, timeout - pause)
        start = time.monotonic()
        ready = super().select(timeout)
        self.busy = bool(ready) and time.monotonic() - start < self.pause
        return ready


def new_event_loop(pause: float = PAUSE) -> asyncio.AbstractEventLoop:
    """An asyncio event loop polling through a ``CoalescingSelector``."""
    return asyncio.SelectorEventLoop(CoalescingSelector(pause))
