"""Every SI message, with every field set, encodes to exactly the spec's field numbers and wire types."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor as d

from common import si_pb2
from tests.wire.test_si_descriptor import SPEC_MESSAGES, _ours_message

_WIRE_TYPE = {"string": 2, "bool": 0, "int32": 0, "int64": 0}


def _fill(msg) -> None:
    """Set every field of msg to a non-default value (sub-messages filled recursively, one level of maps)."""
    for f in msg.DESCRIPTOR.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            m = getattr(msg, f.name)
            if value_field.message_type is not None:
                _fill(m["k"])
            else:
                m["k"] = "v"
        elif f.message_type is not None:
            sub = getattr(msg, f.name).add() if f.is_repeated else getattr(msg, f.name)
            _fill(sub)
        elif f.is_repeated:
            getattr(msg, f.name).append("x")
        elif f.enum_type is not None:
            setattr(msg, f.name, f.enum_type.values[-1].number)
        elif f.type == d.FieldDescriptor.TYPE_BOOL:
            setattr(msg, f.name, True)
        elif f.type == d.FieldDescriptor.TYPE_STRING:
            setattr(msg, f.name, "s")
        else:
            setattr(msg, f.name, -7)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        result |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return result, i
        shift += 7


def _top_level_tags(buf: bytes) -> set[tuple[int, int]]:
    """(field number, wire type) of each top-level field in an encoded message."""
    tags, i = set(), 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        tags.add((number, wire))
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return tags


@pytest.mark.parametrize("message", sorted(SPEC_MESSAGES))
def test_encoded_field_numbers_match_spec(message):
    cls = getattr(si_pb2, message.split(".")[0])
    for part in message.split(".")[1:]:
        cls = getattr(cls, part)
    msg = cls()
    _fill(msg)
    encoded = msg.SerializeToString()
    expected = {(num, _WIRE_TYPE.get(t, 0 if _is_enum(message, name) else 2))
                for name, (num, t, _) in SPEC_MESSAGES[message].items()}
    assert _top_level_tags(encoded) == expected
    assert cls.FromString(encoded) == msg


def _is_enum(message: str, field: str) -> bool:
    return _ours_message(message).fields_by_name[field].enum_type is not None


def test_known_values_round_trip_through_wire_bytes():
    ask = si_pb2.AllocationAsk(allocationKey="k1", applicationID="app-1", partitionName="default",
                               maxAllocations=3, priority=5)
    ask.resourceAsk.resources["memory"].value = 10
    buf = ask.SerializeToString()
    assert buf.startswith(b"\x0a\x02k1\x12\x05app-1\x1a\x07default")  # fields 1, 2, 3 as strings
    assert b"\x28\x03" in buf and b"\x30\x05" in buf  # maxAllocations = 5:varint 3, priority = 6:varint 5
