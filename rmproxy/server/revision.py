"""Which SI revision an RM speaks, decided per registration (docs/si-revisions.md).

1. A registration that declares it (``buildInfo`` ``si.revision``) fixes it.
2. Otherwise the first request carrying a field only one revision has fixes it for the life of
   the registration: seed ``AllocationRequest.asks``, ``allocationAsksToRelease``, a release
   with a ``UUID``, ``NodeInfo.occupiedResource`` or ``existingAllocations``; v1.8
   ``AllocationRequest.allocations``, the node action ``CREATE_DRAIN``.
3. A request mixing both revisions' fields, or the other revision's fields after the decision,
   is refused (``RevisionError``): the stream ends INVALID_ARGUMENT naming the RM, its revision
   and the fields; nothing of that request is applied, everything before it stays.
4. A re-registration starts over (a new ``RMSession``): an RM may switch revision.

Pure: reads the request and the ``RMSession``; the proxy tells the workers.
"""

from __future__ import annotations

from common import si_internal_pb2 as si
from common.si_revision import DECLARATION_KEY, Revision
from rmproxy.server.rms import RMSession

__all__ = ["RevisionError", "decisive_fields", "settle", "DECLARED", "REQUEST_NAMES"]

DECLARED = f"declared at registration (buildInfo {DECLARATION_KEY})"
REQUEST_NAMES = {"allocation": "AllocationRequest", "application": "ApplicationRequest", "node": "NodeRequest"}
_CREATE_DRAIN = si.NodeInfo.CREATE_DRAIN


class RevisionError(Exception):
    """A request the RM's SI revision does not allow; the message names the RM and the fields."""


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
