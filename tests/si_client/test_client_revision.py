"""SchedulerAPI's si_revision: the declaration at registration, the messages it takes, the replay
shape; against the fake scheduler (the registration is one schema in both revisions)."""

from __future__ import annotations

import grpc
import pytest

from common import si_pb2, si_v18_pb2
from si_client import RecoverySnapshot, SchedulerAPI, SchedulerError
from si_client.revision import dialect
from tests.si_client.rms import Recorder, fast_api


@pytest.mark.parametrize("revision, module", [("seed", si_pb2), ("v1.8", si_v18_pb2)])
def test_the_client_declares_its_revision_at_registration(fake, revision, module):
    api = fast_api(fake.address, si_revision=revision)
    api.register_resource_manager(si_pb2.RegisterResourceManagerRequest(rmID="rm-1"), Recorder())
    assert fake.registered["rm-1"].buildInfo["si.revision"] == revision
    assert api.si_revision == revision
    with pytest.raises(TypeError, match=f"takes NodeRequest of SI revision {revision}"):
        api.update_node(si_pb2.AllocationRequest())
    api.close()


def test_a_registration_declaring_another_revision_is_refused_before_it_is_sent(fake):
    api = fast_api(fake.address, si_revision="v1.8")
    with pytest.raises(SchedulerError) as info:
        api.register_resource_manager(si_v18_pb2.RegisterResourceManagerRequest(
            rmID="rm-1", buildInfo={"si.revision": "seed"}), Recorder())
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "buildInfo si.revision='seed' contradicts the client's si_revision='v1.8'" in str(info.value)
    assert fake.register_count == 0
    api.close()


def test_an_unknown_revision_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="si_revision='2.0' is not an SI revision Korral speaks: use one of seed, v1.8"):
        SchedulerAPI("127.0.0.1:1", si_revision="2.0")


def test_the_replay_sends_each_revisions_own_field():
    seed, v18 = dialect("seed"), dialect("v1.8")
    ask = si_pb2.AllocationAsk(allocationKey="a")
    alloc = si_v18_pb2.Allocation(allocationKey="b", nodeID="n1")
    snap = RecoverySnapshot(asks=[ask], allocations=[alloc])
    assert seed.replayed_allocations(snap) == ([ask], "allocations")
    assert v18.replayed_allocations(snap) == ([alloc], "asks")
    [req] = v18.allocation_requests([alloc], "rm-1")
    assert list(req.allocations) == [alloc] and req.rmID == "rm-1"
    [req] = seed.allocation_requests([ask], "rm-1")
    assert list(req.asks) == [ask]
