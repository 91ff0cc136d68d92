"""Everything rmproxy does differently per SI revision (docs/si-revisions.md), in one place.

Which revision an RM speaks, decided per registration:

1. A registration that declares it (``buildInfo`` ``si.revision``) fixes it.
2. Otherwise the first request carrying a field only one revision has fixes it for the life of
   the registration: seed ``AllocationRequest.asks``, ``allocationAsksToRelease``, a release
   with a ``UUID``, ``NodeInfo.occupiedResource`` or ``existingAllocations``; v1.8
   ``AllocationRequest.allocations``, the node action ``CREATE_DRAIN``.
3. A request mixing both revisions' fields, or the other revision's fields after the decision,
   is refused (``RevisionError``): the stream ends INVALID_ARGUMENT naming the RM, its revision
   and the fields; nothing of that request is applied, everything before it stays.
4. A re-registration starts over (a new ``RMSession``): an RM may switch revision.

And what each revision's allocation stream looks like on the way to a worker and back
(``common.si_rows``): a seed ask is an ``AllocationAsk`` in ``asks``, a v1.8 one an
``Allocation`` without node (not another scheduler's) in ``allocations``, both read here into
``AskRow``s; a rejection goes in ``rejected`` or ``rejectedAllocations`` by the kind of item; a
new allocation is written for a seed RM with its UUID, for a v1.8 RM by key with
``originator`` (undecided: with the UUID, which a v1.8 RM ignores).

Pure: reads requests and the ``RMSession``; the router sends and tells the workers.
"""

from __future__ import annotations

from typing import Any, Iterator

from common import si_internal_pb2 as si
from common.constants import TAG_FOREIGN
from common.si_resource import fill_si_resource
from common.si_revision import DECLARATION_KEY, Revision
from common.si_rows import AllocationRow, AskRow, NewAllocations, RequestRows, SizeTable, preemption_policy
from rmproxy.rms import RMSession

__all__ = ["RevisionError", "decisive_fields", "settle", "DECLARED", "REQUEST_NAMES", "is_ask",
           "request_rows", "reject", "reject_allocation_request", "reject_rows", "allocation_response"]

DECLARED = f"declared at registration (buildInfo {DECLARATION_KEY})"
REQUEST_NAMES = {"allocation": "AllocationRequest", "application": "ApplicationRequest", "node": "NodeRequest"}
_CREATE_DRAIN = si.NodeInfo.CREATE_DRAIN


class RevisionError(Exception):
    """A request the RM's SI revision does not allow; the message names the RM and the fields."""


# -- deciding the revision ---------------------------------------------------------------------

def decisive_fields(stream: str, req) -> tuple[list[str], list[str]]:
    """The fields of ``req`` only the seed revision has, and those only v1.8 has."""
    seed: list[str] = []
    v18: list[str] = []
    if stream == "allocation":
        if req.asks:
            seed.append("AllocationRequest.asks")
        if req.allocations:
            v18.append("AllocationRequest.allocations")
        if req.HasField("releases"):
            rel = req.releases
            if rel.allocationAsksToRelease:
                seed.append("AllocationReleasesRequest.allocationAsksToRelease")
            if any(r.UUID for r in rel.allocationsToRelease):
                seed.append("AllocationRelease.UUID")
    elif stream == "node":
        occupied = existing = drain = False
        for n in req.nodes:
            occupied = occupied or n.HasField("occupiedResource")
            existing = existing or bool(n.existingAllocations)
            drain = drain or n.action == _CREATE_DRAIN
        if occupied:
            seed.append("NodeInfo.occupiedResource")
        if existing:
            seed.append("NodeInfo.existingAllocations")
        if drain:
            v18.append("NodeInfo.action CREATE_DRAIN")
    return seed, v18


def settle(rm: RMSession, stream: str, req) -> Revision | None:
    """Check ``req`` against the RM's revision; return the revision it decides (None when it
    decides nothing new). Raises ``RevisionError`` for a mixed or contradicting request."""
    seed, v18 = decisive_fields(stream, req)
    if not seed and not v18:
        return None
    name = REQUEST_NAMES[stream]
    if seed and v18:
        raise RevisionError(
            f"RM {rm.rm_id}: {name} mixes fields of both SI revisions: {', '.join(seed)} (seed) and "
            f"{', '.join(v18)} (v1.8); the request was not applied")
    found, fields = (Revision.SEED, seed) if seed else (Revision.V18, v18)
    if rm.revision is None:
        rm.revision, rm.revision_why = found, f"decided by {fields[0]}"
        return found
    if rm.revision is not found:
        raise RevisionError(
            f"RM {rm.rm_id} speaks SI revision {rm.revision} ({rm.revision_why}), but this {name} "
            f"carries {', '.join(fields)} of SI revision {found}; the request was not applied "
            "(re-register to switch revision)")
    return None


# -- asks into rows --------------------------------------------------------------------------

def is_ask(a: si.Allocation) -> bool:
    """An SI v1.8 ``Allocation`` that is an ask: no node, not another scheduler's pod."""
    return not a.nodeID and TAG_FOREIGN not in a.allocationTags


def _size(sizes: SizeTable, msg: si.Resource) -> int:
    raw = msg.SerializeToString()  # same bytes, same size (map order may differ: one more row)
    i = sizes.index.get(raw)
    if i is None:
        res = msg.resources
        i = sizes.add(raw, [(k, res[k].value) for k in res])
    return i


def _seed_ask(sizes: SizeTable, a: si.AllocationAsk) -> AskRow:
    tags = a.tags
    return AskRow(a.allocationKey, a.applicationID, _size(sizes, a.resourceAsk), a.maxAllocations, a.priority,
                  a.executionTimeoutMilliSeconds, dict(tags) if tags else None, a.taskGroupName, a.placeholder,
                  a.Originator, *preemption_policy(a))


def _v18_ask(sizes: SizeTable, a: si.Allocation) -> AskRow:
    tags = a.allocationTags  # v1.8 has no repeat and no execution timeout: one allocation, none
    return AskRow(a.allocationKey, a.applicationID, _size(sizes, a.resourcePerAlloc), 1, a.priority, 0,
                  dict(tags) if tags else None, a.taskGroupName, a.placeholder, a.originator,
                  *preemption_policy(a))


def request_rows(part: si.AllocationRequest, batch: int) -> Iterator[RequestRows]:
    """One partition's part of an ``AllocationRequest`` as bodies of at most ``batch`` asks
    each, in the RM's order, each made when the one before has been taken (the worker starts
    on the first while the next is read): every ask as a row, each v1.8 allocation that is not
    an ask in the body where it comes (``RequestRows.rest_at``), the releases in the last body.
    Reads ``part`` and empties its asks (the last body's ``rest`` may be ``part`` itself)."""
    v18 = bool(part.allocations)  # (settle refused a request with both)
    field = "allocations" if v18 else "asks"
    items = getattr(part, field)
    read = _v18_ask if v18 else _seed_ask
    sizes, rows, others, at = SizeTable(), [], [], []
    sent = False
    for item in items:
        if v18 and not is_ask(item):
            others.append(item)
            at.append(len(rows))
            continue
        rows.append(read(sizes, item))
        if len(rows) == batch:
            yield RequestRows(sizes.rows, rows, v18, _rest(others), at)
            sent = True
            sizes, rows, others, at = SizeTable(), [], [], []
    releases = part.HasField("releases")
    if rows or others or releases or not sent:
        if others:
            rest = _rest(others)
            if releases:
                rest.releases.CopyFrom(part.releases)  # type: ignore[union-attr]
        elif releases:  # the common case (steady churn): the part itself, without its asks
            part.ClearField(field)
            rest = part
        else:
            rest = None
        yield RequestRows(sizes.rows, rows, v18, rest, at)


def _rest(allocations: list) -> si.AllocationRequest | None:
    if not allocations:
        return None
    rest = si.AllocationRequest()
    rest.allocations.extend(allocations)
    return rest


# -- rejections rmproxy answers itself ---------------------------------------------------------

def reject(resp: si.AllocationResponse, item: si.AllocationAsk | si.Allocation, reason: str) -> None:
    """Add the rejection of ``item`` to ``resp``: a seed ask in ``rejected``, a v1.8
    allocation in ``rejectedAllocations``."""
    target = resp.rejected if isinstance(item, si.AllocationAsk) else resp.rejectedAllocations
    target.add(allocationKey=item.allocationKey, applicationID=item.applicationID, reason=reason)


def reject_allocation_request(req: si.AllocationRequest, reason: str) -> si.AllocationResponse | None:
    """Every ask and allocation of ``req`` rejected with ``reason`` (None: it holds none)."""
    resp = si.AllocationResponse()
    for item in (*req.asks, *req.allocations):
        reject(resp, item, reason)
    return resp if resp.ListFields() else None


def reject_rows(raw: bytes, reason: str) -> si.AllocationResponse | None:
    """``reject_allocation_request`` for a ``RequestRows`` body (None: not one, or nothing in it)."""
    try:
        body = RequestRows.unpack(raw)
    except ValueError:
        return None
    resp = si.AllocationResponse()
    rejected = resp.rejectedAllocations if body.v18 else resp.rejected
    for row in body.asks:
        ask = AskRow._make(row)
        rejected.add(allocationKey=ask.key, applicationID=ask.app_id, reason=reason)
    if body.rest is not None:
        for a in body.rest.allocations:
            reject(resp, a, reason)
    return resp if resp.ListFields() else None


# -- new allocations out ---------------------------------------------------------------------

def allocation_response(out: NewAllocations, partition: str, revision: Revision | None) -> bytes:
    """The serialized ``AllocationResponse`` of a worker's ``NewAllocations``: the rows as
    ``new`` in the RM's revision, then the worker's serialized rest (protobuf reads two
    serialized messages one after the other as their merge: the lists are joined). Raises
    TypeError, ValueError or IndexError for malformed rows."""
    resp = si.AllocationResponse()
    seed = revision is not Revision.V18
    sizes = out.sizes
    built: dict[int, si.Resource] = {}  # each size's SI message, built once: allocations share few sizes
    add = resp.new.add
    for row, size in zip(out.new, out.size_of):
        al = AllocationRow._make(row)
        if seed:
            m = add(allocationKey=al.key, UUID=al.uuid, nodeID=al.node_id, applicationID=al.app_id,
                    partitionName=partition)
        else:
            m = add(allocationKey=al.key, nodeID=al.node_id, applicationID=al.app_id, partitionName=partition)
            if al.originator:
                m.originator = True
        if al.priority:  # proto3: a field left at its default is not sent either way
            m.priority = al.priority
        if al.task_group:
            m.taskGroupName = al.task_group
        if al.placeholder:
            m.placeholder = True
        if al.tags:
            m.allocationTags.update(al.tags)
        res = built.get(size)
        if res is None:
            flat = sizes[size]
            res = built[size] = fill_si_resource(si.Resource(), dict(zip(flat[::2], flat[1::2])))
        m.resourcePerAlloc.CopyFrom(res)
    return resp.SerializeToString() + (out.rest or b"")
