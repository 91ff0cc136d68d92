"""Splitting SI requests per partition; rejections rmproxy answers itself, with YuniKorn's reasons."""

from __future__ import annotations

from common import si_internal_pb2 as si
from rmproxy import split
from tests.si_builders import internal

app, ask, node, remove_app = internal.app, internal.ask, internal.node, internal.remove_app


def test_asks_split_by_partition_and_names_normalised():
    req = si.AllocationRequest(rmID="rm", asks=[
        ask("a", "app", ""), ask("b", "app", "[rm]gpu"), ask("c", "app", "DEFAULT")])
    parts, rejected = split.split_allocation_request(req, "rm", ["default", "gpu"])
    assert rejected is None
    assert [a.allocationKey for a in parts["default"].asks] == ["a", "c"]
    assert [a.partitionName for a in parts["default"].asks] == ["default", "default"]
    assert [a.allocationKey for a in parts["gpu"].asks] == ["b"]
    assert parts["gpu"].rmID == "rm"


def test_ask_for_unknown_partition_is_rejected_with_yunikorn_reason():
    req = si.AllocationRequest(asks=[ask("k", "app", "nope")])
    parts, rejected = split.split_allocation_request(req, "rm", ["default"])
    assert parts == {}
    assert rejected.rejected[0].reason == "Failed to find partition nope, for application app and allocation k"


def test_releases_follow_their_partition_and_unknown_ones_are_ignored():
    req = si.AllocationRequest(releases=si.AllocationReleasesRequest(
        allocationsToRelease=[si.AllocationRelease(partitionName="", UUID="u1"),
                              si.AllocationRelease(partitionName="gone", UUID="u2")],
        allocationAsksToRelease=[si.AllocationAskRelease(partitionName="default", allocationKey="k")]))
    parts, rejected = split.split_allocation_request(req, "rm", ["default"])
    assert rejected is None
    rel = parts["default"].releases
    assert [r.UUID for r in rel.allocationsToRelease] == ["u1"]
    assert [r.allocationKey for r in rel.allocationAsksToRelease] == ["k"]


def test_application_for_unknown_partition_rejected():
    req = si.ApplicationRequest(new=[app("a1", partition="x")], remove=[remove_app("a2", "x")])
    parts, rejected = split.split_application_request(req, "rm", ["default"])
    assert parts == {}
    assert rejected.rejected[0].reason == "Failed to add application a1 to partition x, partition doesn't exist"


def test_nodes_routed_by_node_partition_attribute():
    req = si.NodeRequest(nodes=[node("n1"), node("n2", "gpu"), node("n3", "zzz"),
                                    node("n4", "zzz", action=si.NodeInfo.UPDATE)])
    parts, rejected = split.split_node_request(req, "rm", ["default", "gpu"])
    assert [n.nodeID for n in parts["default"].nodes] == ["n1"]
    assert parts["default"].nodes[0].attributes["si/node-partition"] == "default"
    assert [n.nodeID for n in parts["gpu"].nodes] == ["n2"]
    assert [(r.nodeID, r.reason) for r in rejected.rejected] == [
        ("n3", "failed to find partition zzz for new node n3")]


def test_reject_whole_request_with_a_reason():
    req = si.NodeRequest(nodes=[node("n1"), node("n2", action=si.NodeInfo.UPDATE)])
    resp = split.reject_node_request(req, "no worker")
    assert [(r.nodeID, r.reason) for r in resp.rejected] == [("n1", "no worker")]


def test_a_request_for_one_partition_is_forwarded_whole_with_the_same_content_as_a_split():
    def request():
        return si.AllocationRequest(rmID="", asks=[
            si.AllocationAsk(allocationKey="a", applicationID="app", partitionName=""),
            si.AllocationAsk(allocationKey="b", applicationID="app", partitionName="[rm]Default"),
        ], releases=si.AllocationReleasesRequest(
            allocationsToRelease=[si.AllocationRelease(partitionName="default", UUID="u1")]))

    req = request()
    parts, rejected = split.split_allocation_request(req, "rm", ["default", "gpu"])
    assert rejected is None and parts["default"] is req  # no copy
    assert [a.partitionName for a in req.asks] == ["default", "default"] and req.rmID == "rm"
    # the same content the per-item split makes (one ask for another partition forces that path)
    mixed = request()
    mixed.asks.add(allocationKey="g", applicationID="app", partitionName="gpu")
    split_parts, _ = split.split_allocation_request(mixed, "rm", ["default", "gpu"])
    assert split_parts["default"] == parts["default"]


def test_one_unknown_partition_in_a_request_leaves_the_fast_path_and_is_rejected():
    req = si.AllocationRequest(asks=[
        si.AllocationAsk(allocationKey="a", applicationID="app", partitionName="default"),
        si.AllocationAsk(allocationKey="b", applicationID="app", partitionName="nope")])
    parts, rejected = split.split_allocation_request(req, "rm", ["default"])
    assert [a.allocationKey for a in parts["default"].asks] == ["a"]
    assert [r.allocationKey for r in rejected.rejected] == ["b"]


def test_v18_allocations_for_one_partition_are_forwarded_whole_and_a_foreign_partition_splits_them():
    req = si.AllocationRequest(allocations=[
        si.Allocation(allocationKey="a", applicationID="app", partitionName=""),
        si.Allocation(allocationKey="b", applicationID="app", partitionName="default")])
    parts, rejected = split.split_allocation_request(req, "rm", ["default"])
    assert rejected is None and parts["default"] is req
    assert [a.partitionName for a in req.allocations] == ["default", "default"]
    req.allocations.add(allocationKey="c", applicationID="app", partitionName="nope")
    parts, rejected = split.split_allocation_request(req, "rm", ["default"])
    assert [a.allocationKey for a in parts["default"].allocations] == ["a", "b"]
    assert [r.allocationKey for r in rejected.rejectedAllocations] == ["c"]
