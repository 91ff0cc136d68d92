"""Splitting SI requests per partition, and the rejections rmproxy answers itself.

Pure functions on ``si_pb2`` messages. Every ``partitionName`` is normalised to
the short name (``""`` -> ``default``) before it is forwarded, so a worker only
sees names of its own partition. Items for a partition the RM did not register
are rejected here with YuniKorn's reasons (YUNIKORN_BEHAVIOUR.md S4, S8, S11).
"""

from __future__ import annotations

from typing import Callable, Iterable

from common import si_pb2
from common.constants import NODE_PARTITION
from common.partitions import short_name

__all__ = ["STREAMS", "split_allocation_request", "split_application_request", "split_node_request",
           "reject_allocation_request", "reject_application_request", "reject_node_request", "node_partition"]

Split = dict[str, object]  # partition -> request of the same type as the input


def split_allocation_request(
    req: si_pb2.AllocationRequest, rm_id: str, known: Iterable[str]
) -> tuple[dict[str, si_pb2.AllocationRequest], si_pb2.AllocationResponse | None]:
    known = set(known)
    out: dict[str, si_pb2.AllocationRequest] = {}
    rejected = si_pb2.AllocationResponse()

    def part(p: str) -> si_pb2.AllocationRequest:
        r = out.get(p)
        if r is None:
            r = out[p] = si_pb2.AllocationRequest(rmID=rm_id)
        return r

    for ask in req.asks:
        p = short_name(ask.partitionName)
        if p not in known:
            rejected.rejected.add(
                allocationKey=ask.allocationKey, applicationID=ask.applicationID,
                reason=f"Failed to find partition {p}, for application {ask.applicationID} "
                       f"and allocation {ask.allocationKey}")
            continue
        ask.partitionName = p
        part(p).asks.append(ask)
    if req.HasField("releases"):
        for rel in req.releases.allocationsToRelease:
            p = short_name(rel.partitionName)
            if p in known:  # YuniKorn ignores releases for an unknown partition
                rel.partitionName = p
                part(p).releases.allocationsToRelease.append(rel)
        for rel in req.releases.allocationAsksToRelease:
            p = short_name(rel.partitionName)
            if p in known:
                rel.partitionName = p
                part(p).releases.allocationAsksToRelease.append(rel)
    return out, (rejected if rejected.rejected else None)


def split_application_request(
    req: si_pb2.ApplicationRequest, rm_id: str, known: Iterable[str]
) -> tuple[dict[str, si_pb2.ApplicationRequest], si_pb2.ApplicationResponse | None]:
    known = set(known)
    out: dict[str, si_pb2.ApplicationRequest] = {}
    rejected = si_pb2.ApplicationResponse()
    for app in req.new:
        p = short_name(app.partitionName)
        if p not in known:
            rejected.rejected.add(
                applicationID=app.applicationID,
                reason=f"Failed to add application {app.applicationID} to partition {p}, "
                       "partition doesn't exist")
            continue
        app.partitionName = p
        out.setdefault(p, si_pb2.ApplicationRequest(rmID=rm_id)).new.append(app)
    for rem in req.remove:
        p = short_name(rem.partitionName)
        if p in known:  # unknown partition: ignored, as YuniKorn does
            rem.partitionName = p
            out.setdefault(p, si_pb2.ApplicationRequest(rmID=rm_id)).remove.append(rem)
    return out, (rejected if rejected.rejected else None)


def node_partition(node: si_pb2.NodeInfo) -> str:
    return short_name(node.attributes.get(NODE_PARTITION, ""))


def split_node_request(
    req: si_pb2.NodeRequest, rm_id: str, known: Iterable[str]
) -> tuple[dict[str, si_pb2.NodeRequest], si_pb2.NodeResponse | None]:
    known = set(known)
    out: dict[str, si_pb2.NodeRequest] = {}
    rejected = si_pb2.NodeResponse()
    for node in req.nodes:
        p = node_partition(node)
        if p not in known:
            if node.action == si_pb2.NodeInfo.CREATE:
                rejected.rejected.add(nodeID=node.nodeID,
                                      reason=f"failed to find partition {p} for new node {node.nodeID}")
            continue  # other actions on an unknown partition are ignored, as in YuniKorn
        node.attributes[NODE_PARTITION] = p
        out.setdefault(p, si_pb2.NodeRequest(rmID=rm_id)).nodes.append(node)
    return out, (rejected if rejected.rejected else None)


def reject_allocation_request(req: si_pb2.AllocationRequest, reason: str) -> si_pb2.AllocationResponse | None:
    resp = si_pb2.AllocationResponse()
    for ask in req.asks:
        resp.rejected.add(allocationKey=ask.allocationKey, applicationID=ask.applicationID, reason=reason)
    return resp if resp.rejected else None


def reject_application_request(req: si_pb2.ApplicationRequest, reason: str) -> si_pb2.ApplicationResponse | None:
    resp = si_pb2.ApplicationResponse()
    for app in req.new:
        resp.rejected.add(applicationID=app.applicationID, reason=reason)
    return resp if resp.rejected else None


def reject_node_request(req: si_pb2.NodeRequest, reason: str) -> si_pb2.NodeResponse | None:
    resp = si_pb2.NodeResponse()
    for node in req.nodes:
        if node.action == si_pb2.NodeInfo.CREATE:
            resp.rejected.add(nodeID=node.nodeID, reason=reason)
    return resp if resp.rejected else None


# stream name -> (request type, splitter, rejecter, response type)
STREAMS: dict[str, tuple[type, Callable, Callable, type]] = {
    "allocation": (si_pb2.AllocationRequest, split_allocation_request, reject_allocation_request,
                   si_pb2.AllocationResponse),
    "application": (si_pb2.ApplicationRequest, split_application_request, reject_application_request,
                    si_pb2.ApplicationResponse),
    "node": (si_pb2.NodeRequest, split_node_request, reject_node_request, si_pb2.NodeResponse),
}
