"""Garbage in either SI revision gets a clear answer naming the RM and the object, and what the
RM sent before it stays applied: undecodable bytes, requests mixing both revisions or
contradicting the RM's revision, unknown fields (ignored), missing keys (rejected)."""

from __future__ import annotations

import itertools

import grpc
import pytest

from common import si_pb2, si_v18_pb2 as si18
from tests.e2e.sirm import SIRM, V18
from tests.e2e.test_si_revisions import Collector, done
from tests.si_builders import app, ask, node, v18

_ids = itertools.count()


def _ready(rm, node_info, new_app):
    """``rm`` registered, with one node and app accepted; stopped after the test."""
    rm.register()
    rm.open()
    rm.report(nodes=(node_info,), apps=(new_app,))
    yield rm
    done(rm)


@pytest.fixture
def rm18(module_stack):
    yield from _ready(SIRM(module_stack.si_address, f"rm18-bad-{next(_ids)}", revision=V18),
                      v18.node("n1", memory=1000, vcore=1000), v18.app("app1"))


@pytest.fixture
def seed_rm(module_stack):
    yield from _ready(SIRM(module_stack.si_address, f"rm-seed-bad-{next(_ids)}"),
                      node("n1", memory=1000, vcore=1000), app("app1"))


def ended(rm: SIRM, stream: str = "allocation") -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        rm.next(stream)
    rm.close()
    return info.value


def allocates18(rm: SIRM, key: str) -> None:
    """The RM still schedules, on a fresh allocation stream (the raw one replaced its own)."""
    rm.reopen("allocation")
    rm.allocations(v18.ask(key, "app1", memory=1, vcore=1))
    col = Collector(rm).until(lambda c: any(a.allocationKey == key for a in c.new))
    assert not col.rejected


@pytest.mark.parametrize("frame, error", [
    (b"\xff\xff\xff", "Wire format was corrupt"),
    (b'"\x03\n\x01\xff', "String field had bad UTF-8"),
    (b" \x01", "field 4 (allocations) has wire type 0, which is not its type"),
], ids=["corrupt", "bad utf-8 in a key", "a list sent as a number"])
def test_bytes_that_do_not_parse_end_the_stream_naming_the_rm(module_stack, rm18, frame, error):
    rm18.allocations(v18.ask("before", "app1", memory=1, vcore=1))
    Collector(rm18).until(lambda c: c.new)
    info = ended(rm18.raw("allocation", frame))
    assert info.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.details() == (f"RM {rm18.rm_id}: AllocationRequest of {len(frame)} bytes does not parse as "
                              f"si.v1.AllocationRequest of either SI revision: {error}; the stream ends, what it "
                              "sent before was applied")
    allocates18(rm18, "after")  # its own stream, and the allocation made before, are untouched


def test_a_registration_that_does_not_parse_is_invalid(module_stack):
    call = grpc.insecure_channel(module_stack.si_address).unary_unary(
        "/si.v1.Scheduler/RegisterResourceManager", request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as info:
        call(b"\x0a\x05rm", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == ("registration of RM failed: RegisterResourceManagerRequest of 4 bytes does not "
                                    "parse as si.v1.RegisterResourceManagerRequest of either SI revision: Wire "
                                    "format was corrupt")


def test_an_unknown_declared_revision_is_refused_naming_key_and_values(module_stack):
    with SIRM(module_stack.si_address, "rm-v2", revision=V18) as rm, pytest.raises(grpc.RpcError) as info:
        rm.register(timeout=10, build_info={"si.revision": "2.0"})
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "RM rm-v2: buildInfo si.revision='2.0' is not an SI revision Korral speaks: use one of seed, v1.8" in \
        info.value.details()


def test_a_request_mixing_both_revisions_is_refused_and_nothing_of_it_applied(module_stack, rm18):
    seed_part = si_pb2.AllocationRequest(asks=[ask("mixed-seed", "app1", memory=1, vcore=1)])
    v18_part = si18.AllocationRequest(allocations=[v18.ask("mixed-v18", "app1", memory=1, vcore=1)])
    frame = seed_part.SerializeToString() + v18_part.SerializeToString()  # one message with both fields
    info = ended(rm18.raw("allocation", frame))
    assert info.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.details() == (f"RM {rm18.rm_id}: AllocationRequest mixes fields of both SI revisions: "
                              "AllocationRequest.asks (seed) and AllocationRequest.allocations (v1.8); the request "
                              "was not applied")
    rm18.reopen("allocation")
    rm18.allocations(v18.ask("after-mixed", "app1", memory=1, vcore=1))
    col = Collector(rm18).until(lambda c: c.new)
    assert [a.allocationKey for a in col.new] == ["after-mixed"]  # neither part of the mixed request


def test_seed_fields_from_an_rm_declared_v18_end_that_stream(module_stack):
    rm = SIRM(module_stack.si_address, f"rm18-declared-{next(_ids)}", revision=V18)
    rm.register(build_info={"si.revision": "v1.8"})
    rm.open()
    try:
        s = SIRM(module_stack.si_address, rm.rm_id)  # a node stream of the seed's stubs, same rmID
        s.reopen("node")
        s.nodes(node("n1", memory=10, vcore=10))
        assert [n.nodeID for n in s.next("node").accepted] == ["n1"]  # nothing decisive in it
        occupied = node("n2", memory=10, vcore=10)
        occupied.occupiedResource.resources["memory"].value = 1
        s.nodes(occupied)
        with pytest.raises(grpc.RpcError) as info:
            s.next("node")
        s.close()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == (
            f"RM {rm.rm_id} speaks SI revision v1.8 (declared at registration (buildInfo si.revision)), but this "
            "NodeRequest carries NodeInfo.occupiedResource of SI revision seed; the request was not applied "
            "(re-register to switch revision)")
    finally:
        done(rm)


def test_v18_fields_from_a_seed_rm_end_that_stream(module_stack, seed_rm):
    seed_rm.asks(ask("s-1", "app1", memory=1, vcore=1))  # decides: seed
    assert seed_rm.wait_for("allocation", lambda r: r.new).new[0].UUID
    s = SIRM(module_stack.si_address, seed_rm.rm_id, revision=V18)  # a node stream of v1.8's stubs
    s.reopen("node")
    s.nodes(v18.node("d1", action=si18.NodeInfo.CREATE_DRAIN, memory=1, vcore=None))
    with pytest.raises(grpc.RpcError) as info:
        s.next("node")
    s.close()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "speaks SI revision seed (decided by AllocationRequest.asks), but this NodeRequest carries " \
           "NodeInfo.action CREATE_DRAIN of SI revision v1.8" in info.value.details()
    seed_rm.asks(ask("s-2", "app1", memory=1, vcore=1))  # its allocation stream goes on
    assert seed_rm.wait_for("allocation", lambda r: r.new).new[0].allocationKey == "s-2"


@pytest.mark.parametrize("revision", ["seed", "v1.8"])
def test_unknown_fields_are_ignored(module_stack, rm18, seed_rm, revision):
    extra = b"\xf8\x06\x2a"  # field 111, varint 42: no revision has it
    if revision == "v1.8":
        req = si18.AllocationRequest(rmID=rm18.rm_id, allocations=[v18.ask("u-1", "app1", memory=1, vcore=1)])
        call = rm18.raw("allocation", req.SerializeToString() + extra)
    else:
        req = si_pb2.AllocationRequest(rmID=seed_rm.rm_id, asks=[ask("u-1", "app1", memory=1, vcore=1)])
        call = seed_rm.raw("allocation", req.SerializeToString() + extra)
    got = si_pb2.AllocationResponse.FromString(call.next("allocation"))
    assert [a.allocationKey for a in got.new] == ["u-1"]
    call.close()


def test_missing_keys_are_rejected_naming_the_object(module_stack, rm18):
    rm18.allocations(v18.ask("", "app1", memory=1, vcore=1), v18.ask("no-app", "", memory=1, vcore=1))
    col = Collector(rm18).until(lambda c: len(c.rejected) == 2)
    assert [r.reason for r in col.rejected] == ["allocation of application app1 has no allocationKey",
                                                "allocation no-app has no applicationID"]
    rm18.nodes(v18.node("", memory=1, vcore=1))
    r = rm18.wait_for("node", lambda r: r.rejected)
    assert r.rejected[0].reason == "failure while adding new node, node rejected with error: node ID must not be empty"
    rm18.apps(v18.app(""))
    r = rm18.wait_for("application", lambda r: r.rejected)
    assert r.rejected[0].applicationID == "" and r.rejected[0].reason
    allocates18(rm18, "after-missing")
