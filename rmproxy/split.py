"""Splitting SI requests per partition, and the rejections rmproxy answers itself.

Pure functions on the internal model (``si_internal_pb2``: either SI revision). Every
``partitionName`` is normalised to the short name (``""`` -> ``default``) before it is
forwarded, so a worker only sees names of its own partition. Items for a partition the RM did
not register are rejected here with YuniKorn's reasons (YUNIKORN_BEHAVIOUR.md S4, S8, S11), each
in its own revision's field (``rmproxy.revision.reject``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from common import si_internal_pb2 as si
from common.constants import NODE_PARTITION
from common.partitions import short_name
from rmproxy.revision import reject, reject_allocation_request

__all__ = ["STREAMS", "split_allocation_request", "split_application_request", "split_node_request",
           "reject_application_request", "reject_node_request", "node_partition"]

_CREATE = (si.NodeInfo.CREATE, si.NodeInfo.CREATE_DRAIN)  # the actions that add a node

# One kind of item of a request: (the items, the list they go to in a partition's part, what to
# do with an item of a partition the RM did not register: add a rejection; None: ignore it, as
# YuniKorn does)
Route = tuple[Iterable[Any], Callable[[Any], Any], Callable[[Any, Any, str], None] | None]


def _split(routes: list[Route], make_part: Callable[[], Any], rejected: Any,
           known: Iterable[str]) -> tuple[dict[str, Any], Any]:
    """Each item (a message with a ``partitionName``) to its partition's part, with its name made
    short; the parts by partition, and ``rejected`` if it holds any rejection (else None)."""
    known = set(known)
    out: dict[str, Any] = {}
    for items, target, reject in routes:
        lists: dict[str, Any] = {}  # partition -> the list its items go to, in its part
        for item in items:
            p = short_name(item.partitionName)
            if p not in known:
                if reject is not None:
                    reject(rejected, item, p)
                continue
            item.partitionName = p
            got = lists.get(p)
            if got is None:
                part = out.get(p)
                if part is None:
                    part = out[p] = make_part()
                got = lists[p] = target(part)
            got.append(item)
    return out, (rejected if rejected.ListFields() else None)


def _reject_item(rejected: si.AllocationResponse, item: si.AllocationAsk | si.Allocation, p: str) -> None:
    reject(rejected, item, f"Failed to find partition {p}, for application {item.applicationID} and "
                           f"allocation {item.allocationKey}")


def _reject_app(rejected: si.ApplicationResponse, app: si.AddApplicationRequest, p: str) -> None:
    rejected.rejected.add(applicationID=app.applicationID,
                          reason=f"Failed to add application {app.applicationID} to partition {p}, "
                                 "partition doesn't exist")


def _sole_partition(groups: list[Iterable[Any]], known: set[str]) -> str | None:
    """The one registered partition every item names (each name made short on the way), else None."""
    sole = None
    short: dict[str, str] = {}  # raw name -> short name: a request repeats a handful of names
    for items in groups:
        for item in items:
            raw = item.partitionName
            p = short.get(raw)
            if p is None:
                p = short[raw] = short_name(raw)
                if p not in known:
                    return None
            if sole is None:
                sole = p
            elif p != sole:
                return None
            if p != raw:
                item.partitionName = p
    return sole


def split_allocation_request(
    req: si.AllocationRequest, rm_id: str, known: Iterable[str]
) -> tuple[dict[str, si.AllocationRequest], si.AllocationResponse | None]:
    known = set(known)
    routes: list[Route] = [(req.allocations, lambda part: part.allocations, _reject_item),
                           (req.asks, lambda part: part.asks, _reject_item)]
    if req.HasField("releases"):  # YuniKorn ignores releases for an unknown partition
        routes += [(req.releases.allocationsToRelease, lambda part: part.releases.allocationsToRelease, None),
                   (req.releases.allocationAsksToRelease, lambda part: part.releases.allocationAsksToRelease, None)]
    # The common case, every item for one registered partition: the request itself is that
    # partition's part (every field it has is routed above), so no item is copied into a new one.
    sole = _sole_partition([items for items, _, _ in routes], known)
    if sole is not None:
        req.rmID = rm_id
        return {sole: req}, None
    return _split(routes, lambda: si.AllocationRequest(rmID=rm_id), si.AllocationResponse(), known)


def split_application_request(
    req: si.ApplicationRequest, rm_id: str, known: Iterable[str]
) -> tuple[dict[str, si.ApplicationRequest], si.ApplicationResponse | None]:
    routes: list[Route] = [(req.new, lambda part: part.new, _reject_app),
                           (req.remove, lambda part: part.remove, None)]  # unknown partition: ignored
    return _split(routes, lambda: si.ApplicationRequest(rmID=rm_id), si.ApplicationResponse(), known)


def node_partition(node: si.NodeInfo) -> str:
    return short_name(node.attributes.get(NODE_PARTITION, ""))


def split_node_request(
    req: si.NodeRequest, rm_id: str, known: Iterable[str]
) -> tuple[dict[str, si.NodeRequest], si.NodeResponse | None]:
    known = set(known)
    out: dict[str, si.NodeRequest] = {}
    rejected = si.NodeResponse()
    for node in req.nodes:
        p = node_partition(node)
        if p not in known:
            if node.action in _CREATE:
                rejected.rejected.add(nodeID=node.nodeID,
                                      reason=f"failed to find partition {p} for new node {node.nodeID}")
            continue  # other actions on an unknown partition are ignored, as in YuniKorn
        node.attributes[NODE_PARTITION] = p
        out.setdefault(p, si.NodeRequest(rmID=rm_id)).nodes.append(node)
    return out, (rejected if rejected.rejected else None)


def reject_application_request(req: si.ApplicationRequest, reason: str) -> si.ApplicationResponse | None:
    resp = si.ApplicationResponse()
    for app in req.new:
        resp.rejected.add(applicationID=app.applicationID, reason=reason)
    return resp if resp.rejected else None


def reject_node_request(req: si.NodeRequest, reason: str) -> si.NodeResponse | None:
    resp = si.NodeResponse()
    for node in req.nodes:
        if node.action in _CREATE:
            resp.rejected.add(nodeID=node.nodeID, reason=reason)
    return resp if resp.rejected else None


# stream name -> (request type, splitter, rejecter, response type)
STREAMS: dict[str, tuple[type, Callable, Callable, type]] = {
    "allocation": (si.AllocationRequest, split_allocation_request, reject_allocation_request,
                   si.AllocationResponse),
    "application": (si.ApplicationRequest, split_application_request, reject_application_request,
                    si.ApplicationResponse),
    "node": (si.NodeRequest, split_node_request, reject_node_request, si.NodeResponse),
}
