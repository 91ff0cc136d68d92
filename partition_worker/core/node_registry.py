"""Node commands of the partition: CREATE (with recovery), UPDATE, drain, undrain, decommission.

A mixin of ``Partition`` (kept apart to keep files small). Reasons are
YuniKorn's (YUNIKORN_BEHAVIOUR.md 1.1 S11-S13). Where YuniKorn silently ignores
a bad UPDATE / DRAIN_TO_SCHEDULABLE, Korral also emits a NODE event saying why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.resources import Resource

from .app_state import AppEvent, AppState
from .application import Application
from .commands import AddNode, DrainNode, RecoveredAlloc, RemoveNode, UndrainNode, UpdateNode
from .node import ATTR_READY, Node, parse_ready
from .objects import TAG_CREATION_TIME, Allocation
from .outcomes import EventType, NodeAccepted, NodeRejected, Termination
from .queue import RECOVERY_QUEUE, ObjectState

if TYPE_CHECKING:  # pragma: no cover
    from .partition import Partition

__all__ = ["NodeOps"]


class NodeOps:
    def _node_total_changed(self: "Partition", added: Resource | None = None,
                            removed: Resource | None = None) -> None:
        """Root max follows the partition's total capacity (YuniKorn); kept incrementally."""
        if added is not None:
            self.total = self.total.add(added)
        if removed is not None:
            self.total = self.total.sub_eliminate_negative(removed)
        self.root.max = self.total if self.nodes.nodes else None
        self.changed = True

    def _add_node(self: "Partition", cmd: AddNode, now: int) -> None:
        out = self.outcomes
        nid = cmd.node_id
        prefix = "failure while adding new node, node rejected with error: "
        if not nid:
            out.nodes_rejected.append(NodeRejected(nid, prefix + "node ID must not be empty"))
            return
        if self.state is not ObjectState.ACTIVE:
            out.nodes_rejected.append(NodeRejected(nid, prefix + f"partition {self.full_name} is stopped cannot add a new node {nid}"))
            return
        if nid in self.nodes.nodes:
            out.nodes_rejected.append(NodeRejected(nid, prefix + f"failed to add node {nid} to partition {self.full_name}, error: partition {self.full_name} has an existing node {nid}, node name must be unique"))
            return
        err = _negative(nid, cmd.capacity, cmd.occupied) or self._check_recovered(cmd)
        if err:
            out.nodes_rejected.append(NodeRejected(nid, prefix + err))
            return
        node = Node(node_id=nid, attributes=dict(cmd.attributes), capacity=cmd.capacity,
                    occupied=cmd.occupied, ready=parse_ready(cmd.attributes))
        self.nodes.add(node)
        self._node_total_changed(added=node.capacity)
        for ra in cmd.existing:
            self._recover(node, ra, now)
        out.nodes_accepted.append(NodeAccepted(nid))
        self.event(EventType.NODE, nid, "NodeAdded", f"node {nid} added to partition {self.name}", now)

    def _check_recovered(self: "Partition", cmd: AddNode) -> str:
        """Validate every existing allocation before touching anything (all or nothing)."""
        seen: set[str] = set()
        for ra in cmd.existing:
            if not ra.uuid:
                return f"failing to restore allocation {ra.key} for application {ra.app_id}: missing uuid"
            if ra.uuid in self.allocations or ra.uuid in seen:
                return f"failing to restore allocation {ra.key} for application {ra.app_id}: duplicate uuid {ra.uuid}"
            seen.add(ra.uuid)
            if ra.node_id and ra.node_id != cmd.node_id:
                return f"failed to find node {ra.node_id}"
            if not ra.app_id:
                return f"failed to find application {ra.app_id}"
            app = self.apps.get(ra.app_id)
            if app is not None and app.state not in (AppState.NEW, AppState.ACCEPTED, AppState.STARTING,
                                                     AppState.RUNNING, AppState.COMPLETING):
                return f"cannot allocate resource from application {ra.app_id}: application is {app.state.value}"
            if ra.resource.has_negative() or ra.resource.is_zero():
                return f"cannot allocate resource from application {ra.app_id}: invalid resource {ra.resource}"
        return ""

    def _recover(self: "Partition", node: Node, ra: RecoveredAlloc, now: int) -> None:
        """Add a recovered allocation to node, app and queues without scheduling and without a
        max check. An app the RM has not added yet is created in ``root.@recovery@`` and moved
        to its placed queue when the RM adds it (Korral's take on YuniKorn >= 1.4 recovery)."""
        app = self.apps.get(ra.app_id)
        if app is None:
            queue, created = self.queues.create_dynamic(RECOVERY_QUEUE, "", (), check_acl=False)
            self._queues_created(created, now)
            app = Application(app_id=ra.app_id, queue=queue, user="", groups=(), tags={},
                              submission_time_ns=now, seq=self.next_seq(), state_time_ns=now,
                              recovered_only=True)
            self.apps[ra.app_id] = app
            queue.apps[ra.app_id] = app
        created_ns = now
        ct = ra.tags.get(TAG_CREATION_TIME)
        if ct:
            try:
                created_ns = int(ct) * 1_000_000_000
            except ValueError:
                pass
        alloc = Allocation(uuid=ra.uuid, key=ra.key, app_id=app.app_id, node_id=node.node_id,
                           resource=ra.resource, priority=ra.priority, create_time_ns=created_ns,
                           queue_path=app.queue.path, tags=dict(ra.tags), task_group=ra.task_group,
                           placeholder=ra.placeholder, recovered=True)
        app.allocations[alloc.uuid] = alloc
        app.add_allocated(ra.resource)
        if ra.placeholder:
            app.add_placeholder(alloc)
            self.start_placeholder_timer(app, now)
        app.queue.add_allocated(ra.resource)
        self.limits.on_alloc(app, ra.resource)
        node.allocations[alloc.uuid] = alloc
        self.nodes.update_allocated(node, ra.resource, 1)
        self.allocations[alloc.uuid] = alloc
        if app.state is AppState.NEW:
            self.app_event(app, AppEvent.RUN, now)
        if not ra.placeholder and app.state in (AppState.ACCEPTED, AppState.STARTING, AppState.COMPLETING):
            self.app_event(app, AppEvent.RUN, now)

    def _node_or_event(self: "Partition", node_id: str, action: str, now: int) -> Node | None:
        node = self.nodes.get(node_id)
        if node is None:
            self.event(EventType.NODE, node_id, "NodeNotFound",
                       f"{action} failed: node {node_id} does not exist in partition {self.name}", now)
        return node

    def _update_node(self: "Partition", cmd: UpdateNode, now: int) -> None:
        node = self._node_or_event(cmd.node_id, "UPDATE", now)
        if node is None:
            return
        err = _negative(cmd.node_id, cmd.capacity, cmd.occupied)
        if err:
            self.event(EventType.NODE, cmd.node_id, "InvalidNodeUpdate", f"UPDATE ignored: {err}", now)
            return
        if cmd.attributes:
            node.attributes.update(cmd.attributes)
            node.labels = None
            if ATTR_READY in cmd.attributes:
                node.ready = parse_ready(node.attributes)
        old_capacity = node.capacity
        if cmd.capacity is not None:
            node.capacity = cmd.capacity
        if cmd.occupied is not None:
            node.occupied = cmd.occupied
        self.nodes.update(node)
        if cmd.capacity is not None:
            self._node_total_changed(added=node.capacity, removed=old_capacity)
        res = node.reservation
        if res is not None:  # a shrunk node may no longer be able to hold its reserved ask
            app = self.apps.get(res.app_id)
            ask = app.asks.get(res.ask_key) if app is not None else None
            if ask is None or not ask.resource.fits_in(node.capacity.sub(node.occupied)):
                self.unreserve(res)
        self.changed = True

    def _drain_node(self: "Partition", cmd: DrainNode, now: int) -> None:
        node = self._node_or_event(cmd.node_id, "DRAIN_NODE", now)
        if node is not None:
            node.schedulable = False
            if node.reservation is not None:
                self.unreserve(node.reservation)
            self.nodes.refresh(node)
            self.event(EventType.NODE, node.node_id, "NodeDraining", f"node {node.node_id} draining", now)

    def _undrain_node(self: "Partition", cmd: UndrainNode, now: int) -> None:
        node = self._node_or_event(cmd.node_id, "DRAIN_TO_SCHEDULABLE", now)
        if node is None:
            return
        if node.schedulable:
            self.event(EventType.NODE, node.node_id, "NodeNotDraining",
                       f"DRAIN_TO_SCHEDULABLE failed: node {node.node_id} is not draining", now)
            return
        node.schedulable = True
        self.nodes.refresh(node)
        self.changed = True
        self.event(EventType.NODE, node.node_id, "NodeSchedulable", f"node {node.node_id} schedulable", now)

    def _remove_node(self: "Partition", cmd: RemoveNode, now: int) -> None:
        node = self.nodes.get(cmd.node_id)
        if node is None:
            return  # unknown node: ignored (YuniKorn)
        if node.reservation is not None:
            self.unreserve(node.reservation)
        msg = f"Node {node.node_id} Removed"
        for alloc in list(node.allocations.values()):
            self._release_alloc(alloc, Termination.STOPPED_BY_RM, msg, now, report=True)
        self.nodes.remove(node.node_id)
        self._node_total_changed(removed=node.capacity)
        self.event(EventType.NODE, node.node_id, "NodeRemoved", f"node {node.node_id} removed from partition {self.name}", now)


def _negative(node_id: str, capacity: Resource | None, occupied: Resource | None) -> str:
    """An error naming the node if a reported resource has a negative quantity, else ""."""
    for what, r in (("schedulable", capacity), ("occupied", occupied)):
        if r is not None and r.has_negative():
            return f"node {node_id}: {what} resource {r} has a negative quantity"
    return ""
