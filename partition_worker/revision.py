"""Everything a worker does differently per SI revision (docs/si-revisions.md), in one place.

rmproxy decides the RM's revision and tells the worker (``PartitionSession.set_revision``)
before any request that depends on it; asks arrive as rows of either revision
(``common.si_rows``), so what is left here is:

- releases (``release_commands``): a seed RM names an allocation by UUID and releases asks
  apart; a v1.8 RM names both by allocationKey (a release without UUID ends the allocation and
  the ask of that key; all of the app without a key). Undecided, a release without UUID is read
  as v1.8's;
- SI v1.8 allocations that are not asks (``allocation_commands``, as YuniKorn >= 1.6 reads
  them): tag ``foreign``, a pod of another scheduler, enters as the seed revision carries one,
  in the ``existingAllocations`` of an UPDATE of its node, which is where the core's foreign
  handling reads it (the core never learns which revision the RM speaks); on a node not open
  yet it is confirmed back in ``AllocationResponse.new`` (``allocation_rest``), so the RM can
  open the node once every pod on it is counted; ``nodeID`` set, an
  allocation the RM placed (its recovery after a re-registration, or its own placement):
  ``AddAllocation``, confirmed back in ``AllocationResponse.new``. An unknown application, an
  empty, zero or negative resource, an unknown node are rejected with YuniKorn's reasons
  (``admitted``, which the asks of a v1.8 RM pass too); no ``allocationKey`` or
  ``applicationID``: rejected naming what is missing. The key of an allocation placed already
  (same application, its node or none) with another size is an in-place resize (YuniKorn >= 1.6,
  YUNIKORN-2367): ``ResizeAllocation``, which the core checks; with the same size it changes
  nothing (an event says so);
- the allocation stream's response besides new allocations (``allocation_rest``): a seed RM gets
  releases by UUID, released asks in ``releasedAsks`` and rejections in ``rejected``; a v1.8 RM
  releases by key (a placeholder's replacement named by key), a timed-out ask as a release of
  its key, rejections in ``rejectedAllocations``. Undecided: rejections in both fields.

Pure like the session: no I/O, ``now_ns`` passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from common import si_internal_pb2 as si
from common.constants import TAG_FOREIGN
from common.resources import Resource
from common.si_resource import resource_from_si
from common.si_revision import Revision
from common.si_rows import preemption_policy
from partition_worker.core import commands as C
from partition_worker.core.outcomes import AskRejected, EventType, Outcomes, Termination

if TYPE_CHECKING:  # pragma: no cover
    from partition_worker.core.partition import Partition

__all__ = ["release_commands", "allocation_commands", "admitted", "allocation_rest", "replaced_message"]

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
# The message of a placeholder's PLACEHOLDER_REPLACED release names the allocation replacing it:
# the core writes the seed's form (by UUID), a v1.8 RM reads YuniKorn 1.8's (by allocationKey).
_REPLACED_SEED = "replacing uuid: "
_REPLACED_V18 = "replacing allocationKey: "


# -- in ----------------------------------------------------------------------------------------

def release_commands(rel: si.AllocationReleasesRequest, revision: Revision | None) -> Iterator[tuple[object, str]]:
    """(command, the object it concerns) for each release, in YuniKorn's order: asks, then
    allocations."""
    for r in rel.allocationAsksToRelease:
        yield C.ReleaseAsk(r.applicationID, r.allocationKey,
                           _TERM_TO_CORE.get(r.terminationType, Termination.STOPPED_BY_RM), r.message), r.allocationKey
    by_key = revision is not Revision.SEED
    for r in rel.allocationsToRelease:
        if not r.applicationID and (r.allocationKey or r.UUID):  # a foreign allocation's end
            yield C.ReleaseForeign(r.allocationKey or r.UUID), r.allocationKey or r.UUID
            continue
        term = _TERM_TO_CORE.get(r.terminationType, Termination.STOPPED_BY_RM)
        if by_key and not r.UUID:  # v1.8: the allocation and the ask of that key (all: no key)
            yield C.ReleaseAsk(r.applicationID, r.allocationKey, term, r.message), r.allocationKey or r.applicationID
            uuid = r.allocationKey
        else:
            uuid = r.UUID
        yield C.ReleaseAlloc(r.applicationID, uuid, term, r.message, r.allocationKey), uuid or r.applicationID


def allocation_commands(core: "Partition", allocations: list[si.Allocation],
                        now_ns: int) -> Iterator[tuple[object, str]]:
    """(command, allocation key) for each v1.8 allocation that is not an ask, in order; a
    foreign allocation's command is a ``NodeRequest`` (see module doc). Rejections go straight
    to the core's outcomes. A generator: each is checked after the ones before it were applied."""
    for a in allocations:
        tags = a.allocationTags
        if TAG_FOREIGN in tags:
            yield si.NodeRequest(nodes=[si.NodeInfo(nodeID=a.nodeID, action=si.NodeInfo.UPDATE,
                                                    existingAllocations=[a])]), a.allocationKey
            continue
        key, app_id = a.allocationKey, a.applicationID
        if not a.nodeID:  # a bug of the sender: asks come as rows (common.si_rows)
            core.outcomes.rejected_asks.append(AskRejected(
                app_id, key, f"allocation {key} of application {app_id} has no node: an ask must come as a row"))
            continue
        try:
            resource: Resource | ValueError = resource_from_si(a.resourcePerAlloc)
        except ValueError as exc:
            resource = exc
        verdict = admitted(core, key, app_id, a.nodeID, resource, now_ns)
        if verdict is not True:
            if verdict:  # an in-place resize
                yield verdict, key
            continue
        assert isinstance(resource, Resource)
        # placed already, it keeps its preemption opt-out and originator flag (as YuniKorn books it)
        yield C.AddAllocation(C.RecoveredAlloc(
            uuid=key, key=key, app_id=app_id, resource=resource, node_id=a.nodeID, tags=dict(tags),
            priority=a.priority, task_group=a.taskGroupName, placeholder=a.placeholder,
            originator=a.originator, allow_preempt_self=preemption_policy(a)[0])), key


def admitted(core: "Partition", key: str, app_id: str, node_id: str, resource: "Resource | ValueError",
             now_ns: int) -> "bool | C.ResizeAllocation":
    """Whether a (non-foreign) v1.8 allocation may be applied as new, as YuniKorn >= 1.6 decides
    it: True; an update of an allocation placed already (same application, its node or none)
    with another size: the ``ResizeAllocation`` to apply instead; otherwise False, with its
    rejection (or, for a key placed as it is, a no-op event) recorded. ``resource``: its size,
    or why it has none. A v1.8 RM's asks pass here too."""
    placed = core.allocations.get(key) if key else None
    if placed is not None and placed.app_id == app_id and node_id in ("", placed.node_id):
        if isinstance(resource, ValueError):  # the core names the rest (empty, negative, no room)
            core.outcomes.rejected_asks.append(AskRejected(app_id, key, (
                f"resize of allocation {key} of application {app_id} on node {placed.node_id} refused: "
                f"{resource}; it keeps {placed.resource}")))
            return False
        if resource != placed.resource:
            return C.ResizeAllocation(app_id, placed.uuid, resource)
        core.event(EventType.REQUEST, key, "AllocationUnchanged",
                   f"allocation {key} of application {app_id} is placed already with this size: "
                   "the update changes nothing", now_ns, group=app_id)
        return False
    reason = _why_not(core, key, app_id, node_id, resource)
    if reason:
        core.outcomes.rejected_asks.append(AskRejected(app_id, key, reason))
        return False
    if placed is None:
        return True
    if placed.app_id != app_id:
        reason = f"allocation {key} of application {app_id}: the key is in use by application {placed.app_id}"
    else:
        reason = f"allocation {key} is placed on node {placed.node_id}, not on node {node_id}"
    core.outcomes.rejected_asks.append(AskRejected(app_id, key, reason))
    return False


def _why_not(core: "Partition", key: str, app_id: str, node_id: str, resource: "Resource | ValueError") -> str:
    """YuniKorn's reason to reject a (non-foreign) allocation (Korral's when a key is missing), or ""."""
    if not key:
        return f"allocation of application {app_id or '(none)'} has no allocationKey"
    if not app_id:
        return f"allocation {key} has no applicationID"
    if app_id not in core.apps:
        return f"failed to find application {app_id}"
    if node_id and node_id not in core.nodes.nodes:
        return f"failed to find node {node_id}"
    if isinstance(resource, ValueError):
        return f"allocation {key}: {resource}"
    if resource.is_zero():
        return "allocation contains no resources"
    if not resource.strictly_greater_than_zero():
        return "allocation contains negative resources"
    return ""


# -- out ---------------------------------------------------------------------------------------

def replaced_message(message: str) -> str:
    """A PLACEHOLDER_REPLACED release's message for a v1.8 RM (whose allocations' UUIDs are
    their keys, so the name after the prefix is the replacing allocation's key)."""
    if message.startswith(_REPLACED_SEED):
        return _REPLACED_V18 + message[len(_REPLACED_SEED):]
    return message


def allocation_rest(o: Outcomes, partition: str, revision: Revision | None,
                    foreign_confirmed: Sequence[si.Allocation] = ()) -> si.AllocationResponse | None:
    """The step's ``AllocationResponse`` without its new allocations, in the RM's revision (see
    module doc), with ``foreign_confirmed`` (v1.8 foreign allocations on a node not open yet) in
    ``new``; None when the step released, rejected and confirmed nothing."""
    if not (o.released or o.released_asks or o.rejected_asks or foreign_confirmed):
        return None
    seed, v18 = revision is not Revision.V18, revision is not Revision.SEED
    resp = si.AllocationResponse()
    for a in foreign_confirmed:  # no applicationID: the RM reads it as its foreign pod's
        m = resp.new.add()
        m.CopyFrom(a)
        m.partitionName = partition
    for r in o.released:
        m = resp.released.add(partitionName=partition, applicationID=r.app_id, message=r.message,
                              terminationType=_TERM_TO_SI[r.termination], allocationKey=r.allocation_key)
        if seed:
            m.UUID = r.uuid
        elif r.termination is Termination.PLACEHOLDER_REPLACED:
            m.message = replaced_message(r.message)
    for r in o.released_asks:
        asks = resp.releasedAsks if seed else resp.released
        asks.add(partitionName=partition, applicationID=r.app_id, allocationKey=r.allocation_key,
                 terminationType=_TERM_TO_SI[r.termination], message=r.message)
    for r in o.rejected_asks:
        if seed:
            resp.rejected.add(allocationKey=r.allocation_key, applicationID=r.app_id, reason=r.reason)
        if v18:
            resp.rejectedAllocations.add(allocationKey=r.allocation_key, applicationID=r.app_id, reason=r.reason)
    return resp
