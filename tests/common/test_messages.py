"""Control envelope bodies: each kind's class round-trips through the codec, reads what the
processes send today, and a bad body is one EnvelopeError, dropped by the loops like a bad frame."""

from __future__ import annotations

import pytest

from common.envelope import Envelope, EnvelopeError, Kind, decode, decode_for, decode_typed, dispatch, encode
from common.messages import (BODIES, QUERIES, AppsQuery, BadQuery, ConfigUpdate, DumpQuery, EventsQuery, Heartbeat,
                             NodesQuery, NotFound, PartitionLoaded, PartitionLost, PartitionOwned, PartitionQuery,
                             PartitionRemove, ProxyHello, Query, Reply, RMPartitions, RMUnregister, Status,
                             Unroutable, UsageQuery, WorkerReady, with_request_id)

BODY_CASES = [
    (Kind.PROXY_HELLO, ProxyHello("p1", "h", 12, {"rm": ("default", "gpu")})),
    (Kind.WORKER_READY, WorkerReady("w1", "h", 7, ("rm", "gpu"), ("rm", "default", 3))),
    (Kind.HEARTBEAT, Heartbeat(reannounce=True)),
    (Kind.HEARTBEAT, Heartbeat(rms={"rm": {"state": "Running", "partitions": ["default"]}})),
    (Kind.STATUS, Status({"workers": [], "replyToAsker": True})),
    (Kind.RM_REGISTER, RMPartitions(("default", "gpu"))),
    (Kind.RM_PARTITIONS, RMPartitions(("default",))),
    (Kind.RM_UNREGISTER, RMUnregister("voluntary shutdown")),
    (Kind.PARTITION_LOADED, PartitionLoaded("cannot load")),
    (Kind.PARTITION_OWNED, PartitionOwned("w1", None)),
    (Kind.PARTITION_LOST, PartitionLost("its worker w1 is gone", "w1")),
    (Kind.CONFIG_UPDATE, ConfigUpdate("partitions: []", 5)),
    (Kind.PARTITION_REMOVE, PartitionRemove(6)),
    (Kind.QUERY, NodesQuery(7, offset=0)),
    (Kind.QUERY, AppsQuery(8, queue="root.a", states=("running",), limit=5)),
    (Kind.QUERY, EventsQuery(9, last=0)),
    (Kind.QUERY, DumpQuery(10, health=False)),
    (Kind.QUERY_RESULT, Reply(7, {"items": []})),
    (Kind.QUERY_RESULT, Reply(7, not_found=NotFound("Application not found", "application", "ghost"))),
    (Kind.QUERY_RESULT, Reply(8, error="partition moved", stale=True)),
    (Kind.CONFIG_RESULT, Reply(9, error=None)),
    (Kind.UNROUTABLE, Unroutable("no worker", "si.node", b"payload")),
]


@pytest.mark.parametrize("kind, body", BODY_CASES, ids=lambda x: getattr(x, "value", type(x).__name__))
def test_each_body_survives_the_wire_as_its_class(kind, body):
    raw = encode(Envelope(kind, "rm", "default", 1, 0, body.wire()))
    assert decode_typed(raw).body == body
    assert type(body).decode(decode(raw).body) == body  # what a handler does with a plain map


def test_every_control_kind_has_a_body_class_and_si_traffic_has_none():
    si = {Kind.SI_ALLOCATION, Kind.SI_APPLICATION, Kind.SI_NODE, Kind.SI_ALLOCATION_RESPONSE,
          Kind.SI_APPLICATION_RESPONSE, Kind.SI_NODE_RESPONSE, Kind.EVENTS, Kind.SCHEDULING_STATES}
    no_body = {Kind.PARTITION_ASSIGN, Kind.PARTITION_RELEASE}
    assert set(BODIES) == set(Kind) - si - no_body
    env = Envelope(Kind.SI_NODE, "rm", "default", 1, 1, b"\x00protobuf")
    assert decode_typed(encode(env)) == env  # SI bodies stay bytes


@pytest.mark.parametrize("kind, sent, expected", [
    (Kind.WORKER_READY, {"name": "w1", "host": "h", "pid": 3, "pin": None,
                         "owns": {"rm_id": "rm", "partition": "default", "epoch": 4}},
     WorkerReady("w1", "h", 3, None, ("rm", "default", 4))),
    (Kind.WORKER_READY, {"name": "w1", "pin": "no-slash"}, WorkerReady("w1")),
    (Kind.PROXY_HELLO, {"rms": ["rm-a"]}, ProxyHello(rms={"rm-a": None})),
    (Kind.PROXY_HELLO, {}, ProxyHello()),
    (Kind.HEARTBEAT, None, Heartbeat()),
    (Kind.STATUS, None, Status({})),
    (Kind.PARTITION_LOADED, {}, PartitionLoaded(None)),
    (Kind.PARTITION_LOST, {}, PartitionLost("its worker is gone")),
    (Kind.CONFIG_RESULT, {"id": 3, "error": None}, Reply(3)),
    (Kind.QUERY_RESULT, {"id": 3, "packed": b"\x90"}, Reply(3, packed=b"\x90")),
    (Kind.QUERY, {"id": 3, "what": "usage", "kind": "user", "name": "bob"}, UsageQuery(3, kind="user", name="bob")),
    (Kind.QUERY, {"id": 4, "what": "planets"}, BadQuery(4, "unknown query 'planets'; known: " + ", ".join(sorted(QUERIES)))),
    (Kind.QUERY, {"id": 5, "what": "nodes", "limit": "x"}, BadQuery(5, "bad query 'nodes': 'limit' must be int, got str")),
], ids=["worker-announce", "pin-without-slash", "hello-rmids-only", "hello-empty", "heartbeat-empty",
        "status-query", "loaded-ok", "lost-default-reason", "config-ok", "packed-answer", "usage-query",
        "unknown-query", "query-param-of-the-wrong-type"])
def test_bodies_as_the_processes_send_them_today(kind, sent, expected):
    assert decode_typed(encode(Envelope(kind, body=sent))).body == expected


@pytest.mark.parametrize("kind, body, reason", [
    (Kind.WORKER_READY, {"pid": "12"}, "'pid' must be int"),
    (Kind.WORKER_READY, {"owns": {"epoch": "x"}}, "'epoch' must be int"),
    (Kind.PROXY_HELLO, {"rms": {"rm": [1]}}, "list of strings"),
    (Kind.RM_REGISTER, {"partitions": "default"}, "'partitions' must be list"),
    (Kind.PARTITION_OWNED, {"worker": 5}, "'worker' must be str"),
    (Kind.CONFIG_UPDATE, {"config": b"yaml", "id": 1}, "'config' must be str"),
    (Kind.QUERY, {"id": True, "what": "nodes"}, "'id' must be int"),
    (Kind.QUERY_RESULT, [1, 2], "a map expected"),
    (Kind.HEARTBEAT, b"beat", "a map expected"),
], ids=["pid-not-int", "epoch-not-int", "partitions-not-strings", "partitions-not-list", "worker-not-str",
        "config-bytes", "id-bool", "answer-list", "heartbeat-bytes"])
def test_a_bad_body_is_one_envelope_error_holding_the_frame(kind, body, reason):
    raw = encode(Envelope(kind, "rm", "default", 1, 0, body))
    decode(raw)  # the frame itself is fine
    with pytest.raises(EnvelopeError) as info:
        decode_typed(raw)
    assert reason in str(info.value) and info.value.raw == raw


def test_a_loop_drops_a_bad_body_like_a_bad_frame():
    handlers = {Kind.PARTITION_OWNED: object()}
    assert decode_for(encode(Envelope(Kind.PARTITION_OWNED, body={"worker": 1})), handlers, "test") is None
    env, _ = decode_for(encode(Envelope(Kind.PARTITION_OWNED, body={"worker": "w"})), handlers, "test")
    assert env.body == PartitionOwned("w")


def test_dispatch_runs_the_handler_on_its_owner_or_says_the_frame_was_dropped():
    seen = []
    handlers = {Kind.PARTITION_OWNED: lambda owner, env: seen.append((owner, env.body))}
    assert dispatch("loop", encode(Envelope(Kind.PARTITION_OWNED, body={"worker": "w"})), handlers, "test")
    assert seen == [("loop", PartitionOwned("w"))]
    assert not dispatch("loop", encode(Envelope(Kind.PARTITION_OWNED, body={"worker": 1})), handlers, "test")
    assert not dispatch("loop", encode(Envelope(Kind.HEARTBEAT)), handlers, "test")  # not for it
    assert len(seen) == 1


def test_a_request_takes_its_id_and_the_broker_reads_it_from_the_header():
    from common.envelope import decode_header

    for body in (ConfigUpdate("x"), PartitionRemove(), PartitionQuery()):
        raw = encode(Envelope(Kind.QUERY, "rm", "default", 1, 0, with_request_id(body, 1 << 50).wire()))
        assert decode_header(raw).request_id == 1 << 50 == decode_typed(raw).request_id


def test_every_query_class_is_named_by_its_what_and_decodes_as_itself():
    for what, cls in QUERIES.items():
        query = cls(1)
        assert query.wire()["what"] == what and Query.decode(query.wire()) == query
    with pytest.raises(EnvelopeError, match="'what' must be 'nodes'"):
        NodesQuery.decode({"what": "partition"})
