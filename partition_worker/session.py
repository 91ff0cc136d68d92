"""The worker's side of one partition: what rmproxy sends -> core commands; core outcomes -> what
goes back to rmproxy.

This is the only object the worker process loop talks to. It is pure like the
core (``now_ns`` passed in, no I/O). Contract:

- ``apply_allocation_rows(body, now_ns)``, ``apply_application_request(req, now_ns)``,
  ``apply_node_request(req, now_ns)``: translate and apply every item that belongs to this
  partition (rmproxy already normalised and split them), in YuniKorn's order (the asks and
  allocations of a request before its releases, new apps before removals). Asks come only as
  rows (``common.si_rows.RequestRows``: rmproxy reads them from either SI revision), the rest of
  the allocation stream, the applications and the nodes as the SI protobuf they came in.
- ``step(now_ns) -> Outbox``: fire due timers, run a scheduling cycle if anything changed
  (or the idle interval passed), and return + clear everything that accumulated since the
  previous ``step`` (also what the ``apply_*`` calls produced, e.g. rejections). New
  allocations leave only as rows (``Outbox.new_allocations``: rmproxy writes their SI).
- ``next_wakeup_ns()``: the earliest time ``step`` has work (None = only on input).
- ``snapshot()``: a JSON-able dict of queues/apps/nodes/allocations (YuniKorn DAO names).
- ``update_config(config, now_ns, extra_config)``: raises ``ConfigError``; the old config then
  stays.
- ``follow_rm(extra_config, build_info)``: the RM's registration chooses the compatibility
  switch (``common.compat.choose``), with the SI revision once rmproxy tells it; raises
  ``ConfigError`` naming the RM for an unknown ``korral.compatibility``.

Outgoing ``partitionName`` fields carry the short partition name. What differs per SI
revision (releases, v1.8 allocations that are not asks, the response besides new
allocations) is ``partition_worker.revision``'s; the RM's revision comes from rmproxy
(``set_revision``).
"""

from __future__ import annotations

import itertools
import logging
import uuid as _uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from common import si_internal_pb2 as si, si_pb2
from common.compat import CompatChoice, choose
from common.config.errors import ConfigError
from common.constants import TAG_FOREIGN
from common.config.model import PartitionConfig
from common.resources import Resource
from common.si_resource import resource_from_si as _res
from common.si_rows import NewAllocations, RequestRows, sizes_from_rows
from common.si_revision import Revision
from partition_worker import revision as si_revision
from partition_worker.core import commands as C
from partition_worker.core.app_usage import summary_line
from partition_worker.core.dao import partition_snapshot
from partition_worker.core.outcomes import AppRejected, AskRejected, EventType, NodeRejected, Outcomes
from partition_worker.core.partition import Partition
from partition_worker.core.settings import CoreSettings

__all__ = ["PartitionSession", "Outbox", "CoreSettings", "EVENT_RING_SIZE", "uuid_source"]

EVENT_RING_SIZE = 10_000  # events kept per partition for REST (batch, stream, dump)
log = logging.getLogger(__name__)
_NodeInfo = si.NodeInfo
_CREATE = (_NodeInfo.CREATE, _NodeInfo.CREATE_DRAIN)
_EVENT_TYPE = {
    EventType.REQUEST: si_pb2.EventRecord.REQUEST,
    EventType.APP: si_pb2.EventRecord.APP,
    EventType.NODE: si_pb2.EventRecord.NODE,
    EventType.QUEUE: si_pb2.EventRecord.QUEUE,
}
_SCHED_STATE = si_pb2.UpdateContainerSchedulingStateRequest.SchedulingState


@dataclass(slots=True)
class Outbox:
    new_allocations: NewAllocations | None  # the step's new allocations as rows; None when none
    # the rest of the step's AllocationResponse (releases, released asks, rejections), in the
    # RM's revision; None when empty
    allocation_rest: si.AllocationResponse | None
    application: si.ApplicationResponse | None
    node: si.NodeResponse | None
    events: list[si_pb2.EventRecord] = field(default_factory=list)
    scheduling_states: list[si_pb2.UpdateContainerSchedulingStateRequest] = field(default_factory=list)
    app_summaries: list[str] = field(default_factory=list)  # YK_APP_SUMMARY lines, for the log

    def allocation_outcomes(self) -> NewAllocations | None:
        """Everything of the allocation stream as one body for rmproxy: the new allocations'
        rows and the rest serialized beside them (None when the step had neither)."""
        rest = self.allocation_rest
        if rest is None:
            return self.new_allocations
        new = self.new_allocations or NewAllocations([], [], [])
        return NewAllocations(new.sizes, new.new, new.size_of, rest.SerializeToString())

    def is_empty(self) -> bool:
        return (self.new_allocations is None and self.allocation_rest is None and self.application is None
                and self.node is None and not self.events and not self.scheduling_states
                and not self.app_summaries)


class PartitionSession:
    """One partition of one RM, as the worker process sees it (see module doc)."""

    def __init__(self, rm_id: str, partition: str, config: PartitionConfig,
                 settings: CoreSettings | None = None, *, created_ns: int = 0,
                 new_uuid: Callable[[], str] | None = None) -> None:
        """``created_ns``: when the partition was created (the worker passes its clock);
        ``new_uuid``: allocation UUIDs (default: ``uuid_source()``)."""
        self.rm_id = rm_id
        self.partition_name = partition
        self.core = Partition(partition, config, settings, rm_id=rm_id,
                              new_uuid=new_uuid or uuid_source(), created_ns=created_ns)
        if self.core.placement.error:  # YuniKorn logs it and runs without placement rules
            log.warning("partition %s: placement rules rejected, placing apps by their queue name: %s",
                        partition, self.core.placement.error)
        self.event_ring: deque[si_pb2.EventRecord] = deque(maxlen=EVENT_RING_SIZE)
        self.last_respond_seconds = 0.0  # building the last step's SI responses (with a stage timer)
        # events ever put in the ring: the ring holds ids events_total - len(ring) .. events_total - 1
        self.events_total = 0
        self.created_ns = created_ns
        self.revision: Revision | None = None  # the RM's SI revision, None until rmproxy decides it
        # what chooses the compatibility switch (follow_rm): the registration's extraConfig and
        # buildInfo; None: the settings' switch stays (a session built without an RM: tests, benches)
        self._registration: tuple[Mapping[str, str], Mapping[str, str]] | None = None
        self.compatibility: CompatChoice | None = None  # the switch in effect, and where it came from
        self._foreign_confirmed: list[si.Allocation] = []  # to confirm in the next step's response

    def follow_rm(self, extra_config: Mapping[str, str] | None, build_info: Mapping[str, str] | None) -> None:
        """Choose the compatibility switch from the RM's registration (and its SI revision, once
        told); ``ConfigError`` naming the RM when its ``korral.compatibility`` is unknown."""
        self._follow(dict(extra_config or {}), dict(build_info or {}))

    def _follow(self, extra_config: Mapping[str, str], build_info: Mapping[str, str]) -> None:
        try:
            choice = choose(extra_config, build_info, self.revision)
        except ValueError as exc:
            raise ConfigError([f"RM {self.rm_id}: {exc}"]) from None
        self._registration = (extra_config, build_info)
        if choice != self.compatibility:
            log.info("partition [%s]%s: compatibility %s", self.rm_id, self.partition_name, choice.describe())
            self.compatibility = choice
            if choice.compat != self.core.settings.compat:
                self.core.set_compat(choice.compat)

    def set_revision(self, revision: Revision) -> None:
        """The RM speaks ``revision`` (rmproxy tells it before any request that depends on it).
        A v1.8 RM names an allocation by its allocationKey: the core then uses the key as UUID."""
        if self.revision is revision:
            return
        if self.revision is not None or self.core.allocations:
            log.error("partition %s: the RM's SI revision cannot change from %s to %s within an epoch; "
                      "kept %s", self.partition_name, self.revision, revision, self.revision)
            return
        self.revision = revision
        self.core.key_is_uuid = revision is Revision.V18
        if self._registration is not None:  # the revision may choose the switch (common.compat)
            self._follow(*self._registration)

    # ------------------------------------------------------------------ input
    def apply_allocation_rows(self, body: RequestRows, now_ns: int) -> None:
        """One part of an RM's ``AllocationRequest`` (``common.si_rows.RequestRows``), in its
        order: the asks, each v1.8 allocation that is not an ask at its place among them, then
        the releases."""
        sizes = sizes_from_rows(body.sizes)
        asks, rest = body.asks, body.rest
        applied = 0  # asks applied so far
        if rest is not None:
            at = body.rest_at
            for i, a in enumerate(rest.allocations):
                before = min(max(at[i] if i < len(at) else len(asks), applied), len(asks))
                if before > applied:
                    self._apply_asks(asks[applied:before], sizes, body.v18, now_ns)
                    applied = before
                for cmd, key in si_revision.allocation_commands(self.core, (a,), now_ns):
                    if type(cmd) is si.NodeRequest:  # a foreign allocation, in the seed's form
                        self.apply_node_request(cmd, now_ns)
                        self._confirm_foreign(cmd.nodes[0].existingAllocations[0])
                    else:
                        self._guard(cmd, EventType.REQUEST, key, now_ns)
        if applied < len(asks):
            self._apply_asks(asks[applied:] if applied else asks, sizes, body.v18, now_ns)
        if rest is not None and rest.HasField("releases"):
            for cmd, object_id in si_revision.release_commands(rest.releases, self.revision):
                self._guard(cmd, EventType.REQUEST, object_id, now_ns)

    def _confirm_foreign(self, a: si.Allocation) -> None:
        """A v1.8 foreign allocation added to a node that is not schedulable (registered drained,
        or drained) is confirmed in ``AllocationResponse.new``: the RM opens a new node once every
        pod already on it is counted, and the allocation and the opening travel on different
        streams. (YuniKorn confirms nothing: its shim is in-process, so its order holds; its shim
        ignores a confirmation of a key it has no task for.)"""
        fa = self.core.foreign.by_key.get(a.allocationKey)
        node = self.core.nodes.get(fa.node_id) if fa is not None else None
        if node is not None and not node.schedulable:
            self._foreign_confirmed.append(a)

    def _apply_asks(self, rows: Sequence, sizes: list[Resource | ValueError], v18: bool, now_ns: int) -> None:
        """Ask rows (``common.si_rows.AskRow``), in order, each as the SI ask it was read from: an
        ask of an invalid size is rejected naming it, a v1.8 RM's asks are checked as its
        allocations are (``revision.admitted``); a malformed row (a bug of the sender) is logged
        and skipped."""
        core = self.core
        rejected = core.outcomes.rejected_asks
        add_ask, guard, request = C.AddAsk, self._guard, EventType.REQUEST
        for row in rows:
            try:  # an AskRow, unpacked in its order: building the NamedTuple per row costs several times more
                (key, app_id, size, max_allocations, priority, timeout_ms, tags, task_group, placeholder,
                 originator, allow_self, allow_other) = row
                resource = sizes[size]
            except (ValueError, TypeError, IndexError) as exc:
                log.warning("partition %s: skipped a malformed ask row %.200r: %s", self.partition_name, row, exc)
                continue
            if v18:
                verdict = si_revision.admitted(core, key, app_id, "", resource, now_ns)
                if verdict is not True:
                    if verdict:  # the key of a placed allocation with another size: a resize
                        guard(verdict, request, key, now_ns)
                    continue
            elif type(resource) is ValueError:  # e.g. an empty resource name
                rejected.append(AskRejected(app_id, key, f"invalid ask added to app {app_id}: ask {key}: {resource}"))
                continue
            # positional: keywords cost a fifth of the build (tests/core/test_objects.py pins the order)
            guard(add_ask(key, app_id, resource, max_allocations, priority, timeout_ms, tags or {}, task_group,
                          placeholder, originator, allow_self, allow_other), request, key, now_ns)

    def apply_application_request(self, req: si.ApplicationRequest, now_ns: int) -> None:
        core = self.core
        for a in req.new:
            try:
                placeholder_ask = _res(a.placeholderAsk)
            except ValueError as exc:
                core.outcomes.apps_rejected.append(AppRejected(
                    a.applicationID, f"application {a.applicationID}: invalid placeholderAsk: {exc}"))
                continue
            self._guard(C.AddApp(
                app_id=a.applicationID, queue=a.queueName, user=a.ugi.user,
                groups=tuple(a.ugi.groups), tags=dict(a.tags),
                execution_timeout_ms=a.executionTimeoutMilliSeconds,
                placeholder_ask=placeholder_ask, gang_style=a.gangSchedulingStyle),
                EventType.APP, a.applicationID, now_ns)
        for r in req.remove:
            self._guard(C.RemoveApp(r.applicationID), EventType.APP, r.applicationID, now_ns)

    def apply_node_request(self, req: si.NodeRequest, now_ns: int) -> None:
        core = self.core
        for n in req.nodes:
            handler = _NODE_ACTIONS.get(n.action)
            if handler is None:
                core.event(EventType.NODE, n.nodeID, "UnknownNodeAction",
                           f"node {n.nodeID}: unknown action {n.action}, ignored", now_ns)
                continue
            try:
                cmd = handler(n)
            except ValueError as exc:  # e.g. an empty resource name
                if n.action in _CREATE:
                    core.outcomes.nodes_rejected.append(NodeRejected(
                        n.nodeID, f"failure while adding new node, node rejected with error: node {n.nodeID}: {exc}"))
                else:
                    core.event(EventType.NODE, n.nodeID, "InvalidNodeUpdate", f"node {n.nodeID}: {exc}", now_ns)
                continue
            self._guard(cmd, EventType.NODE, n.nodeID, now_ns)
            if n.action in (*_CREATE, _NodeInfo.UPDATE):
                for a in n.existingAllocations:  # pods of other schedulers on the node (core.foreign)
                    if TAG_FOREIGN in a.allocationTags:
                        self._foreign(a, n.nodeID, now_ns)
                    elif n.action == _NodeInfo.UPDATE:
                        self._not_resized(a, n.nodeID, now_ns)

    def _not_resized(self, a: si.Allocation, node_id: str, now_ns: int) -> None:
        """A seed RM's node UPDATE re-reporting one of its placed allocations: the seed's SI has
        no in-place resize (existingAllocations count on CREATE only), so nothing changes; a
        NODE event says so when the size differs, instead of leaving the RM's books to drift."""
        placed = self.core.allocations.get(a.UUID or a.allocationKey)
        try:
            size = _res(a.resourcePerAlloc)
        except ValueError:
            size = None
        if placed is not None and size is not None and size != placed.resource:
            self.core.event(EventType.NODE, node_id, "AllocationResizeUnsupported", (
                f"node {node_id}: UPDATE reports allocation {placed.key} of application {placed.app_id} "
                f"as {size}, placed as {placed.resource}: the seed's SI has no in-place resize (SI v1.8 "
                "has), nothing changed"), now_ns)

    def _foreign(self, a: si.Allocation, node_id: str, now_ns: int) -> None:
        try:
            res = _res(a.resourcePerAlloc)
        except ValueError as exc:
            self.core.outcomes.rejected_asks.append(AskRejected(
                "", a.allocationKey, f"foreign allocation {a.allocationKey}: {exc}"))
            return
        self._guard(C.AddForeign(a.allocationKey or a.UUID, a.nodeID or node_id, res, dict(a.allocationTags),
                                 a.priority), EventType.NODE, node_id, now_ns)

    def _guard(self, cmd: object, etype: EventType, object_id: str, now_ns: int) -> None:
        """Apply one command; an internal error is logged and reported as an event naming the
        object, so one bad item cannot take the worker down with the rest of the request."""
        try:
            self.core.handle(cmd, now_ns)
        except Exception as exc:  # noqa: BLE001 - a bug in the core must not kill the loop
            log.exception("partition %s: %s for %s failed", self.partition_name,
                          type(cmd).__name__, object_id)
            self.core.event(etype, object_id, "InternalError",
                            f"{type(cmd).__name__} for {object_id} failed: {exc}", now_ns)

    def update_config(self, config: PartitionConfig, now_ns: int,
                      extra_config: Mapping[str, str] | None = None) -> None:
        """Apply a new config for this partition, and the RM's new ``extra_config`` (None:
        unchanged), which may change the compatibility switch; raises ConfigError and keeps the
        old ones."""
        if config.name != self.partition_name:
            raise ConfigError([f"config for partition {config.name} given to partition {self.partition_name}"])
        try:
            choice = None
            if extra_config is not None and self._registration is not None:
                choice = choose(extra_config, self._registration[1], self.revision)
        except ValueError as exc:
            raise ConfigError([f"RM {self.rm_id}: {exc}"]) from None
        try:
            self.core.update_config(config, now_ns, choice.compat if choice is not None else None)
        except ConfigError as exc:  # the core does not log; the worker's log says why
            log.warning("partition %s: new config rejected, the old one stays active: %s",
                        self.partition_name, exc)
            raise
        if choice is not None:
            self._follow(dict(extra_config or {}), self._registration[1])  # type: ignore[index]

    def stop(self, now_ns: int, message: str = "PartitionRemoved") -> None:
        """The partition was removed from the config: fail every app (``message`` is YuniKorn's
        ``PartitionRemoved``), release their allocations, remove every node. The next ``step``
        returns what the RM must be told; afterwards new apps and nodes are rejected."""
        self.core.stop(now_ns, message)

    # ------------------------------------------------------------------ output
    def step(self, now_ns: int) -> Outbox:
        self.core.step(now_ns)
        timer = self.core.settings.stage_timer
        if timer is None:
            return self._outbox(self.core.outcomes.drain())
        started = timer()  # the responses' share of the step, for the worker's wire metrics
        out = self._outbox(self.core.outcomes.drain())
        self.last_respond_seconds = timer() - started
        return out

    def next_wakeup_ns(self) -> int | None:
        return self.core.next_wakeup_ns()

    def _outbox(self, o: Outcomes) -> Outbox:
        new = NewAllocations.of(a.alloc for a in o.allocations) if o.allocations else None
        confirmed, self._foreign_confirmed = self._foreign_confirmed, []
        alloc_rest = si_revision.allocation_rest(o, self.partition_name, self.revision, confirmed)
        app_resp = None
        if o.apps_accepted or o.apps_rejected or o.app_states:
            app_resp = si.ApplicationResponse()
            for a in o.apps_rejected:
                app_resp.rejected.add(applicationID=a.app_id, reason=a.reason)
            for a in o.apps_accepted:
                app_resp.accepted.add(applicationID=a.app_id)
                # Korral addition: where placement put the app (the SI's AcceptedApplication has no
                # field for it); the k8s shim ignores updates in states it does not act on
                app_resp.updated.add(applicationID=a.app_id, state=a.state, stateTransitionTimestamp=a.timestamp_ns,
                                     message=f"placed in queue {a.queue}")
            for a in o.app_states:
                app_resp.updated.add(applicationID=a.app_id, state=a.state,
                                     stateTransitionTimestamp=a.timestamp_ns, message=a.message)
        node_resp = None
        if o.nodes_accepted or o.nodes_rejected:
            node_resp = si.NodeResponse()
            for n in o.nodes_rejected:
                node_resp.rejected.add(nodeID=n.node_id, reason=n.reason)
            for n in o.nodes_accepted:
                node_resp.accepted.add(nodeID=n.node_id)
        events = []
        for e in o.events:
            rec = si_pb2.EventRecord(type=_EVENT_TYPE[e.type], objectID=e.object_id,
                                     groupID=e.group_id, reason=e.reason, message=e.message,
                                     timestampNano=e.timestamp_ns)
            events.append(rec)
        self.event_ring.extend(events)
        self.events_total += len(events)
        states = [si_pb2.UpdateContainerSchedulingStateRequest(
            applicartionID=s.app_id, allocationKey=s.allocation_key,
            state=_SCHED_STATE.Value(s.state.value), reason=s.reason) for s in o.sched_states]
        return Outbox(new, alloc_rest, app_resp, node_resp, events, states,
                      [summary_line(x, self.rm_id) for x in o.app_summaries])

    # ------------------------------------------------------------------ state
    def explain(self, app_id: str, allocation_key: str) -> dict:
        """Why an ask waits: its scheduling state and the node pipeline's rejection counts by
        stage. Raises ``LookupError`` naming the app or ask when it does not exist."""
        from partition_worker.core.diagnosis import explain
        app = self.core.apps.get(app_id)
        if app is None:
            raise LookupError(f"application {app_id} not found in partition {self.partition_name}")
        ask = app.asks.get(allocation_key)
        if ask is None:
            raise LookupError(f"allocation ask {allocation_key} not found for application {app_id}")
        return explain(self.core.nodes, self.core.apps, self.core.limits, app, ask)

    def snapshot(self) -> dict:
        """Plain JSON-able state with YuniKorn's REST field names (``core.dao``): ``partition``
        (summary), ``queues`` (tree), ``applications`` (active and finished), ``nodes``,
        ``reservations``, ``usage`` (users/groups), ``events`` (the recent-event ring)."""
        snap = partition_snapshot(self.core, self.partition_name, self.rm_id)
        snap["events"] = [{"type": si_pb2.EventRecord.Type.Name(e.type), "objectID": e.objectID,
                           "groupID": e.groupID, "reason": e.reason, "message": e.message,
                           "timestampNano": e.timestampNano} for e in self.event_ring]
        return snap


def uuid_source() -> Callable[[], str]:
    """Allocation UUIDs: one random UUID4 whose last 48 bits count up from a random start.

    Each is a valid, unique UUID string; uuid4() per allocation (an os.urandom system call and
    a UUID object) cost a fifth of the core's time per allocation. A new source (a restarted
    worker) draws new random bits, so it repeats no UUID an RM still holds."""
    base = _uuid.uuid4()
    prefix = str(base)[:24]
    counter = itertools.count(base.int & 0xFFFF_FFFF_FFFF)
    return lambda: f"{prefix}{next(counter) & 0xFFFF_FFFF_FFFF:012x}"


def _add_node(n: si.NodeInfo, schedulable: bool = True) -> C.AddNode:
    return C.AddNode(n.nodeID, _res(n.schedulableResource), _res(n.occupiedResource), dict(n.attributes),
                     _recovered(n), schedulable)


def _recovered(n: si.NodeInfo) -> tuple[C.RecoveredAlloc, ...]:
    """The node's existing allocations of this scheduler (foreign ones are applied apart)."""
    return tuple(C.RecoveredAlloc(uuid=a.UUID, key=a.allocationKey, app_id=a.applicationID,
                                  resource=_res(a.resourcePerAlloc), node_id=a.nodeID,
                                  tags=dict(a.allocationTags), priority=a.priority,
                                  task_group=a.taskGroupName, placeholder=a.placeholder)
                 for a in n.existingAllocations if TAG_FOREIGN not in a.allocationTags)


_NODE_ACTIONS = {
    _NodeInfo.CREATE: _add_node,
    _NodeInfo.CREATE_DRAIN: lambda n: _add_node(n, schedulable=False),  # SI v1.8: drained until undrained
    _NodeInfo.UPDATE: lambda n: C.UpdateNode(
        n.nodeID, _res(n.schedulableResource) if n.HasField("schedulableResource") else None,
        _res(n.occupiedResource) if n.HasField("occupiedResource") else None, dict(n.attributes)),
    _NodeInfo.DRAIN_NODE: lambda n: C.DrainNode(n.nodeID),
    _NodeInfo.DRAIN_TO_SCHEDULABLE: lambda n: C.UndrainNode(n.nodeID),
    _NodeInfo.DECOMISSION: lambda n: C.RemoveNode(n.nodeID),
}
