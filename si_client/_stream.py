"""One long-lived bidirectional SI stream: an outbox feeding gRPC and a reader thread.

The outbox is an unbounded FIFO, so ``send`` never blocks the caller. The reader
thread hands each response to ``dispatch(response, stream)`` before reading the next one
(which runs the callback, or queues it for the RM's event loop in order): the callbacks of
one stream therefore never run concurrently and keep the scheduler's order. Once ``close`` was called no further response is dispatched. When the call ends for any reason the stream reports it once
through ``on_end(stream, error)`` (``error`` is ``None`` for a clean end).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

import grpc

__all__ = ["Stream"]

log = logging.getLogger(__name__)

_CLOSE = object()


class Stream:
    """A bidi call of kind ``kind`` (``allocation``, ``application`` or ``node``).

    ``generation`` tags which (re-)registration opened it, so the owner can
    ignore the end of a stream it already replaced.
    """

    def __init__(
        self,
        kind: str,
        method: Callable[..., Any],
        attach: Any,
        rm_id: str,
        generation: int,
        dispatch: Callable[[Any, "Stream"], None],
        on_end: Callable[["Stream", grpc.RpcError | None], None],
    ) -> None:
        self.kind = kind
        self.generation = generation
        self._dispatch = dispatch
        self._on_end = on_end
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._queued = 0
        self._written = 0
        self._progress = threading.Condition()
        self._closed = False
        self._outbox.put(attach)  # the attach request binds the stream to the RM
        self._queued = 1
        self._call = method(self._requests(), metadata=(("rmid", rm_id),))
        self._reader = threading.Thread(target=self._read, name=f"si-{kind}-reader", daemon=True)
        self._reader.start()

    def send(self, request: Any) -> None:
        """Queue ``request``; returns at once."""
        with self._progress:
            self._queued += 1
        self._outbox.put(request)

    def flush(self, timeout: float | None) -> bool:
        """Wait until every queued request was handed to gRPC; False on timeout or end."""
        with self._progress:
            return self._progress.wait_for(
                lambda: self._written >= self._queued or self._closed, timeout
            ) and self._written >= self._queued

    def close(self) -> None:
        """End the call from our side; the reader then exits without reporting an error."""
        with self._progress:
            self._closed = True
            self._progress.notify_all()
        self._outbox.put(_CLOSE)
        self._call.cancel()

    def join(self, timeout: float | None = None) -> None:
        self._reader.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def is_open(self) -> bool:
        return not self._closed

    def _requests(self):
        while True:
            item = self._outbox.get()
            if item is _CLOSE:
                return
            yield item
            with self._progress:
                self._written += 1
                if self._written >= self._queued:
                    self._progress.notify_all()

    def _read(self) -> None:
        error: grpc.RpcError | None = None
        try:
            for response in self._call:
                if self._closed:
                    break  # replaced or closed: its responses belong to a wiped registration
                try:
                    self._dispatch(response, self)
                except Exception:  # a broken callback must not break the stream
                    log.exception("callback for %s response failed", self.kind)
        except grpc.RpcError as exc:
            error = exc
        finally:
            with self._progress:
                was_closed = self._closed
                self._closed = True
                self._progress.notify_all()
            self._outbox.put(_CLOSE)
        if not was_closed:
            self._on_end(self, error)
