"""Bad input gets a clear error or rejection with a reason, and the stack keeps serving valid requests."""

from __future__ import annotations

import grpc
import pytest
import zmq

from common import si_pb2, si_pb2_grpc
from tests.e2e.sirm import SIRM, app, ask, node


@pytest.fixture
def rm(module_stack):
    client = SIRM(module_stack.si_address, "rm-bad")
    client.register()
    client.open()
    client.nodes(node("node-1", memory=1000, vcore=1000))
    client.wait_for("node", lambda r: r.accepted)
    client.apps(app("app-1"))
    client.wait_for("application", lambda r: r.accepted)
    yield client
    client.close()


def still_serving(rm: SIRM, key: str) -> None:
    rm.asks(ask(key, "app-1", memory=1, vcore=1))
    r = rm.wait_for("allocation", lambda r: any(a.allocationKey == key for a in r.new))
    assert r.new[0].nodeID == "node-1"


def test_register_with_empty_rm_id_is_invalid(module_stack):
    stub = si_pb2_grpc.SchedulerStub(grpc.insecure_channel(module_stack.si_address))
    with pytest.raises(grpc.RpcError) as info:
        stub.RegisterResourceManager(si_pb2.RegisterResourceManagerRequest(rmID=""), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rmID must not be empty" in info.value.details()


def test_register_with_invalid_config_names_the_fault(module_stack):
    stub = si_pb2_grpc.SchedulerStub(grpc.insecure_channel(module_stack.si_address))
    with pytest.raises(grpc.RpcError) as info:
        stub.RegisterResourceManager(si_pb2.RegisterResourceManagerRequest(
            rmID="rm-badconf", config="partitions:\n  - name: default\n    queues:\n      - name: root\n"
                                      "        bogus: 1\n"), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "registration of RM failed" in info.value.details() and "bogus" in info.value.details()


@pytest.mark.parametrize("method, request_type, name", [
    ("UpdateAllocation", si_pb2.AllocationRequest, "AllocationRequest"),
    ("UpdateApplication", si_pb2.ApplicationRequest, "ApplicationRequest"),
    ("UpdateNode", si_pb2.NodeRequest, "NodeRequest"),
])
def test_unknown_rm_id_ends_the_stream_with_a_reason(module_stack, rm, method, request_type, name):
    stub = si_pb2_grpc.SchedulerStub(grpc.insecure_channel(module_stack.si_address))
    s = SIRM.open_stream(getattr(stub, method), request_type(rmID="nobody"))
    with pytest.raises(grpc.RpcError) as info:
        s.next(timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == f'received {name}, but RmID="nobody" not registered'
    still_serving(rm, f"after-unknown-{name}")


def test_empty_rm_id_on_a_fresh_stream_is_refused(module_stack, rm):
    stub = si_pb2_grpc.SchedulerStub(grpc.insecure_channel(module_stack.si_address))
    s = SIRM.open_stream(stub.UpdateNode, si_pb2.NodeRequest(rmID=""))
    with pytest.raises(grpc.RpcError) as info:
        s.next(timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert 'RmID="" not registered' in info.value.details()
    still_serving(rm, "after-empty-rm")


def test_ask_for_unknown_partition_is_rejected(rm):
    rm.asks(ask("lost", "app-1", partition="nowhere", memory=1))
    r = rm.wait_for("allocation", lambda r: r.rejected)
    assert r.rejected[0].allocationKey == "lost"
    assert r.rejected[0].reason == "Failed to find partition nowhere, for application app-1 and allocation lost"
    still_serving(rm, "after-unknown-partition")


def test_ask_with_negative_quantity_is_rejected(rm):
    rm.asks(ask("negative", "app-1", memory=-5, vcore=1))
    r = rm.wait_for("allocation", lambda r: r.rejected)
    assert r.rejected[0].allocationKey == "negative"
    assert "app-1" in r.rejected[0].reason and "memory" in r.rejected[0].reason
    still_serving(rm, "after-negative")


@pytest.mark.parametrize("side", ["broker_frontend", "broker_backend"])
def test_malformed_envelopes_on_the_broker_are_dropped(module_stack, rm, side):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(getattr(module_stack, side))
    try:
        for frame in (b"\xc1not msgpack", b"\x93\x01\x02\x03", b""):
            sock.send(frame)
        sock.send_multipart([b"two", b"frames"])
    finally:
        sock.close(0)
        ctx.term()
    still_serving(rm, f"after-garbage-{side}")
