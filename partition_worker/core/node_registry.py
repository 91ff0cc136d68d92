"""The nodes of one partition: CREATE (with the checks of its existing allocations), UPDATE,
drain, undrain and decommission, and the partition's total capacity.

What it owns: ``total`` (the sum of node capacities; root's max follows it, as in YuniKorn),
the node commands and the checks of a recovered allocation (``recovery_error``,
``recovered_allocation``). ``changes`` counts the node changes a cycle may act on (capacity,
an update, a node schedulable again). The nodes themselves and their order live in
``node.NodeCollection`` (``Partition.nodes``).

What it uses, given at construction: the node collection, root (its max), the ledger (a
reservation a node can no longer hold is dropped), the partition's apps (read only) and the
outcomes. Booking a node's existing allocations and releasing a removed node's allocations
move apps on, so the partition does them between ``add`` and ``accepted`` and before
``remove``.

Who may use it: the partition (node commands, ``AddAllocation``, stop). Reasons are
YuniKorn's (YUNIKORN_BEHAVIOUR.md 1.1 S11-S13). Where YuniKorn silently ignores a bad
UPDATE / DRAIN_TO_SCHEDULABLE, Korral also emits a NODE event saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from common.constants import CREATION_TIME, NODE_LABELS, NODE_TAINTS
from common.resources import ZERO, Resource

from .app_state import AppState
from .commands import AddNode, DrainNode, RecoveredAlloc, UndrainNode, UpdateNode
from .feasibility import CHAIN, READY, SCHEDULABLE, Purpose
from .foreign import foreign_total
from .node import Node, parse_ready
from .objects import Allocation, allows_preemption
from .outcomes import EventType, NodeAccepted, NodeRejected

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .ledger import Ledger
    from .node import NodeCollection
    from .objects import Ask
    from .outcomes import Outcomes
    from .queue import Queue

__all__ = ["NodeRegistry", "recovered_allocation"]

_REJECTED = "failure while adding new node, node rejected with error: "
_RECOVERABLE_APP_STATES = (AppState.NEW, AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING,
                           AppState.COMPLETING)


class NodeRegistry:
    """Node commands and the total capacity of one partition (see module doc). ``name`` is the
    partition's short name, ``full_name`` its ``[rmID]name`` (messages)."""

    __slots__ = ("total", "changes", "_closed", "_name", "_full_name", "_nodes", "_root", "_ledger",
                 "_apps", "_outcomes")

    def __init__(self, name: str, full_name: str, nodes: "NodeCollection", root: "Queue",
                 ledger: "Ledger", apps: Mapping[str, "Application"], outcomes: "Outcomes") -> None:
        self.total = ZERO
        self.changes = 0
        self._closed = False
        self._name = name
        self._full_name = full_name
        self._nodes = nodes
        self._root = root
        self._ledger = ledger
        self._apps = apps
        self._outcomes = outcomes

    def close(self) -> None:
        """The partition stops: every node added from now on is rejected."""
        self._closed = True

    def follow_total(self) -> None:
        """Root's max is the total capacity while there are nodes (YuniKorn), else unlimited."""
        self._root.max = self.total if self._nodes.nodes else None

    def _total_changed(self, added: Resource | None = None, removed: Resource | None = None) -> None:
        """Kept incrementally."""
        if added is not None:
            self.total = self.total.add(added)
        if removed is not None:
            self.total = self.total.sub_eliminate_negative(removed)
        self.follow_total()
        self.changes += 1

    # ---------------------------------------------------------------- CREATE
    def add(self, cmd: AddNode, now: int) -> Node | None:
        """The ``AddNode`` command: the new node, checked with every allocation it already runs
        and added (its allocations are the caller's to book, then ``accepted``); None when it is
        rejected (reported)."""
        rejected = self._outcomes.nodes_rejected
        nid = cmd.node_id
        if not nid:
            rejected.append(NodeRejected(nid, _REJECTED + "node ID must not be empty"))
            return None
        if self._closed:
            rejected.append(NodeRejected(nid, _REJECTED + f"partition {self._full_name} is stopped cannot add a new node {nid}"))
            return None
        if nid in self._nodes.nodes:
            rejected.append(NodeRejected(nid, _REJECTED + f"failed to add node {nid} to partition {self._full_name}, error: partition {self._full_name} has an existing node {nid}, node name must be unique"))
            return None
        err = _negative(nid, cmd.capacity, cmd.occupied) or self._check_recovered(cmd)
        if err:
            rejected.append(NodeRejected(nid, _REJECTED + err))
            return None
        node = Node(node_id=nid, attributes=dict(cmd.attributes), capacity=cmd.capacity,
                    occupied=cmd.occupied, ready=parse_ready(cmd.attributes), schedulable=cmd.schedulable)
        self._unreadable(node, node.apply_attributes(), now)
        self._nodes.add(node)
        self._total_changed(added=node.capacity)
        return node

    def accepted(self, node: Node, now: int) -> None:
        """Report a node ``add`` took, once its existing allocations are booked."""
        self._outcomes.nodes_accepted.append(NodeAccepted(node.node_id))
        self._outcomes.event(EventType.NODE, node.node_id, "NodeAdded",
                             f"node {node.node_id} added to partition {self._name}", now)

    def _check_recovered(self, cmd: AddNode) -> str:
        """Validate every existing allocation before touching anything (all or nothing)."""
        seen: set[str] = set()
        for ra in cmd.existing:
            err = self.recovery_error(ra, cmd.node_id, seen)
            if err:
                return err
            seen.add(ra.uuid)
        return ""

    def recovery_error(self, ra: RecoveredAlloc, node_id: str, seen: set[str]) -> str:
        """Why ``ra`` cannot be booked on node ``node_id`` ("" when it can); ``seen``: the
        UUIDs of the same report checked before it."""
        if not ra.uuid:
            return f"failing to restore allocation {ra.key} for application {ra.app_id}: missing uuid"
        if ra.uuid in self._ledger.allocations or ra.uuid in seen:
            return f"failing to restore allocation {ra.key} for application {ra.app_id}: duplicate uuid {ra.uuid}"
        if ra.node_id and ra.node_id != node_id:
            return f"failed to find node {ra.node_id}"
        if not ra.app_id:
            return f"failed to find application {ra.app_id}"
        app = self._apps.get(ra.app_id)
        if app is not None and app.state not in _RECOVERABLE_APP_STATES:
            return f"cannot allocate resource from application {ra.app_id}: application is {app.state.value}"
        if ra.resource.has_negative() or ra.resource.is_zero():
            return f"cannot allocate resource from application {ra.app_id}: invalid resource {ra.resource}"
        return ""

    # ---------------------------------------------------------------- UPDATE, drain, undrain
    def _node_or_event(self, node_id: str, action: str, now: int) -> Node | None:
        node = self._nodes.get(node_id)
        if node is None:
            self._outcomes.event(EventType.NODE, node_id, "NodeNotFound",
                                 f"{action} failed: node {node_id} does not exist in partition {self._name}", now)
        return node

    def update(self, cmd: UpdateNode, now: int) -> None:
        """The ``UpdateNode`` command: attributes, capacity, occupied (unknown node: an event)."""
        node = self._node_or_event(cmd.node_id, "UPDATE", now)
        if node is None:
            return
        err = _negative(cmd.node_id, cmd.capacity, cmd.occupied)
        if err:
            self._outcomes.event(EventType.NODE, cmd.node_id, "InvalidNodeUpdate", f"UPDATE ignored: {err}", now)
            return
        if cmd.attributes:  # readiness, labels, taints (Node.apply_attributes)
            node.attributes.update(cmd.attributes)
            self._unreadable(node, node.apply_attributes(cmd.attributes), now)
            if NODE_LABELS in cmd.attributes:  # its topology domains may differ
                self._nodes.pods.topology_changed()
            elif NODE_TAINTS in cmd.attributes:  # which spread domains are eligible may differ
                self._nodes.pods.nodes_changed()
        old_capacity = node.capacity
        if cmd.capacity is not None:
            node.capacity = cmd.capacity
        if cmd.occupied is not None:  # the RM's figure, plus the foreign allocations we know
            node.occupied = cmd.occupied.add(foreign_total(node)) if node.foreign else cmd.occupied
        self._nodes.update(node)
        if cmd.capacity is not None:
            self._total_changed(added=node.capacity, removed=old_capacity)
        res = node.reservation
        if res is not None:  # a shrunk or relabelled node may never take its reserved ask now
            app = self._apps.get(res.app_id)
            ask = app.asks.get(res.ask_key) if app is not None else None
            if ask is None or _never_takes(node, ask, self._apps, self._nodes):
                self._ledger.unreserve(res)
        self.changes += 1

    def _unreadable(self, node: Node, errors: list[str], now: int) -> None:
        """A NODE event for each attribute the node checks could not read."""
        for err in errors:
            self._outcomes.event(EventType.NODE, node.node_id, "InvalidNodeAttribute",
                                 f"node {node.node_id}: {err}", now)

    def drain(self, cmd: DrainNode, now: int) -> None:
        """The ``DrainNode`` command: no new allocations there; its reservation is dropped."""
        node = self._node_or_event(cmd.node_id, "DRAIN_NODE", now)
        if node is not None:
            node.schedulable = False
            if node.reservation is not None:
                self._ledger.unreserve(node.reservation)
            self._nodes.refresh(node)
            self._outcomes.event(EventType.NODE, node.node_id, "NodeDraining", f"node {node.node_id} draining", now)

    def undrain(self, cmd: UndrainNode, now: int) -> None:
        """The ``UndrainNode`` command (DRAIN_TO_SCHEDULABLE): schedulable again."""
        node = self._node_or_event(cmd.node_id, "DRAIN_TO_SCHEDULABLE", now)
        if node is None:
            return
        if node.schedulable:
            self._outcomes.event(EventType.NODE, node.node_id, "NodeNotDraining",
                                 f"DRAIN_TO_SCHEDULABLE failed: node {node.node_id} is not draining", now)
            return
        node.schedulable = True
        self._nodes.refresh(node)
        self.changes += 1
        self._outcomes.event(EventType.NODE, node.node_id, "NodeSchedulable", f"node {node.node_id} schedulable", now)

    # ---------------------------------------------------------------- decommission
    def remove(self, node: Node, now: int) -> None:
        """The last step of ``RemoveNode`` (DECOMISSION), once the caller released the node's
        allocations and reservation: the node and its capacity leave the partition."""
        self._nodes.remove(node.node_id)
        self._total_changed(removed=node.capacity)
        self._outcomes.event(EventType.NODE, node.node_id, "NodeRemoved",
                             f"node {node.node_id} removed from partition {self._name}", now)


def recovered_allocation(ra: RecoveredAlloc, app: "Application", node: Node, now: int) -> Allocation:
    """The allocation ``ra`` the RM reports as running on ``node``, booked for ``app``. Its
    creation time is the tag ``creationTime`` (unix seconds) when it parses, else now."""
    created_ns = now
    ct = ra.tags.get(CREATION_TIME)
    if ct:
        try:
            created_ns = int(ct) * 1_000_000_000
        except ValueError:
            pass
    return Allocation(uuid=ra.uuid, key=ra.key, app_id=app.app_id, node_id=node.node_id,
                      resource=ra.resource, priority=ra.priority, create_time_ns=created_ns,
                      queue_path=app.queue.path, tags=dict(ra.tags), task_group=ra.task_group,
                      placeholder=ra.placeholder, recovered=True, originator=ra.originator,
                      allow_preempt_self=ra.allow_preempt_self, allow_preemption=allows_preemption(ra.tags))


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
