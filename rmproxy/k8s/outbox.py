"""What the shim tells the scheduler, sent together at the end of the event loop's turn, in order.

``put(kind, message)`` queues an application (``app``), a node action (``node``), an ask or
placed allocation (``alloc``) or a release (``release``); the first put schedules one ``flush``,
which sends consecutive messages of a kind in one request on their stream, in the order they were
put (a release and then an ask of the same key stay in that order). Flushes are at least
``interval`` apart (2 ms): at a thousand pods a second that makes one request of many asks
instead of one per pod, each of which costs a hand-over to the client's gRPC thread; a lone
message goes at once. Before the client
is registered nothing is sent: the registration's replay covers it, and ``clear`` drops what the
replay covers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from common import si_v18_pb2 as si
from rmproxy.client import ClientState, NotConnectedError

__all__ = ["Outbox"]

log = logging.getLogger(__name__)


class Outbox:
    def __init__(self, interval: float = 0.002) -> None:
        self.api = None  # the SchedulerAPI, once there is one
        self.interval = interval
        self._out: list[tuple[str, Any]] = []
        self._scheduled = False
        self._last = float("-inf")  # loop time of the last flush

    def put(self, kind: str, message: Any) -> None:
        self._out.append((kind, message))
        if not self._scheduled:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            wait = self._last + self.interval - loop.time()
            if wait > 0:
                loop.call_later(wait, self.flush)
            else:
                loop.call_soon(self.flush)

    def clear(self) -> None:
        self._out.clear()

    def flush(self) -> None:
        self._scheduled = False
        try:
            self._last = asyncio.get_running_loop().time()
        except RuntimeError:  # flushed from outside the loop (tests): no pacing to keep
            pass
        api = self.api
        if api is None or api.state not in (ClientState.RUNNING, ClientState.RECOVERING) or not self._out:
            return
        out, self._out = self._out, []
        i = 0
        try:
            while i < len(out):
                kind = out[i][0]
                j = i
                while j < len(out) and out[j][0] == kind:
                    j += 1
                items = [m for _, m in out[i:j]]
                if kind == "app":
                    api.update_application(si.ApplicationRequest(new=items))
                elif kind == "node":
                    api.update_node(si.NodeRequest(nodes=items))
                elif kind == "alloc":
                    api.update_allocation(si.AllocationRequest(allocations=items))
                else:
                    api.update_allocation(si.AllocationRequest(
                        releases=si.AllocationReleasesRequest(allocationsToRelease=items)))
                i = j
        except NotConnectedError as exc:
            log.error("cannot reach the scheduler any more (%s): %d requests not sent", exc, len(out) - i)
