"""The books of one partition: asks' pending resources, allocations and reservations.

What it owns: ``allocations`` (uuid -> Allocation) and ``reservations`` ((app id, ask key)
-> Reservation), and the bookkeeping every change makes on apps, queues, nodes and the
user/group limits, so resources are never counted twice nor lost; the UUID of a new
allocation; the execution timeout of an allocation (ask ``executionTimeoutMilliSeconds``:
``allocate`` schedules a ``T_ALLOC_TIMEOUT`` deadline, the partition releases what
``timed_out`` returns); ``changes``, a count of the changes a scheduling cycle may act on.

What it uses: the node collection, the user/group limits, the outcomes, the timers and the
partition's apps (read only), given at construction. It books what it is told and reports
it; checks (headroom, limits, node feasibility) are the caller's, and so is what follows for
the app (gang, state machine): the partition's ``allocate`` and ``release`` do that.

Who may use it: the partition and the parts below it (``lifecycle``, ``gang``,
``node_registry``) and the policies (``scheduler``, ``reservations``, ``preemption``), through
``add_ask``, ``remove_ask``, ``allocate``, ``release``, ``book_recovered``, ``resize``,
``timed_out``, ``reserve``, ``unreserve``, ``unreserve_ask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from .app_usage import track_release
from .objects import Allocation, Reservation
from .outcomes import AllocationNew, AllocationReleased, SchedState, Termination

if TYPE_CHECKING:  # pragma: no cover
    from common.resources import Resource

    from .application import Application
    from .limits import LimitTracker
    from .node import Node, NodeCollection
    from .objects import Ask
    from .outcomes import Outcomes
    from .timers import Timers

__all__ = ["Ledger", "T_ALLOC_TIMEOUT"]

T_ALLOC_TIMEOUT = "alloc"


class Ledger:
    """Asks' pending, allocations and reservations of one partition (see module doc).
    ``key_is_uuid``: an allocation's UUID is its ask's key (SI >= 1.6), else ``new_uuid()``."""

    __slots__ = ("allocations", "reservations", "changes", "key_is_uuid", "_new_uuid", "_nodes",
                 "_limits", "_outcomes", "_timers", "_apps")

    def __init__(self, nodes: "NodeCollection", limits: "LimitTracker", outcomes: "Outcomes",
                 timers: "Timers", apps: Mapping[str, "Application"],
                 new_uuid: Callable[[], str]) -> None:
        self.allocations: dict[str, Allocation] = {}
        self.reservations: dict[tuple[str, str], Reservation] = {}  # (app_id, ask_key)
        self.changes = 0  # asks added, allocations recovered or released, reservations dropped
        self.key_is_uuid = False
        self._new_uuid = new_uuid
        self._nodes = nodes
        self._limits = limits
        self._outcomes = outcomes
        self._timers = timers
        self._apps = apps

    # ---------------------------------------------------------------- asks
    def add_ask(self, app: "Application", ask: "Ask") -> None:
        """Add ``ask`` to ``app``, replacing one of the same key (its reservation and pending go)."""
        old = app.asks.get(ask.key)
        if old is not None:
            self.unreserve_ask(app, old)
            if old.pending > 0:
                app.queue.sub_pending(old.resource.multiply(old.pending))
        app.add_ask(ask)
        app.queue.add_pending(ask.resource.multiply(ask.pending))
        self.changes += 1

    def remove_ask(self, app: "Application", key: str) -> None:
        """Remove the ask ``key`` of ``app`` with its reservation and pending (allocations stay)."""
        ask = app.asks.get(key)
        if ask is None:
            return
        self.unreserve_ask(app, ask)
        if ask.pending > 0:
            app.queue.sub_pending(ask.resource.multiply(ask.pending))
        app.remove_ask(key)

    # ---------------------------------------------------------------- allocations
    def uuid_for(self, ask: "Ask") -> str:
        """The UUID of a new allocation of ``ask``."""
        return ask.key if self.key_is_uuid else self._new_uuid()

    def allocate(self, app: "Application", ask: "Ask", node: "Node", now: int,
                 uuid: str = "") -> Allocation:
        """Place one repeat of ``ask`` on ``node`` (checks were done by the caller); reports it
        and starts its execution timeout. What follows for the app is the caller's."""
        r = ask.resource
        uuid = uuid or (ask.key if self.key_is_uuid else self._new_uuid())  # (uuid_for, inline: per allocation)
        # positional: keywords cost a third of the build (tests/core/test_objects.py pins the order)
        alloc = Allocation(uuid, ask.key, app.app_id, node.node_id, r, ask.priority,
                           now, app.queue.path, ask.tags, ask.task_group, ask.placeholder,
                           ask.originator, False, 0, ask.allow_preempt_self, ask.allow_preemption)
        ask.pending -= 1
        if ask.placeholder:
            app.ph_pending -= 1
        app.pending = app.pending.sub(r)
        app.add_allocated(r)
        app.queue.pending_placed(r)
        app.allocations[alloc.uuid] = alloc
        node.allocations[alloc.uuid] = alloc
        self._nodes.update_allocated(node, r, 1, alloc.tags)
        if self._limits.active:
            self._limits.on_alloc(app, r)
        self.allocations[alloc.uuid] = alloc
        if ask.execution_timeout_ms > 0:
            alloc.timeout_at_ns = now + ask.execution_timeout_ms * 1_000_000
            self._timers.schedule(alloc.timeout_at_ns, T_ALLOC_TIMEOUT, alloc.uuid)
        self._outcomes.allocations.append(AllocationNew(alloc))
        if ask.sched_state:
            self._outcomes.sched_state(ask, SchedState.SCHEDULED, f"allocated on node {node.node_id}", now)
        if ask.pending <= 0 and ask.reserved_node:
            self.unreserve_ask(app, ask)
        return alloc

    def book_recovered(self, app: "Application", node: "Node", alloc: Allocation) -> None:
        """Book an allocation the RM reports as already running (node recovery): no checks,
        no outcome; what follows for the app is the caller's."""
        r = alloc.resource
        app.allocations[alloc.uuid] = alloc
        app.add_allocated(r)
        app.queue.add_allocated(r)
        self._limits.on_alloc(app, r)
        node.allocations[alloc.uuid] = alloc
        self._nodes.update_allocated(node, r, 1, alloc.tags)
        self.allocations[alloc.uuid] = alloc
        self.changes += 1

    def resize(self, app: "Application", alloc: Allocation, node: "Node", new: "Resource") -> None:
        """``alloc`` (of ``app`` on ``node``) is ``new`` in size from now on (in-place resize):
        node, app, queues and user/group usage follow. The checks (room on the node) are the
        caller's."""
        old = alloc.resource
        self._nodes.update_allocated(node, old, -1)
        self._nodes.update_allocated(node, new, 1)
        app.allocated = app.allocated.sub_checked(old, f"application {app.app_id} allocated")
        app.add_allocated(new)
        app.queue.sub_allocated(old)
        app.queue.add_allocated(new)
        if self._limits.active:
            self._limits.on_alloc(app, new)
            self._limits.on_release(app, old)
        alloc.resource = new
        self.changes += 1  # a shrink frees room

    def release(self, alloc: Allocation, term: Termination, message: str, now: int,
                report: bool) -> "Application | None":
        """Remove an allocation from node, app and queues; report it as released if asked.
        Returns the app it left (None when it was not booked or its app is gone): whether
        that app has work left is the caller's question."""
        if self.allocations.pop(alloc.uuid, None) is None:
            return None
        r = alloc.resource
        node = self._nodes.get(alloc.node_id)
        if node is not None and node.allocations.pop(alloc.uuid, None) is not None:
            self._nodes.update_allocated(node, r, -1, alloc.tags)
        app = self._apps.get(alloc.app_id)
        if app is not None and app.allocations.pop(alloc.uuid, None) is not None:
            app.allocated = app.allocated.sub_checked(r, f"application {app.app_id} allocated")
            if alloc.placeholder:
                app.drop_placeholder(alloc)
            app.queue.sub_allocated(r)
            if self._limits.active:
                self._limits.on_release(app, r)
            track_release(app, alloc, node, term, now)
            ask = app.asks.get(alloc.key)
            if ask is not None and ask.pending <= 0:
                del app.asks[alloc.key]  # fully placed and now ending: keep memory bounded
        if report:
            self._outcomes.released.append(AllocationReleased(alloc.app_id, alloc.uuid, alloc.key, term, message))
        self.changes += 1
        return app

    def timed_out(self, uuid: str, now: int) -> Allocation | None:
        """The allocation a ``T_ALLOC_TIMEOUT`` deadline of ``uuid`` ends, if it is still due."""
        alloc = self.allocations.get(uuid)
        if alloc is not None and alloc.timeout_at_ns and alloc.timeout_at_ns <= now:
            return alloc
        return None

    # ---------------------------------------------------------------- reservations
    def reserve(self, app: "Application", ask: "Ask", node: "Node", now: int) -> None:
        """``ask`` holds ``node``: no other ask is placed there until it is unreserved."""
        res = Reservation(node.node_id, app.app_id, ask.key, now)
        node.reservation = res
        self._nodes.refresh(node)
        ask.reserved_node = node.node_id
        app.reservations[ask.key] = res
        self.reservations[(app.app_id, ask.key)] = res
        self._outcomes.sched_state(ask, SchedState.RESERVED, f"reserved node {node.node_id}", now)

    def unreserve(self, res: Reservation) -> None:
        """Drop ``res`` from the node, the app, the ask and the partition (any that still hold it)."""
        self.reservations.pop((res.app_id, res.ask_key), None)
        node = self._nodes.get(res.node_id)
        if node is not None and node.reservation is res:
            node.reservation = None
            self._nodes.refresh(node)
        app = self._apps.get(res.app_id)
        if app is not None:
            if app.reservations.get(res.ask_key) is res:
                del app.reservations[res.ask_key]
            ask = app.asks.get(res.ask_key)
            if ask is not None and ask.reserved_node == res.node_id:
                ask.reserved_node = ""
        self.changes += 1

    def unreserve_ask(self, app: "Application", ask: "Ask") -> None:
        """Drop the reservation ``ask`` holds, if any."""
        res = app.reservations.get(ask.key)
        if res is not None:
            self.unreserve(res)
