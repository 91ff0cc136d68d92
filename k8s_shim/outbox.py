"""What the shim tells the scheduler, sent together at the end of the event loop's turn, in order.

``put(kind, message)`` queues an application (``app``), a node action (``node``), an ask or
placed allocation (``alloc``) or a release (``release``); the first put schedules one ``flush``,
which sends what was put in as few requests as order allows: the applications in one
``ApplicationRequest``, the node actions in one ``NodeRequest`` (each on its own stream, in the
order put), and asks and releases together in one ``AllocationRequest``. The scheduler applies a
request's allocations before its releases, so a release followed by an ask of the same key
(asked again after a refused bind) starts a new request.

Flushes are paced: at least ``interval`` apart (5 ms), more as the rate grows, up to ``longest``
(20 ms): the pause after a flush grows with the square root of the messages it carried (5 or
fewer: ``interval``), which settles at about 5 microseconds per message a second (5 ms at 1,000
messages a second, 500 pods a second; 10 ms at twice that). Each request costs a hand-over to the
client's gRPC thread, and rmproxy, the broker and the worker each pay per message: fewer, bigger
requests at high rates cost less all along the chain, while at low rates nothing waits longer
than before. A lone message (none sent within the pause) goes at once. Before the client
is registered nothing is sent: the registration's replay covers it, and ``clear`` drops what the
replay covers (``drop``: what one partition's replay covers).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Callable

from common import si_v18_pb2 as si
from si_client import ClientState, NotConnectedError

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

_STEADY = 5  # messages a flush may carry and the pause stay ``interval``


class Outbox:
    def __init__(self, interval: float = 0.005, longest: float = 0.02) -> None:
        self.api = None  # the SchedulerAPI, once there is one
        self.interval = interval  # the shortest pause after a flush
        self.longest = longest  # the longest
        self.pause = interval  # after the last flush (see module doc)
        self._out: list[tuple[str, Any]] = []
        self._scheduled = False
        self._last = float("-inf")  # loop time of the last flush

    def put(self, kind: str, message: Any) -> None:
        self._out.append((kind, message))
        if not self._scheduled:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            wait = self._last + self.pause - loop.time()
            if wait > 0:
                loop.call_later(wait, self.flush)
            else:
                loop.call_soon(self.flush)

    def clear(self) -> None:
        self._out.clear()

    def drop(self, covered: Callable[[str, Any], bool]) -> None:
        """Drop the messages ``covered(kind, message)`` says a partition's replay covers; the
        others keep their order."""
        self._out = [(kind, message) for kind, message in self._out if not covered(kind, message)]

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
        self.pause = max(self.interval, min(self.longest, self.interval * math.sqrt(len(out) / _STEADY)))
        apps = [m for kind, m in out if kind == "app"]
        nodes = [m for kind, m in out if kind == "node"]
        try:
            if apps:
                api.update_application(si.ApplicationRequest(new=apps))
            if nodes:
                api.update_node(si.NodeRequest(nodes=nodes))
            for request in _allocation_requests(out):
                api.update_allocation(request)
        except NotConnectedError as exc:
            log.error("cannot reach the scheduler any more (%s): requests of %d messages not sent", exc, len(out))


def _allocation_requests(out: list[tuple[str, Any]]) -> list[si.AllocationRequest]:
    """The asks and releases of ``out`` in as few requests as keep their order's meaning: a
    request's allocations are applied before its releases, so an ask of a key released earlier in
    the same request opens a new one."""
    requests: list[si.AllocationRequest] = []
    allocations: list[Any] = []
    releases: list[Any] = []
    released: set[str] = set()
    for kind, message in out:
        if kind == "alloc":
            if message.allocationKey in released:
                requests.append(_request(allocations, releases))
                allocations, releases, released = [], [], set()
            allocations.append(message)
        elif kind == "release":
            releases.append(message)
            released.add(message.allocationKey)
    if allocations or releases:
        requests.append(_request(allocations, releases))
    return requests


def _request(allocations: list[Any], releases: list[Any]) -> si.AllocationRequest:
    request = si.AllocationRequest(allocations=allocations)
    if releases:
        request.releases.allocationsToRelease.extend(releases)
    return request
