"""Coroutine callbacks handed from the client's reader threads to the RM's event loop.

``LoopRelay(loop).submit(live, fn, args, then)`` queues ``fn(*args)`` (an ``async def``
callback) and returns at once; on the loop, the queued callbacks run one after the other in the
order they were submitted, each followed by ``then()``, and one whose ``live()`` is false by then
(its stream was closed: the registration it belongs to was replaced) is dropped. Whatever
arrives while the loop is busy is run on one wake-up of the loop. A callback that completes
without suspending (the usual case: it only updates the RM's books) costs no task; one that
awaits is finished in a task, and the callbacks behind it wait for it.

This replaces ``asyncio.run_coroutine_threadsafe(...).result()`` per response: a task, a
cross-thread future and a wake-up of the reader thread for every message.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import types
from typing import Any, Callable

__all__ = ["LoopRelay"]

log = logging.getLogger(__name__)


class LoopRelay:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._draining = False  # a drain is scheduled or running: no further wake-up needed

    def submit(self, live: Callable[[], bool], fn: Callable, args: tuple, then: Callable[[], None] | None = None) -> None:
        with self._lock:
            self._items.append((live, fn, args, then))
            if self._draining:
                return
            self._draining = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nothing will run these any more
            with self._lock:
                self._items.clear()
                self._draining = False

    def _next(self):
        with self._lock:
            if self._items:
                return self._items.popleft()
            self._draining = False
            return None

    def _drain(self) -> None:
        """On the loop: run what is queued, in order, until a callback suspends or none is left."""
        while (item := self._next()) is not None:
            live, fn, args, then = item
            if not live():
                continue
            try:
                coro = fn(*args)
                pending = coro.send(None)
            except StopIteration:
                pass
            except Exception:
                log.exception("callback %s failed", getattr(fn, "__qualname__", fn))
            else:  # it awaits something: finish it in a task; the rest waits for it
                task = self.loop.create_task(self._finish(fn, coro, pending))
                task.add_done_callback(lambda _task: self._finished(coro, then))
                return
            _then(then)

    async def _finish(self, fn: Callable, coro, pending: Any) -> None:
        try:
            await _resume(coro, pending)
        except Exception:
            log.exception("callback %s failed", getattr(fn, "__qualname__", fn))

    def _finished(self, coro, then: Callable[[], None] | None) -> None:
        """Its task ended (done, failed, or cancelled, even before it started): what is queued
        behind it runs."""
        coro.close()  # a no-op unless the task was cancelled before it could resume the callback
        _then(then)
        self._drain()


def _then(then: Callable[[], None] | None) -> None:
    if then is not None:
        try:
            then()
        except Exception:
            log.exception("after a callback: %s failed", getattr(then, "__qualname__", then))


@types.coroutine
def _resume(coro, pending: Any):
    """Await the rest of ``coro``, which suspended on ``pending`` (what it yielded to its task)."""
    while True:
        try:
            sent = yield pending
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # thrown into the task (a cancellation): on into the coroutine
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                pending = coro.send(sent)
            except StopIteration as stop:
                return stop.value
