"""The books of one partition: asks' pending resources, allocations and reservations.

What it owns: ``allocations`` (uuid -> Allocation) and ``reservations`` ((app id, ask key)
-> Reservation), and the bookkeeping every change makes on apps, queues, nodes and the
user/group limits, so resources are never counted twice nor lost. Also the execution
timeout of an allocation (ask ``executionTimeoutMilliSeconds``).

Who may use it: the partition's command handlers and components (``lifecycle``, ``gang``,
``node_registry``) and the policies (``scheduler``, ``reservations``, ``preemption``), through
the public methods only: ``add_ask``, ``remove_ask``, ``allocate``, ``release``,
``book_recovered``, ``reserve``, ``unreserve``, ``unreserve_ask``. Checks (headroom, limits,
node feasibility) are the caller's: the ledger books what it is told.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .app_state import AppEvent, AppState
from .app_usage import track_release
from .objects import Allocation, Reservation
from .outcomes import AllocationNew, AllocationReleased, SchedState, Termination

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node
    from .objects import Ask
    from .partition import Partition
    from .timers import Timers

__all__ = ["Ledger", "T_ALLOC_TIMEOUT"]

T_ALLOC_TIMEOUT = "alloc"
_RUN_ON_ALLOCATION = (AppState.ACCEPTED, AppState.STARTING)


class Ledger:
    """Asks' pending, allocations and reservations of one partition (see module doc)."""

    __slots__ = ("p", "allocations", "reservations", "_nodes", "_limits", "_outcomes", "_timers")

    def __init__(self, p: "Partition", timers: "Timers") -> None:
        self.p = p
        self.allocations: dict[str, Allocation] = {}
        self.reservations: dict[tuple[str, str], Reservation] = {}  # (app_id, ask_key)
        self._nodes = p.nodes
        self._limits = p.limits
        self._outcomes = p.outcomes
        self._timers = timers
        timers.register(T_ALLOC_TIMEOUT, self._on_timeout)

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
    def allocate(self, app: "Application", ask: "Ask", node: "Node", now: int,
                 uuid: str = "") -> Allocation:
        """Place one repeat of ``ask`` on ``node`` (checks were done by the caller); reports it,
        starts its execution timeout, books a placeholder with the gang, and moves the app on."""
        p = self.p
        r = ask.resource
        uuid = uuid or (ask.key if p.key_is_uuid else p.new_uuid())
        # positional: keywords cost a third of the build (tests/core/test_objects.py pins the order)
        alloc = Allocation(uuid, ask.key, app.app_id, node.node_id, r, ask.priority,
                           now, app.queue.path, ask.tags, ask.task_group, ask.placeholder,
                           ask.originator, False, 0, ask.allow_preempt_self, ask.allow_preemption)
        ask.pending -= 1
        if ask.placeholder:
            app.ph_pending -= 1
        app.pending = app.pending.sub(r)
        app.add_allocated(r)
        q = app.queue
        while q is not None:
            q.pending = q.pending.sub(r)
            q.allocated = q.allocated.add(r)
            q = q.parent
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
            p.sched_state(ask, SchedState.SCHEDULED, f"allocated on node {node.node_id}")
        if ask.pending <= 0 and ask.reserved_node:
            self.unreserve_ask(app, ask)
        if alloc.placeholder:
            p.gangs.placeholder_allocated(app, alloc, now)
        elif app.state in _RUN_ON_ALLOCATION:
            p.lifecycle.fire(app, AppEvent.RUN, now)
        return alloc

    def book_recovered(self, app: "Application", node: "Node", alloc: Allocation) -> None:
        """Book an allocation the RM reports as already running (node recovery): no checks,
        no outcome; the caller moves the app on."""
        r = alloc.resource
        app.allocations[alloc.uuid] = alloc
        app.add_allocated(r)
        app.queue.add_allocated(r)
        self._limits.on_alloc(app, r)
        node.allocations[alloc.uuid] = alloc
        self._nodes.update_allocated(node, r, 1, alloc.tags)
        self.allocations[alloc.uuid] = alloc

    def release(self, alloc: Allocation, term: Termination, message: str, now: int,
                report: bool, check_app: bool = True) -> None:
        """Remove an allocation from node, app and queues; report it as released if asked.
        ``check_app`` lets the app progress to Completing when this was its last work."""
        p = self.p
        if self.allocations.pop(alloc.uuid, None) is None:
            return
        r = alloc.resource
        node = self._nodes.get(alloc.node_id)
        if node is not None and node.allocations.pop(alloc.uuid, None) is not None:
            self._nodes.update_allocated(node, r, -1, alloc.tags)
        app = p.apps.get(alloc.app_id)
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
        p.changed = True
        if app is not None and check_app:
            p.lifecycle.maybe_complete(app, now)

    def _on_timeout(self, uuid: str, gen: int, now: int) -> None:
        alloc = self.allocations.get(uuid)
        if alloc is not None and alloc.timeout_at_ns and alloc.timeout_at_ns <= now:
            self.release(alloc, Termination.TIMEOUT,
                         f"allocation {uuid} exceeded its execution timeout", now, report=True)

    # ---------------------------------------------------------------- reservations
    def reserve(self, app: "Application", ask: "Ask", node: "Node", now: int) -> None:
        """``ask`` holds ``node``: no other ask is placed there until it is unreserved."""
        res = Reservation(node.node_id, app.app_id, ask.key, now)
        node.reservation = res
        self._nodes.refresh(node)
        ask.reserved_node = node.node_id
        app.reservations[ask.key] = res
        self.reservations[(app.app_id, ask.key)] = res
        self.p.sched_state(ask, SchedState.RESERVED, f"reserved node {node.node_id}")

    def unreserve(self, res: Reservation) -> None:
        """Drop ``res`` from the node, the app, the ask and the partition (any that still hold it)."""
        p = self.p
        self.reservations.pop((res.app_id, res.ask_key), None)
        node = self._nodes.get(res.node_id)
        if node is not None and node.reservation is res:
            node.reservation = None
            self._nodes.refresh(node)
        app = p.apps.get(res.app_id)
        if app is not None:
            if app.reservations.get(res.ask_key) is res:
                del app.reservations[res.ask_key]
            ask = app.asks.get(res.ask_key)
            if ask is not None and ask.reserved_node == res.node_id:
                ask.reserved_node = ""
        p.changed = True

    def unreserve_ask(self, app: "Application", ask: "Ask") -> None:
        """Drop the reservation ``ask`` holds, if any."""
        res = app.reservations.get(ask.key)
        if res is not None:
            self.unreserve(res)
