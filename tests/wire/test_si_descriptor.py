"""common/si.proto against the spec: every message, enum, field name, number, type and label.

The spec's protobuf blocks are kept verbatim in spec_blocks.proto.txt and parsed
here independently of protoc, so a drift in either direction fails.
"""

from __future__ import annotations

import pathlib
import re

import pytest
from google.protobuf import descriptor as d

from common import si_pb2

SPEC = (pathlib.Path(__file__).parent / "spec_blocks.proto.txt").read_text()

_SCALARS = {
    "string": d.FieldDescriptor.TYPE_STRING, "bool": d.FieldDescriptor.TYPE_BOOL,
    "int32": d.FieldDescriptor.TYPE_INT32, "int64": d.FieldDescriptor.TYPE_INT64,
}


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse_spec(text: str):
    """-> (messages {full name: {field: (number, type, label)}}, enums {full name: {value: number}})."""
    tokens = re.findall(r"[A-Za-z_][\w.]*|<[^>]*>|\d+|[{}=;]", _strip_comments(text))
    messages: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    stack: list[tuple[str, str]] = []  # (kind, full name)
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("message", "enum", "service", "extend") and i + 2 < len(tokens) and tokens[i + 2] == "{":
            prefix = stack[-1][1] + "." if stack and stack[-1][0] == "message" else ""
            name = prefix + tokens[i + 1]
            stack.append((t, name))
            if t == "message":
                messages[name] = {}
            elif t == "enum":
                enums[name] = {}
            i += 3
            continue
        if t == "{":  # rpc bodies and other blocks
            stack.append(("block", ""))
            i += 1
            continue
        if t == "}":
            stack.pop()
            i += 1
            continue
        if t in ("reserved", "option", "syntax", "package", "import"):
            i = tokens.index(";", i) + 1
            continue
        if stack and stack[-1][0] == "message":
            label = "repeated" if t == "repeated" else "optional"
            j = i + 1 if t == "repeated" else i
            if tokens[j] == "map":  # map<k, v> name = N;
                ftype, fname, num = "map" + tokens[j + 1], tokens[j + 2], tokens[j + 4]
                label = "repeated"
                i = j + 6
            else:
                ftype, fname, num = tokens[j], tokens[j + 1], tokens[j + 3]
                i = j + 5
            messages[stack[-1][1]][fname] = (int(num), ftype.replace(" ", ""), label)
            continue
        if stack and stack[-1][0] == "enum" and i + 3 < len(tokens) and tokens[i + 1] == "=":
            enums[stack[-1][1]][t] = int(tokens[i + 2])
            i += 4
            continue
        i += 1
    return messages, enums


SPEC_MESSAGES, SPEC_ENUMS = parse_spec(SPEC)


def _ours_message(name: str) -> d.Descriptor:
    top, *rest = name.split(".")
    desc = si_pb2.DESCRIPTOR.message_types_by_name[top]
    for part in rest:
        desc = desc.nested_types_by_name[part]
    return desc


def test_spec_parsed_completely():
    assert len(SPEC_MESSAGES) == 30  # every `message X {` of the spec, nested ones included
    assert "NodeInfo.ActionFromRM" in SPEC_ENUMS and "TerminationType" in SPEC_ENUMS


def test_package_service_and_methods():
    assert si_pb2.DESCRIPTOR.package == "si.v1"
    svc = si_pb2.DESCRIPTOR.services_by_name["Scheduler"]
    methods = {m.name: (m.input_type.name, m.output_type.name, m.client_streaming, m.server_streaming)
               for m in svc.methods}
    assert methods == {
        "RegisterResourceManager": ("RegisterResourceManagerRequest", "RegisterResourceManagerResponse", False, False),
        "UpdateAllocation": ("AllocationRequest", "AllocationResponse", True, True),
        "UpdateApplication": ("ApplicationRequest", "ApplicationResponse", True, True),
        "UpdateNode": ("NodeRequest", "NodeResponse", True, True),
    }


def test_si_secret_extension():
    ext = si_pb2.DESCRIPTOR.extensions_by_name["si_secret"]
    assert ext.number == 1059 and ext.containing_type.full_name == "google.protobuf.FieldOptions"


def test_no_message_beyond_the_spec():
    ours = set()

    def walk(desc, prefix=""):
        for m in desc.nested_types if prefix else si_pb2.DESCRIPTOR.message_types_by_name.values():
            if m.GetOptions().map_entry:
                continue
            ours.add(prefix + m.name)
            walk(m, prefix + m.name + ".")

    walk(None)
    assert ours == set(SPEC_MESSAGES)


@pytest.mark.parametrize("message", sorted(SPEC_MESSAGES))
def test_message_fields_match_spec(message):
    assert field_table(_ours_message(message)) == SPEC_MESSAGES[message]


def field_table(desc: d.Descriptor) -> dict[str, tuple[int, str, str]]:
    """A message's fields as the spec parser reads them: name -> (number, type, label)."""
    ours = {}
    for f in desc.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            vt = v.message_type.name if v.message_type else _type_name(v)
            ours[f.name] = (f.number, f"map<{_type_name(k)},{vt}>", "repeated")
        else:
            label = "repeated" if f.is_repeated else "optional"
            ours[f.name] = (f.number, _type_name(f), label)
    return ours


def _type_name(f: d.FieldDescriptor) -> str:
    if f.message_type is not None:
        return f.message_type.name
    if f.enum_type is not None:
        return f.enum_type.name
    return next(k for k, v in _SCALARS.items() if v == f.type)


@pytest.mark.parametrize("enum", sorted(SPEC_ENUMS))
def test_enum_values_match_spec(enum):
    top, *rest = enum.split(".")
    if rest:
        desc = _ours_message(top).enum_types_by_name[rest[0]]
    else:
        desc = si_pb2.DESCRIPTOR.enum_types_by_name[top]
    assert {v.name: v.number for v in desc.values} == SPEC_ENUMS[enum]


def test_reserved_fields_kept():
    alloc = si_pb2.Allocation.DESCRIPTOR
    assert 7 not in alloc.fields_by_number and "queueName" not in alloc.fields_by_name
    upd = si_pb2.UpdateConfigurationRequest.DESCRIPTOR
    assert 1 not in upd.fields_by_number and "configs" not in upd.fields_by_name
