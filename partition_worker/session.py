"""The SI adapter of one partition: SI protobuf in -> core commands; core outcomes -> SI protobuf.

This is the only object the worker process loop talks to. It is pure like the
core (``now_ns`` passed in, no I/O). Contract:

- ``apply_*_request(req, now_ns)``: translate and apply every item of the request that
  belongs to this partition (rmproxy already normalised and split them), in YuniKorn's
  order (asks before releases, new apps before removals).
- ``step(now_ns) -> Outbox``: fire due timers, run a scheduling cycle if anything changed
  (or the idle interval passed), and return + clear everything that accumulated since the
  previous ``step`` (also what the ``apply_*`` calls produced, e.g. rejections).
- ``next_wakeup_ns()``: the earliest time ``step`` has work (None = only on input).
- ``snapshot()``: a JSON-able dict of queues/apps/nodes/allocations (YuniKorn DAO names).
- ``update_config(config, now_ns)``: raises ``ConfigError``; the old config then stays.

Outgoing ``partitionName`` fields carry the short partition name.

Both SI revisions (docs/si-revisions.md): requests are the internal model (``si_internal_pb2``,
the union of the two, as the worker reads them; in-process callers such as ``korral bench
core`` may pass the seed's ``si_pb2`` messages), every field read by its own meaning (seed asks,
v1.8 allocations through ``si_v18``); only a release without UUID depends on the RM's revision
(``set_revision``, from rmproxy): all of the app for a seed RM, one allocation by key otherwise.
Responses are written in the RM's revision; while it is undecided, rejections go in both
revisions' fields and allocations carry their UUID (a v1.8 RM ignores it).
"""

from __future__ import annotations

import itertools
import logging
import uuid as _uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from common import si_internal_pb2 as si, si_pb2
from common.compat import Compat
from common.config.errors import ConfigError
from common.constants import TAG_FOREIGN
from common.config.model import PartitionConfig
from common.si_resource import resource_from_si as _res
from common.si_rows import (SizeTable, allocation_ask_rows, ask_rows, fill_allocations, is_plain_ask,
                            sizes_from_rows)
from common.si_revision import Revision
from partition_worker import si_v18
from partition_worker.core import commands as C
from partition_worker.core.app_usage import summary_line
from partition_worker.core.dao import partition_snapshot
from partition_worker.core.outcomes import (AppRejected, AskRejected, EventType, NodeRejected,
                                            Outcomes, Termination)
from partition_worker.core.partition import Partition
from partition_worker.core.settings import CoreSettings

__all__ = ["PartitionSession", "Outbox", "CoreSettings", "EVENT_RING_SIZE", "uuid_source"]

EVENT_RING_SIZE = 10_000  # events kept per partition for REST (batch, stream, dump)
log = logging.getLogger(__name__)
_NodeInfo = si.NodeInfo
_CREATE = (_NodeInfo.CREATE, _NodeInfo.CREATE_DRAIN)
_TERM_TO_CORE = {
    si.STOPPED_BY_RM: Termination.STOPPED_BY_RM,
    si.TIMEOUT: Termination.TIMEOUT,
    si.PREEMPTED_BY_SCHEDULER: Termination.PREEMPTED_BY_SCHEDULER,
    si.PLACEHOLDER_REPLACED: Termination.PLACEHOLDER_REPLACED,
    si.UNKNOWN_TERMINATION_TYPE: Termination.STOPPED_BY_RM,  # the shim's default
}
_TERM_TO_SI = {
    Termination.STOPPED_BY_RM: si.STOPPED_BY_RM,
    Termination.TIMEOUT: si.TIMEOUT,
    Termination.PREEMPTED_BY_SCHEDULER: si.PREEMPTED_BY_SCHEDULER,
    Termination.PLACEHOLDER_REPLACED: si.PLACEHOLDER_REPLACED,
    Termination.UNKNOWN: si.UNKNOWN_TERMINATION_TYPE,
}
_EVENT_TYPE = {
    EventType.REQUEST: si_pb2.EventRecord.REQUEST,
    EventType.APP: si_pb2.EventRecord.APP,
    EventType.NODE: si_pb2.EventRecord.NODE,
    EventType.QUEUE: si_pb2.EventRecord.QUEUE,
}
_SCHED_STATE = si_pb2.UpdateContainerSchedulingStateRequest.SchedulingState


@dataclass(slots=True)
class Outbox:
    allocation: si.AllocationResponse | None  # None when empty
    application: si.ApplicationResponse | None
    node: si.NodeResponse | None
    events: list[si_pb2.EventRecord] = field(default_factory=list)
    scheduling_states: list[si_pb2.UpdateContainerSchedulingStateRequest] = field(default_factory=list)
    app_summaries: list[str] = field(default_factory=list)  # YK_APP_SUMMARY lines, for the log
    # new allocations as rows (``common.si_rows``) when the session reports them apart (``rows_out``:
    # the worker, whose rmproxy writes them in SI) and the step had no other allocation outcome;
    # else they are in ``allocation``
    allocations_new: dict | None = None

    def is_empty(self) -> bool:
        return (self.allocation is None and self.application is None and self.node is None
                and self.allocations_new is None and not self.events and not self.scheduling_states
                and not self.app_summaries)


class PartitionSession:
    """One partition of one RM, as the worker process sees it (see module doc)."""

    def __init__(self, rm_id: str, partition: str, config: PartitionConfig,
                 settings: CoreSettings | None = None, *, created_ns: int = 0,
                 new_uuid: Callable[[], str] | None = None, rows_out: bool = False) -> None:
        """``created_ns``: when the partition was created (the worker passes its clock);
        ``new_uuid``: allocation UUIDs (default: ``uuid_source()``); ``rows_out``: report new
        allocations as rows in ``Outbox.allocations_new`` when a step made nothing else (the
        worker: rmproxy writes the SI)."""
        self.rm_id = rm_id
        self.partition_name = partition
        self.core = Partition(partition, config, settings, rm_id=rm_id,
                              new_uuid=new_uuid or uuid_source(), created_ns=created_ns)
        if self.core.placement.error:  # YuniKorn logs it and runs without placement rules
            log.warning("partition %s: placement rules rejected, placing apps by their queue name: %s",
                        partition, self.core.placement.error)
        self.event_ring: deque[si_pb2.EventRecord] = deque(maxlen=EVENT_RING_SIZE)
        self.last_respond_seconds = 0.0  # building the last step's SI responses (with a stage timer)
        self.rows_out = rows_out
        # events ever put in the ring: the ring holds ids events_total - len(ring) .. events_total - 1
        self.events_total = 0
        self.created_ns = created_ns
        self.revision: Revision | None = None  # the RM's SI revision, None until rmproxy decides it
        self._foreign_confirmed: list[si.Allocation] = []  # to confirm in the next step's response

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

    # ------------------------------------------------------------------ input
    def apply_allocation_request(self, req: si.AllocationRequest, now_ns: int) -> None:
        core = self.core
        allocations = getattr(req, "allocations", None)  # None: a seed si_pb2 message (in-process callers)
        if allocations and all(map(is_plain_ask, allocations)):  # asks only: as rmproxy sends them
            self.apply_ask_rows(allocation_ask_rows(allocations), now_ns)
        elif allocations:
            for cmd, key in si_v18.commands(core, allocations, now_ns):
                if type(cmd) is si.NodeRequest:  # a foreign allocation, in the seed's form
                    self.apply_node_request(cmd, now_ns)
                    self._confirm_foreign(cmd.nodes[0].existingAllocations[0])
                else:
                    self._guard(cmd, EventType.REQUEST, key, now_ns)
        if req.asks:  # read into rows, as rmproxy sends a worker asks (``common.si_rows``)
            self.apply_ask_rows(ask_rows(req.asks), now_ns)
        if req.HasField("releases"):
            rel = req.releases
            for r in rel.allocationAsksToRelease:
                self._guard(C.ReleaseAsk(r.applicationID, r.allocationKey,
                                         _TERM_TO_CORE.get(r.terminationType, Termination.STOPPED_BY_RM),
                                         r.message), EventType.REQUEST, r.allocationKey, now_ns)
            by_key = self.revision is not Revision.SEED  # a release without UUID (see module doc)
            for r in rel.allocationsToRelease:
                if not r.applicationID and (r.allocationKey or r.UUID):  # a foreign allocation's end
                    self._guard(C.ReleaseForeign(r.allocationKey or r.UUID), EventType.REQUEST,
                                r.allocationKey or r.UUID, now_ns)
                    continue
                term = _TERM_TO_CORE.get(r.terminationType, Termination.STOPPED_BY_RM)
                if by_key and not r.UUID:  # v1.8: the allocation and the ask of that key (all: no key)
                    self._guard(C.ReleaseAsk(r.applicationID, r.allocationKey, term, r.message),
                                EventType.REQUEST, r.allocationKey or r.applicationID, now_ns)
                    uuid = r.allocationKey
                else:
                    uuid = r.UUID
                self._guard(C.ReleaseAlloc(r.applicationID, uuid, term, r.message, r.allocationKey),
                            EventType.REQUEST, uuid or r.applicationID, now_ns)

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

    def apply_ask_rows(self, body: dict, now_ns: int) -> None:
        """The asks of an ``SI_ASKS`` body (``common.si_rows``), in order, each as the SI ask it
        was read from: an ask of an invalid size is rejected naming it, a v1.8 RM's asks are
        checked as its allocations are (``si_v18.admitted``); a malformed row (a bug of the
        sender) is logged and skipped."""
        core = self.core
        rejected = core.outcomes.rejected_asks
        sizes = sizes_from_rows(body["sizes"])
        v18 = body.get("v18", False)  # a v1.8 RM's allocations without node
        add_ask, guard, request = C.AddAsk, self._guard, EventType.REQUEST
        for row in body["asks"]:
            try:
                (key, app_id, size, max_allocations, priority, timeout_ms, tags, task_group, placeholder,
                 originator, allow_self, allow_other) = row
                resource = sizes[size]
            except (ValueError, TypeError, IndexError) as exc:
                log.warning("partition %s: skipped a malformed ask row %.200r: %s", self.partition_name, row, exc)
                continue
            if v18:
                if not si_v18.admitted(core, key, app_id, "", resource, now_ns):
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

    def update_config(self, config: PartitionConfig, now_ns: int, compat: Compat | None = None) -> None:
        """Apply a new config for this partition (and compatibility switch, ``None``: unchanged);
        raises ConfigError and keeps the old one."""
        if config.name != self.partition_name:
            raise ConfigError([f"config for partition {config.name} given to partition {self.partition_name}"])
        try:
            self.core.update_config(config, now_ns, compat)
        except ConfigError as exc:  # the core does not log; the worker's log says why
            log.warning("partition %s: new config rejected, the old one stays active: %s",
                        self.partition_name, exc)
            raise

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
        started = timer()  # the SI response's share of the step, for the worker's wire metrics
        out = self._outbox(self.core.outcomes.drain())
        self.last_respond_seconds = timer() - started
        return out

    def next_wakeup_ns(self) -> int | None:
        return self.core.next_wakeup_ns()

    def _outbox(self, o: Outcomes) -> Outbox:
        # rows alone when the step made nothing but new allocations (a burst); with releases or
        # rejections everything goes in one SI response, so the RM reads them together as before
        # (a placeholder's release with the allocation replacing it)
        confirmed, self._foreign_confirmed = self._foreign_confirmed, []
        rows_apart = self.rows_out and not (o.released or o.released_asks or o.rejected_asks or confirmed)
        new = self._allocation_rows(o.allocations, listed=rows_apart) if o.allocations else None
        alloc_resp = None
        if (new is not None and not rows_apart) or o.released or o.released_asks or o.rejected_asks or confirmed:
            alloc_resp = self._allocation_response(o, None if rows_apart else new)
            for a in confirmed:
                alloc_resp.new.add().CopyFrom(a)
                alloc_resp.new[-1].partitionName = self.partition_name
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
        return Outbox(alloc_resp, app_resp, node_resp, events, states,
                      [summary_line(x, self.rm_id) for x in o.app_summaries],
                      allocations_new=new if rows_apart else None)

    @staticmethod
    def _allocation_rows(allocations: list, listed: bool) -> dict:
        """The ``SI_ALLOCATIONS`` body of new allocations (``common.si_rows``); its rows a list
        to send, else made one by one as ``fill_allocations`` reads them."""
        sizes = SizeTable()
        index = sizes.index

        def size(r) -> int:  # allocations of one ask share its Resource object
            i = index.get(id(r))
            return sizes.add(id(r), r.items()) if i is None else i

        rows = ((al.key, al.uuid, al.node_id, al.app_id, size(al.resource), al.priority, al.task_group,
                 al.placeholder, al.tags or None, al.originator) for al in (a.alloc for a in allocations))
        return {"sizes": sizes.rows, "new": list(rows) if listed else rows}

    def _allocation_response(self, o: Outcomes, new: dict | None) -> si.AllocationResponse:
        """In the RM's revision: a seed RM names allocations by UUID and gets released asks and
        rejected asks in their own lists; a v1.8 RM names them by key, reads a timed-out ask as
        a release of its key and a rejection as a RejectedAllocation (see module doc). ``new``:
        the new allocations' rows, None when they are reported apart."""
        part = self.partition_name
        seed, v18 = self.revision is not Revision.V18, self.revision is not Revision.SEED
        resp = si.AllocationResponse()
        if new is not None:
            fill_allocations(resp, new, part, self.revision)
        for r in o.released:
            m = resp.released.add(partitionName=part, applicationID=r.app_id, message=r.message,
                                  terminationType=_TERM_TO_SI[r.termination], allocationKey=r.allocation_key)
            if seed:
                m.UUID = r.uuid
            elif r.termination is Termination.PLACEHOLDER_REPLACED:
                m.message = si_v18.replaced_message(r.message)
        for r in o.released_asks:
            asks = resp.releasedAsks if seed else resp.released
            asks.add(partitionName=part, applicationID=r.app_id, allocationKey=r.allocation_key,
                     terminationType=_TERM_TO_SI[r.termination], message=r.message)
        for r in o.rejected_asks:
            if seed:
                resp.rejected.add(allocationKey=r.allocation_key, applicationID=r.app_id, reason=r.reason)
            if v18:
                resp.rejectedAllocations.add(allocationKey=r.allocation_key, applicationID=r.app_id, reason=r.reason)
        return resp

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
        return explain(self.core, app, ask)

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
