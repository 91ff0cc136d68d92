"""Header-only decoding (what the broker routes by): the same header checks as ``decode``, the
body left undecoded and the frame kept, and the body's request id found without building it."""

from __future__ import annotations

import tracemalloc

import msgpack
import pytest
import zmq

from common.envelope import (VERSION, Envelope, EnvelopeError, Kind, RawEnvelope, decode, decode_header,
                             encode)

ENVELOPES = [
    Envelope(Kind.SI_ALLOCATION, "rm-1", "default", 3, 42, b"\x00\x01protobuf"),
    Envelope(Kind.QUERY, "rm-1", "default", 3, 0, {"what": "dump", "health": False, "id": 1 << 60}),
    Envelope(Kind.QUERY_RESULT, "rm-1", "default", 3, 0, {"id": 7, "packed": b"\x90"}),
    Envelope(Kind.CONFIG_RESULT, "rm-1", "gpu", 9, 5, {"id": 8, "error": None}),
    Envelope(Kind.EVENTS, "rm-\u00e9", "p\u00e4rt", 1, 0, [b"a", b"b"]),
    Envelope(Kind.HEARTBEAT),
]


@pytest.mark.parametrize("env", ENVELOPES, ids=lambda e: e.kind.value)
def test_header_matches_the_full_decode_and_keeps_the_frame(env):
    raw = encode(env)
    head = decode_header(raw)
    assert isinstance(head, RawEnvelope)
    assert (head.kind, head.rm_id, head.partition, head.epoch, head.seq) == \
        (env.kind, env.rm_id, env.partition, env.epoch, env.seq)
    assert head.request_id == env.request_id
    assert head.frame is raw and head.decoded() == env == decode(raw)


@pytest.mark.parametrize("body, qid", [
    ({"id": 5, "packed": b"x" * 100_000}, 5),  # the answer's shape: "id" first
    ({"packed": b"x" * 100_000, "id": 6}, 6),  # "id" behind a value longer than the peek
    ({"config": "y" * 10_000, "id": 7}, 7),  # a config update: "id" last
    ({"what": "nodes"}, None),
    ({"id": "7"}, None),
    ({"id": True}, None),
    ({1: "int key", "id": 9}, 9),
    (b"protobuf", None),
    ([1, 2], None),
    (None, None),
])
def test_request_id_is_read_without_decoding_the_body(body, qid):
    raw = encode(Envelope(Kind.QUERY_RESULT, "rm", "default", 1, 0, body))
    assert decode_header(raw).request_id == qid == decode(raw).request_id


def test_a_header_longer_than_the_peek_is_read_whole():
    env = Envelope(Kind.SI_NODE, "r" * 10_000, "p" * 5_000, 2, 3, b"body")
    head = decode_header(encode(env))
    assert (head.rm_id, head.partition, head.epoch, head.seq) == (env.rm_id, env.partition, 2, 3)


def test_a_zeromq_frame_and_a_memoryview_are_read_in_place():
    raw = encode(ENVELOPES[2])
    frame = zmq.Frame(raw)
    assert decode_header(frame).frame is frame and decode_header(frame).request_id == 7
    assert decode(frame) == decode(memoryview(raw)) == ENVELOPES[2]


def test_a_large_body_is_neither_copied_nor_built():
    raw = encode(Envelope(Kind.QUERY_RESULT, "rm", "default", 1, 0, {"id": 3, "packed": b"x" * 40_000_000}))
    tracemalloc.start()
    try:
        head = decode_header(raw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert head.request_id == 3 and head.frame is raw
    assert peak < 1_000_000, f"decode_header allocated {peak} bytes for a 40 MB frame"


@pytest.mark.parametrize("raw, reason", [
    (b"\xc1garbage", "expected a 7-element array"),
    (msgpack.packb({"kind": "x"}), "7-element array"),
    (msgpack.packb([VERSION, "heartbeat", "", "", 0, 0]), "7-element array"),
    (msgpack.packb([VERSION + 1, "heartbeat", "", "", 0, 0, None]), "unsupported version"),
    (msgpack.packb([VERSION, "no.such.kind", "", "", 0, 0, None]), "unknown kind"),
    (msgpack.packb([VERSION, "heartbeat", 5, "", 0, 0, None]), "must be strings"),
    (msgpack.packb([VERSION, "heartbeat", "", "", -1, 0, None]), "non-negative"),
    (msgpack.packb([VERSION, "heartbeat", "", "", 0, 0, None])[:-1], "body is missing"),
    (b"\x97\x01\xa7si.n", "not msgpack"),
    (b"", "not msgpack"),
], ids=["not-msgpack", "map", "six-fields", "version", "kind", "rm-not-string", "negative-epoch",
        "no-body", "truncated-header", "empty"])
def test_a_bad_header_is_an_envelope_error_holding_the_frame(raw, reason):
    with pytest.raises(EnvelopeError) as info:
        decode_header(raw)
    assert reason in str(info.value) and info.value.raw == raw


def _with_body(body: bytes) -> bytes:
    """A 7-element envelope array whose last element (the body) is ``body``, as given."""
    return b"\x97" + msgpack.packb([VERSION, "si.node", "rm", "default", 1, 1])[1:] + body


@pytest.mark.parametrize("body", [b"\xc1", b"\xc6\x00\x00\xff\xff", b"\xa1", b"\x90\x01"],
                         ids=["reserved", "cut-bin", "cut-str", "trailing-bytes"])
def test_a_valid_header_with_a_bad_body_passes_here_and_fails_the_full_decode(body):
    raw = _with_body(body)
    head = decode_header(raw)
    assert head.kind is Kind.SI_NODE and head.request_id is None
    with pytest.raises(EnvelopeError):
        decode(raw)


@pytest.mark.parametrize("body", [b"\x81\xa2id", b"\x82\xa1a\xc1\xa2id\x01"], ids=["cut-map", "reserved-in-map"])
def test_a_map_body_unreadable_up_to_its_id_is_refused(body):
    with pytest.raises(EnvelopeError):
        decode_header(_with_body(body))
