"""Bad input gets a clear error or rejection with a reason, and the stack keeps serving valid requests."""

from __future__ import annotations

import grpc
import pytest
import zmq

from common import si_pb2, si_pb2_grpc
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node


@pytest.fixture
def rm(module_stack):
    with SIRM(module_stack.si_address, "rm-bad") as client:
        client.start(node("node-1", memory=1000, vcore=1000))
        client.apps(app("app-1"))
        client.wait_accepted("application", {"app-1"})
        yield client


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


def unregistered_rm_stream_end(address: str, rm_id: str, stream: str) -> grpc.RpcError:
    """How ``stream``, opened by an RM that never registered, ends."""
    stranger = SIRM(address, rm_id)
    try:
        stranger.open()
        with pytest.raises(grpc.RpcError) as info:
            stranger.next(stream, timeout=10)
        return info.value
    finally:
        stranger.close()


@pytest.mark.parametrize("stream, name", [
    ("allocation", "AllocationRequest"),
    ("application", "ApplicationRequest"),
    ("node", "NodeRequest"),
])
def test_unknown_rm_id_ends_the_stream_with_a_reason(module_stack, rm, stream, name):
    end = unregistered_rm_stream_end(module_stack.si_address, "nobody", stream)
    assert end.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert end.details() == f'received {name}, but RmID="nobody" not registered'
    still_serving(rm, f"after-unknown-{name}")


def test_empty_rm_id_on_a_fresh_stream_is_refused(module_stack, rm):
    end = unregistered_rm_stream_end(module_stack.si_address, "", "node")
    assert end.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert 'RmID="" not registered' in end.details()
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
