"""The nodes of one partition: CREATE (with recovery of existing allocations), UPDATE, drain,
undrain and decommission, allocations the RM placed itself, and the partition's total capacity.

What it owns: ``total`` (the sum of node capacities; root's max follows it, as in YuniKorn)
and the node commands. The nodes themselves and their order live in ``node.NodeCollection``
(``Partition.nodes``). Who may use it: the partition (node commands, stop). Reasons are
YuniKorn's (YUNIKORN_BEHAVIOUR.md 1.1 S11-S13). Where YuniKorn silently ignores a bad
UPDATE / DRAIN_TO_SCHEDULABLE, Korral also emits a NODE event saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from common.constants import CREATION_TIME
from common.resources import ZERO, Resource

from .app_state import AppEvent, AppState
from .commands import AddAllocation, AddNode, DrainNode, RecoveredAlloc, RemoveNode, UndrainNode, UpdateNode
from .feasibility import CHAIN, READY, SCHEDULABLE, Purpose
from .foreign import foreign_total
from .node import Node, parse_ready
from .node_terms import host_ports_of
from .objects import Allocation, allows_preemption
from .outcomes import AllocationNew, AskRejected, EventType, NodeAccepted, NodeRejected, Termination
from .queue import ObjectState

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import NodeCollection
    from .objects import Ask
    from .partition import Partition

__all__ = ["NodeRegistry"]

_REJECTED = "failure while adding new node, node rejected with error: "
_RECOVERABLE_APP_STATES = (AppState.NEW, AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING,
                           AppState.COMPLETING)
_RUN_ON_RECOVERY = (AppState.ACCEPTED, AppState.STARTING, AppState.COMPLETING)


class NodeRegistry:
    """Node commands and the total capacity of one partition (see module doc)."""

    __slots__ = ("p", "total")

    def __init__(self, p: "Partition") -> None:
        self.p = p
        self.total = ZERO

    def _total_changed(self, added: Resource | None = None, removed: Resource | None = None) -> None:
        """Root max follows the partition's total capacity (YuniKorn); kept incrementally."""
        p = self.p
        if added is not None:
            self.total = self.total.add(added)
        if removed is not None:
            self.total = self.total.sub_eliminate_negative(removed)
        p.root.max = self.total if p.nodes.nodes else None
        p.changed = True

    # ---------------------------------------------------------------- CREATE
    def add(self, cmd: AddNode, now: int) -> None:
        """The ``AddNode`` command: a new node, with the allocations it already runs."""
        p = self.p
        out = p.outcomes
        nid = cmd.node_id
        if not nid:
            out.nodes_rejected.append(NodeRejected(nid, _REJECTED + "node ID must not be empty"))
            return
        if p.state is not ObjectState.ACTIVE:
            out.nodes_rejected.append(NodeRejected(nid, _REJECTED + f"partition {p.full_name} is stopped cannot add a new node {nid}"))
            return
        if nid in p.nodes.nodes:
            out.nodes_rejected.append(NodeRejected(nid, _REJECTED + f"failed to add node {nid} to partition {p.full_name}, error: partition {p.full_name} has an existing node {nid}, node name must be unique"))
            return
        err = _negative(nid, cmd.capacity, cmd.occupied) or self._check_recovered(cmd)
        if err:
            out.nodes_rejected.append(NodeRejected(nid, _REJECTED + err))
            return
        node = Node(node_id=nid, attributes=dict(cmd.attributes), capacity=cmd.capacity,
                    occupied=cmd.occupied, ready=parse_ready(cmd.attributes), schedulable=cmd.schedulable)
        self._unreadable(node, node.apply_attributes(), now)
        p.nodes.add(node)
        self._total_changed(added=node.capacity)
        for ra in cmd.existing:
            self._recover(node, ra, now)
        out.nodes_accepted.append(NodeAccepted(nid))
        p.event(EventType.NODE, nid, "NodeAdded", f"node {nid} added to partition {p.name}", now)

    def _check_recovered(self, cmd: AddNode) -> str:
        """Validate every existing allocation before touching anything (all or nothing)."""
        seen: set[str] = set()
        for ra in cmd.existing:
            err = self._recovery_error(ra, cmd.node_id, seen)
            if err:
                return err
            seen.add(ra.uuid)
        return ""

    def _recovery_error(self, ra: RecoveredAlloc, node_id: str, seen: set[str]) -> str:
        """Why ``ra`` cannot be booked on node ``node_id`` ("" when it can)."""
        p = self.p
        if not ra.uuid:
            return f"failing to restore allocation {ra.key} for application {ra.app_id}: missing uuid"
        if ra.uuid in p.allocations or ra.uuid in seen:
            return f"failing to restore allocation {ra.key} for application {ra.app_id}: duplicate uuid {ra.uuid}"
        if ra.node_id and ra.node_id != node_id:
            return f"failed to find node {ra.node_id}"
        if not ra.app_id:
            return f"failed to find application {ra.app_id}"
        app = p.apps.get(ra.app_id)
        if app is not None and app.state not in _RECOVERABLE_APP_STATES:
            return f"cannot allocate resource from application {ra.app_id}: application is {app.state.value}"
        if ra.resource.has_negative() or ra.resource.is_zero():
            return f"cannot allocate resource from application {ra.app_id}: invalid resource {ra.resource}"
        return ""

    def place(self, cmd: AddAllocation, now: int) -> None:
        """The ``AddAllocation`` command: an allocation the RM placed on one of its nodes. Booked
        as a recovered one (no checks of headroom or limits: it runs already), its pending ask of
        the same key gone, and reported as new; a rejection names the allocation."""
        p = self.p
        ra = cmd.alloc
        node = p.nodes.get(ra.node_id)
        err = f"failed to find node {ra.node_id}" if node is None else self._recovery_error(ra, ra.node_id, set())
        if err:
            p.outcomes.rejected_asks.append(AskRejected(ra.app_id, ra.key, err))
            return
        app = p.apps.get(ra.app_id)
        if app is not None and ra.key in app.asks:
            p.ledger.remove_ask(app, ra.key)
        p.outcomes.allocations.append(AllocationNew(self._recover(node, ra, now)))
        p.changed = True

    def _recover(self, node: Node, ra: RecoveredAlloc, now: int) -> Allocation:
        """Add a recovered allocation to node, app and queues without scheduling and without a
        max check. An app the RM has not added yet is created in ``root.@recovery@`` and moved
        to its placed queue when the RM adds it (Korral's take on YuniKorn >= 1.4 recovery)."""
        p = self.p
        lifecycle = p.lifecycle
        app = lifecycle.adopt_recovered(ra.app_id, now)
        created_ns = now
        ct = ra.tags.get(CREATION_TIME)
        if ct:
            try:
                created_ns = int(ct) * 1_000_000_000
            except ValueError:
                pass
        alloc = Allocation(uuid=ra.uuid, key=ra.key, app_id=app.app_id, node_id=node.node_id,
                           resource=ra.resource, priority=ra.priority, create_time_ns=created_ns,
                           queue_path=app.queue.path, tags=dict(ra.tags), task_group=ra.task_group,
                           placeholder=ra.placeholder, recovered=True, originator=ra.originator,
                           allow_preempt_self=ra.allow_preempt_self,
                           allow_preemption=allows_preemption(ra.tags))
        p.ledger.book_recovered(app, node, alloc)
        bad_ports = host_ports_of(alloc.tags)[1]
        if bad_ports:  # booked all the same: it runs; its ports are not known
            p.event(EventType.NODE, node.node_id, "InvalidAllocationTag",
                    f"allocation {alloc.key} on node {node.node_id}: {bad_ports}", now)
        p.quota.recovered(app.queue, now)  # no max check here: a lowered max may be exceeded
        if ra.placeholder:
            app.add_placeholder(alloc)
            p.gangs.start_timer(app, now)
        if app.state is AppState.NEW:
            lifecycle.fire(app, AppEvent.RUN, now)
        if not ra.placeholder and app.state in _RUN_ON_RECOVERY:
            lifecycle.fire(app, AppEvent.RUN, now)
        return alloc

    # ---------------------------------------------------------------- UPDATE, drain, undrain
    def _node_or_event(self, node_id: str, action: str, now: int) -> Node | None:
        p = self.p
        node = p.nodes.get(node_id)
        if node is None:
            p.event(EventType.NODE, node_id, "NodeNotFound",
                    f"{action} failed: node {node_id} does not exist in partition {p.name}", now)
        return node

    def update(self, cmd: UpdateNode, now: int) -> None:
        """The ``UpdateNode`` command: attributes, capacity, occupied (unknown node: an event)."""
        p = self.p
        node = self._node_or_event(cmd.node_id, "UPDATE", now)
        if node is None:
            return
        err = _negative(cmd.node_id, cmd.capacity, cmd.occupied)
        if err:
            p.event(EventType.NODE, cmd.node_id, "InvalidNodeUpdate", f"UPDATE ignored: {err}", now)
            return
        if cmd.attributes:  # readiness, labels, taints (Node.apply_attributes)
            node.attributes.update(cmd.attributes)
            self._unreadable(node, node.apply_attributes(cmd.attributes), now)
        old_capacity = node.capacity
        if cmd.capacity is not None:
            node.capacity = cmd.capacity
        if cmd.occupied is not None:  # the RM's figure, plus the foreign allocations we know
            node.occupied = cmd.occupied.add(foreign_total(node)) if node.foreign else cmd.occupied
        p.nodes.update(node)
        if cmd.capacity is not None:
            self._total_changed(added=node.capacity, removed=old_capacity)
        res = node.reservation
        if res is not None:  # a shrunk or relabelled node may never take its reserved ask now
            app = p.apps.get(res.app_id)
            ask = app.asks.get(res.ask_key) if app is not None else None
            if ask is None or _never_takes(node, ask, p.apps, p.nodes):
                p.ledger.unreserve(res)
        p.changed = True

    def _unreadable(self, node: Node, errors: list[str], now: int) -> None:
        """A NODE event for each attribute the node checks could not read."""
        for err in errors:
            self.p.event(EventType.NODE, node.node_id, "InvalidNodeAttribute", f"node {node.node_id}: {err}", now)

    def drain(self, cmd: DrainNode, now: int) -> None:
        """The ``DrainNode`` command: no new allocations there; its reservation is dropped."""
        p = self.p
        node = self._node_or_event(cmd.node_id, "DRAIN_NODE", now)
        if node is not None:
            node.schedulable = False
            if node.reservation is not None:
                p.ledger.unreserve(node.reservation)
            p.nodes.refresh(node)
            p.event(EventType.NODE, node.node_id, "NodeDraining", f"node {node.node_id} draining", now)

    def undrain(self, cmd: UndrainNode, now: int) -> None:
        """The ``UndrainNode`` command (DRAIN_TO_SCHEDULABLE): schedulable again."""
        p = self.p
        node = self._node_or_event(cmd.node_id, "DRAIN_TO_SCHEDULABLE", now)
        if node is None:
            return
        if node.schedulable:
            p.event(EventType.NODE, node.node_id, "NodeNotDraining",
                    f"DRAIN_TO_SCHEDULABLE failed: node {node.node_id} is not draining", now)
            return
        node.schedulable = True
        p.nodes.refresh(node)
        p.changed = True
        p.event(EventType.NODE, node.node_id, "NodeSchedulable", f"node {node.node_id} schedulable", now)

    # ---------------------------------------------------------------- decommission
    def remove(self, cmd: RemoveNode, now: int) -> None:
        """The ``RemoveNode`` command (DECOMISSION): its allocations are released (reported)."""
        p = self.p
        node = p.nodes.get(cmd.node_id)
        if node is None:
            return  # unknown node: ignored (YuniKorn)
        if node.reservation is not None:
            p.ledger.unreserve(node.reservation)
        msg = f"Node {node.node_id} Removed"
        for alloc in list(node.allocations.values()):
            p.ledger.release(alloc, Termination.STOPPED_BY_RM, msg, now, report=True)
        p.foreign.node_removed(node)
        p.nodes.remove(node.node_id)
        self._total_changed(removed=node.capacity)
        p.event(EventType.NODE, node.node_id, "NodeRemoved", f"node {node.node_id} removed from partition {p.name}", now)


def _never_takes(node: Node, ask: "Ask", apps: Mapping[str, "Application"], nodes: "NodeCollection") -> bool:
    """The node rejects the ask it holds reserved for good (capacity − occupied too small, its
    selector or affinity no longer matches, an untolerated taint). Drained or not ready passes
    by: the reservation stays."""
    rejection = CHAIN.bind(ask, Purpose.RESERVE, apps, skip=(SCHEDULABLE, READY), nodes=nodes).first_rejection(node)
    return rejection is not None and not rejection.retry_can_help


def _negative(node_id: str, capacity: Resource | None, occupied: Resource | None) -> str:
    """An error naming the node if a reported resource has a negative quantity, else ""."""
    for what, r in (("schedulable", capacity), ("occupied", occupied)):
        if r is not None and r.has_negative():
            return f"node {node_id}: {what} resource {r} has a negative quantity"
    return ""
