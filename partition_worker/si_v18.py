"""SI v1.8's ``AllocationRequest.allocations`` into core commands, as YuniKorn >= 1.6 reads them.

Each element, in order (docs/si-revisions.md has the whole mapping):

- tag ``foreign``: a pod of another scheduler. It enters as the seed revision carries one: in
  the ``existingAllocations`` of an UPDATE of its node, which is where the core's foreign
  handling reads it (the core never learns which revision the RM speaks);
- an unknown application, an empty, zero or negative resource, an unknown node: rejected with
  YuniKorn's reasons; no ``allocationKey`` or ``applicationID``: rejected naming what is missing;
- no ``nodeID``: an ask (``maxAllocations`` 1, the key is the allocation's identity); a key
  already placed is left as it is (YuniKorn would apply a resource change in place);
- ``nodeID`` set: an allocation the RM placed (its recovery after a re-registration, or its
  own placement): ``AddAllocation``, confirmed back in ``AllocationResponse.new``.

Pure like the session: no I/O, ``now_ns`` passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from common import si_internal_pb2 as si
from common.constants import TAG_FOREIGN
from common.resources import Resource
from common.si_resource import resource_from_si
from common.si_rows import preemption_policy
from partition_worker.core import commands as C
from partition_worker.core.outcomes import AskRejected, EventType

if TYPE_CHECKING:  # pragma: no cover
    from partition_worker.core.partition import Partition

__all__ = ["admitted", "commands", "replaced_message"]

# The message of a placeholder's PLACEHOLDER_REPLACED release names the allocation replacing it:
# the core writes the seed's form (by UUID), a v1.8 RM reads YuniKorn 1.8's (by allocationKey).
_REPLACED_SEED = "replacing uuid: "
_REPLACED_V18 = "replacing allocationKey: "


def replaced_message(message: str) -> str:
    """A PLACEHOLDER_REPLACED release's message for a v1.8 RM (whose allocations' UUIDs are
    their keys, so the name after the prefix is the replacing allocation's key)."""
    if message.startswith(_REPLACED_SEED):
        return _REPLACED_V18 + message[len(_REPLACED_SEED):]
    return message


def commands(core: "Partition", allocations: Iterable[si.Allocation], now_ns: int) -> Iterator[tuple[object, str]]:
    """(command, allocation key) for each element to apply, in order; a foreign allocation's
    command is a ``NodeRequest`` (see module doc). Rejections go straight to the core's
    outcomes. A generator: each element is checked after the ones before it were applied."""
    for a in allocations:
        tags = a.allocationTags
        if TAG_FOREIGN in tags:
            yield si.NodeRequest(nodes=[si.NodeInfo(nodeID=a.nodeID, action=si.NodeInfo.UPDATE,
                                                    existingAllocations=[a])]), a.allocationKey
            continue
        key, app_id = a.allocationKey, a.applicationID
        try:
            resource: Resource | ValueError = resource_from_si(a.resourcePerAlloc)
        except ValueError as exc:
            resource = exc
        if not admitted(core, key, app_id, a.nodeID, resource, now_ns):
            continue
        assert isinstance(resource, Resource)
        allow_self, allow_other = preemption_policy(a)
        if a.nodeID:
            cmd: object = C.AddAllocation(C.RecoveredAlloc(
                uuid=key, key=key, app_id=app_id, resource=resource, node_id=a.nodeID, tags=dict(tags),
                priority=a.priority, task_group=a.taskGroupName, placeholder=a.placeholder,
                originator=a.originator, allow_preempt_self=allow_self))
        else:
            cmd = C.AddAsk(key=key, app_id=app_id, resource=resource, max_allocations=1, priority=a.priority,
                           tags=dict(tags) if tags else {}, task_group=a.taskGroupName, placeholder=a.placeholder,
                           originator=a.originator, allow_preempt_self=allow_self, allow_preempt_other=allow_other)
        yield cmd, key


def admitted(core: "Partition", key: str, app_id: str, node_id: str, resource: "Resource | ValueError",
             now_ns: int) -> bool:
    """Whether a (non-foreign) allocation may be applied, as YuniKorn >= 1.6 decides it; if not,
    its rejection (or, for a key already placed as it is, YuniKorn's no-op event) is recorded.
    ``resource``: its size, or why it has none. The asks of an ``SI_ASKS`` body from a v1.8 RM
    pass here too (``PartitionSession.apply_ask_rows``)."""
    reason = _why_not(core, key, app_id, node_id, resource)
    if reason:
        core.outcomes.rejected_asks.append(AskRejected(app_id, key, reason))
        return False
    placed = core.allocations.get(key)
    if placed is None:
        return True
    if placed.app_id != app_id:
        reason = f"allocation {key} of application {app_id}: the key is in use by application {placed.app_id}"
    elif node_id and node_id != placed.node_id:
        reason = f"allocation {key} is placed on node {placed.node_id}, not on node {node_id}"
    else:
        core.event(EventType.REQUEST, key, "AllocationUnchanged",
                   f"allocation {key} of application {app_id} is placed already: an update of a "
                   "placed allocation changes nothing", now_ns, group=app_id)
        return False
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
