"""Which SI revision an RM speaks: declared, decided by its first decisive field, refused when
mixed or contradicting; the worker is told once per partition epoch, before the request."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from common import si_internal_pb2 as si
from common.envelope import Kind
from common.messages import SiRevision
from common.si_revision import Revision, declared_revision
from rmproxy.errors import RegistrationError
from rmproxy.revision import RevisionError, decisive_fields, settle
from rmproxy.rms import RMSession
from tests.rmproxy.test_proxy_lifecycle import make_proxy

ASK = si.AllocationAsk(allocationKey="k", applicationID="app")
ALLOC = si.Allocation(allocationKey="k", applicationID="app")


def _release(**fields) -> si.AllocationReleasesRequest:
    return si.AllocationReleasesRequest(allocationsToRelease=[si.AllocationRelease(applicationID="app", **fields)])


@pytest.mark.parametrize("stream, request_, seed, v18", [
    ("allocation", si.AllocationRequest(asks=[ASK]), ["AllocationRequest.asks"], []),
    ("allocation", si.AllocationRequest(allocations=[ALLOC]), [], ["AllocationRequest.allocations"]),
    ("allocation", si.AllocationRequest(releases=si.AllocationReleasesRequest(allocationAsksToRelease=[
        si.AllocationAskRelease(allocationKey="k")])), ["AllocationReleasesRequest.allocationAsksToRelease"], []),
    ("allocation", si.AllocationRequest(releases=_release(UUID="u")), ["AllocationRelease.UUID"], []),
    ("allocation", si.AllocationRequest(releases=_release(allocationKey="k")), [], []),
    ("allocation", si.AllocationRequest(rmID="rm"), [], []),
    ("node", si.NodeRequest(nodes=[si.NodeInfo(nodeID="n", occupiedResource=si.Resource())]),
     ["NodeInfo.occupiedResource"], []),
    ("node", si.NodeRequest(nodes=[si.NodeInfo(nodeID="n", existingAllocations=[ALLOC])]),
     ["NodeInfo.existingAllocations"], []),
    ("node", si.NodeRequest(nodes=[si.NodeInfo(nodeID="n", action=si.NodeInfo.CREATE_DRAIN)]),
     [], ["NodeInfo.action CREATE_DRAIN"]),
    ("node", si.NodeRequest(nodes=[si.NodeInfo(nodeID="n", action=si.NodeInfo.CREATE, attributes={"ready": "true"})]),
     [], []),
    ("application", si.ApplicationRequest(new=[si.AddApplicationRequest(applicationID="app")]), [], []),
], ids=["asks", "allocations", "ask releases", "release by UUID", "release by key only (ambiguous)",
        "rmID only", "occupiedResource", "existingAllocations", "CREATE_DRAIN", "plain node", "application"])
def test_decisive_fields(stream, request_, seed, v18):
    assert decisive_fields(stream, request_) == (seed, v18)


def test_the_first_decisive_field_decides_and_later_ones_must_agree():
    rm = RMSession("rm-1", ["default"])
    assert settle(rm, "node", si.NodeRequest(nodes=[si.NodeInfo(nodeID="n")])) is None and rm.revision is None
    assert settle(rm, "allocation", si.AllocationRequest(allocations=[ALLOC])) is Revision.V18
    assert rm.revision_why == "decided by AllocationRequest.allocations"
    assert settle(rm, "allocation", si.AllocationRequest(allocations=[ALLOC])) is None
    with pytest.raises(RevisionError) as info:
        settle(rm, "allocation", si.AllocationRequest(releases=_release(UUID="u")))
    assert str(info.value) == (
        "RM rm-1 speaks SI revision v1.8 (decided by AllocationRequest.allocations), but this AllocationRequest "
        "carries AllocationRelease.UUID of SI revision seed; the request was not applied (re-register to switch "
        "revision)")


def test_a_request_mixing_both_revisions_is_refused_naming_the_fields():
    rm = RMSession("rm-1", ["default"])
    with pytest.raises(RevisionError, match=r"RM rm-1: AllocationRequest mixes fields of both SI revisions: "
                                            r"AllocationRequest.asks \(seed\) and AllocationRequest.allocations "
                                            r"\(v1.8\); the request was not applied"):
        settle(rm, "allocation", si.AllocationRequest(asks=[ASK], allocations=[ALLOC]))
    assert rm.revision is None


@pytest.mark.parametrize("build_info, expected", [
    ({}, None), ({"si.revision": ""}, None), ({"si.revision": "seed"}, Revision.SEED),
    ({"si.revision": "v1.8"}, Revision.V18)])
def test_declared_revision(build_info, expected):
    assert declared_revision(build_info) is expected


def test_an_unknown_declared_revision_is_refused_at_registration_naming_key_and_values():
    p, sent = make_proxy()
    req = si.RegisterResourceManagerRequest(rmID="rm-1", buildInfo={"si.revision": "v2"})
    with pytest.raises(RegistrationError) as info:
        asyncio.run(p.registry.register(req))
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert str(info.value).startswith("registration of RM failed: RM rm-1: buildInfo si.revision='v2' is not "
                                      "an SI revision Korral speaks: use one of seed, v1.8")
    assert sent == [] and "rm-1" not in p.registry.rms


def test_the_worker_is_told_once_per_epoch_before_the_first_request_that_needs_it():
    p, sent = make_proxy()
    rm = RMSession("rm-1", ["default", "gpu"], epochs={"default": 3, "gpu": 4})
    p.registry.rms["rm-1"] = rm
    p.router.request("node", rm, si.NodeRequest(nodes=[si.NodeInfo(nodeID="n")]))
    assert [e.kind for e in sent] == [Kind.SI_NODE]  # undecided: nothing to tell
    p.router.request("allocation", rm, si.AllocationRequest(allocations=[ALLOC]))
    assert [(e.kind, e.partition, e.epoch) for e in sent[1:]] == [
        (Kind.SI_REVISION, "default", 3), (Kind.SI_REVISION, "gpu", 4), (Kind.SI_ALLOCATION, "default", 3)]
    assert SiRevision.decode(sent[1].body).revision == "v1.8"
    assert [e.seq for e in sent if e.partition == "default"] == [1, 2, 3]  # in the request sequence
    p.router.request("allocation", rm, si.AllocationRequest(allocations=[ALLOC]))
    assert sent[-1].kind is Kind.SI_ALLOCATION and sent[-2].kind is Kind.SI_ALLOCATION  # asks as rows (test_rows.py)
    rm.epochs["default"] = 5  # a new owner: told again
    p.router.request("allocation", rm, si.AllocationRequest(allocations=[ALLOC]))
    assert [(e.kind, e.epoch) for e in sent[-2:]] == [(Kind.SI_REVISION, 5), (Kind.SI_ALLOCATION, 5)]


def test_a_refused_request_sends_nothing():
    p, sent = make_proxy()
    rm = RMSession("rm-1", ["default"], epochs={"default": 1}, revision=Revision.SEED, revision_why="declared")
    p.registry.rms["rm-1"] = rm
    with pytest.raises(RevisionError):
        p.router.request("node", rm, si.NodeRequest(nodes=[si.NodeInfo(nodeID="n", action=si.NodeInfo.CREATE_DRAIN)]))
    assert sent == []
