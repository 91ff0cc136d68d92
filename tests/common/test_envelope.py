"""The envelope codec: round trip, and every malformed frame is one EnvelopeError holding the bytes."""

from __future__ import annotations

import msgpack
import pytest

from common.envelope import VERSION, Envelope, EnvelopeError, Kind, decode, encode


def test_round_trip_with_bytes_body():
    env = Envelope(Kind.SI_ALLOCATION, "rm-1", "default", 3, 42, b"\x00\x01protobuf")
    assert decode(encode(env)) == env


def test_round_trip_with_dict_body():
    env = Envelope(Kind.RM_REGISTER, "rm-1", body={"partitions": ["a", "b"]})
    assert decode(encode(env)) == env


@pytest.mark.parametrize("raw, reason", [
    (b"\xc1garbage", "not msgpack"),
    (msgpack.packb({"kind": "x"}), "7-element array"),
    (msgpack.packb([VERSION + 1, "heartbeat", "", "", 0, 0, None]), "unsupported version"),
    (msgpack.packb([VERSION, "no.such.kind", "", "", 0, 0, None]), "unknown kind"),
    (msgpack.packb([VERSION, "heartbeat", 5, "", 0, 0, None]), "must be strings"),
    (msgpack.packb([VERSION, "heartbeat", "", "", -1, 0, None]), "non-negative"),
    (b"", "not msgpack"),
], ids=["not-msgpack", "map", "version", "kind", "rm-not-string", "negative-epoch", "empty"])
def test_malformed_frames_raise_envelope_error(raw, reason):
    with pytest.raises(EnvelopeError) as info:
        decode(raw)
    assert reason in str(info.value) and info.value.raw == raw


def test_batch_of_10000_asks_is_one_envelope_and_fast():
    from common import si_pb2

    req = si_pb2.AllocationRequest(rmID="rm")
    for i in range(10_000):
        ask = req.asks.add(allocationKey=f"a{i}", applicationID="app", maxAllocations=1)
        ask.resourceAsk.resources["memory"].value = 10
    env = Envelope(Kind.SI_ALLOCATION, "rm", "default", 1, 1, req.SerializeToString())
    back = decode(encode(env))
    assert len(si_pb2.AllocationRequest.FromString(back.body).asks) == 10_000
