"""common/si_v18.proto is the seed's SI plus exactly the changes upstream made up to v1.8.0, and
the internal model (si_internal_pb2) is the union of the two revisions' Scheduler messages.

The seed side comes from the spec's own blocks (spec_blocks.proto.txt, parsed independently of
protoc); the changes are listed here, from the scheduler-interface history (SI 1.3 to 1.8).
"""

from __future__ import annotations

import copy

import pytest
from google.protobuf import descriptor_pb2

from common import protogen, si_internal_pb2, si_pb2, si_v18_pb2
from tests.wire.test_si_descriptor import SPEC_ENUMS, SPEC_MESSAGES, field_table

REMOVED_MESSAGES = {"AllocationAsk", "AllocationAskRelease", "RejectedAllocationAsk"}
ADDED_MESSAGES = {
    "RejectedAllocation": {"allocationKey": (1, "string", "optional"), "applicationID": (2, "string", "optional"),
                           "reason": (3, "string", "optional")},
    "PreemptionPredicatesArgs": {"allocationKey": (1, "string", "optional"), "nodeID": (2, "string", "optional"),
                                 "preemptAllocationKeys": (3, "string", "repeated"),
                                 "startIndex": (4, "int32", "optional")},
    "PreemptionPredicatesResponse": {"success": (1, "bool", "optional"), "index": (2, "int32", "optional")},
}
REMOVED_FIELDS = {  # message -> field names whose numbers v1.8 reserves
    "AllocationRequest": {"asks"}, "AllocationResponse": {"releasedAsks", "rejected"},
    "AllocationReleasesRequest": {"allocationAsksToRelease"}, "Allocation": {"UUID"},
    "AllocationRelease": {"UUID"}, "NodeInfo": {"occupiedResource", "existingAllocations"},
    "EventRecord": {"groupID", "reason"},
}
ADDED_FIELDS = {
    "AllocationRequest": {"allocations": (4, "Allocation", "repeated")},
    "AllocationResponse": {"rejectedAllocations": (5, "RejectedAllocation", "repeated")},
    "Allocation": {"originator": (14, "bool", "optional"), "preemptionPolicy": (15, "PreemptionPolicy", "optional")},
    "EventRecord": {"eventChangeType": (7, "ChangeType", "optional"),
                    "eventChangeDetail": (8, "ChangeDetail", "optional"),
                    "referenceID": (9, "string", "optional"), "resource": (10, "Resource", "optional")},
}
RENAMED_FIELDS = {("UpdateContainerSchedulingStateRequest", "applicartionID"): "applicationID"}
ADDED_ENUM_VALUES = {"NodeInfo.ActionFromRM": {"CREATE_DRAIN": 6}, "EventRecord.Type": {"USERGROUP": 5}}
ADDED_ENUMS = {
    "EventRecord.ChangeType": {"NONE": 0, "SET": 1, "ADD": 2, "REMOVE": 3},
    "EventRecord.ChangeDetail": {
        "DETAILS_NONE": 0, "REQUEST_CANCEL": 100, "REQUEST_ALLOC": 101, "REQUEST_TIMEOUT": 102,
        "APP_ALLOC": 200, "APP_REQUEST": 201, "APP_REJECT": 202, "APP_NEW": 203, "APP_ACCEPTED": 204,
        "APP_RUNNING": 206, "APP_COMPLETING": 207, "APP_COMPLETED": 208, "APP_FAILING": 209, "APP_FAILED": 210,
        "APP_RESUMING": 211, "APP_EXPIRED": 212, "APP_CANNOTRUN_QUEUE": 213, "APP_RUNNABLE_QUEUE": 214,
        "APP_CANNOTRUN_QUOTA": 215, "APP_RUNNABLE_QUOTA": 216, "NODE_DECOMISSION": 300, "NODE_SCHEDULABLE": 302,
        "NODE_ALLOC": 303, "NODE_CAPACITY": 304, "NODE_OCCUPIED": 305, "NODE_RESERVATION": 306,
        "QUEUE_CONFIG": 400, "QUEUE_DYNAMIC": 401, "QUEUE_TYPE": 402, "QUEUE_MAX": 403, "QUEUE_GUARANTEED": 404,
        "QUEUE_APP": 405, "QUEUE_ALLOC": 406, "ALLOC_CANCEL": 500, "ALLOC_PREEMPT": 501, "ALLOC_TIMEOUT": 502,
        "ALLOC_REPLACED": 503, "ALLOC_NODEREMOVED": 504, "UG_USER_LIMIT": 600, "UG_GROUP_LIMIT": 601,
        "UG_APP_LINK": 602, "UG_USER_RESOURCE": 603, "UG_GROUP_RESOURCE": 604},
}
RESERVED_NUMBERS = {  # v1.8 keeps every removed number reserved, so none can come back with a new meaning
    "AllocationRequest": {1}, "AllocationResponse": {3, 4}, "Allocation": {3, 7, 13},
    "AllocationReleasesRequest": {2}, "AllocationRelease": {3, 7}, "NodeInfo": {5, 6},
    "UpdateConfigurationRequest": {1}, "EventRecord": {3, 4},
}


def _expected_messages() -> dict[str, dict]:
    out = {m: dict(f) for m, f in copy.deepcopy(SPEC_MESSAGES).items() if m not in REMOVED_MESSAGES}
    for m, names in REMOVED_FIELDS.items():
        for n in names:
            del out[m][n]
    for m, fields in ADDED_FIELDS.items():
        out[m].update(fields)
    for (m, old), new in RENAMED_FIELDS.items():
        out[m][new] = out[m].pop(old)
    out.update(ADDED_MESSAGES)
    return out


EXPECTED = _expected_messages()


def _message(module, name: str):
    top, *rest = name.split(".")
    desc = module.DESCRIPTOR.message_types_by_name[top]
    for part in rest:
        desc = desc.nested_types_by_name[part]
    return desc


def _all_messages(module) -> set[str]:
    out: set[str] = set()

    def walk(descs, prefix: str) -> None:
        for m in descs:
            if not m.GetOptions().map_entry:
                out.add(prefix + m.name)
                walk(m.nested_types, prefix + m.name + ".")

    walk(module.DESCRIPTOR.message_types_by_name.values(), "")
    return out


def test_same_package_service_methods_and_extension_as_the_seed():
    assert si_v18_pb2.DESCRIPTOR.package == si_pb2.DESCRIPTOR.package == "si.v1"
    ours = si_v18_pb2.DESCRIPTOR.services_by_name["Scheduler"]
    seed = si_pb2.DESCRIPTOR.services_by_name["Scheduler"]
    assert [(m.full_name, m.input_type.full_name, m.output_type.full_name, m.client_streaming,
             m.server_streaming) for m in ours.methods] == \
           [(m.full_name, m.input_type.full_name, m.output_type.full_name, m.client_streaming,
             m.server_streaming) for m in seed.methods]
    assert si_v18_pb2.DESCRIPTOR.extensions_by_name["si_secret"].number == 1059


def test_the_messages_are_the_seeds_minus_removed_plus_added():
    assert _all_messages(si_v18_pb2) == set(EXPECTED)


@pytest.mark.parametrize("message", sorted(EXPECTED))
def test_message_fields_are_the_seeds_with_the_changes(message):
    assert field_table(_message(si_v18_pb2, message)) == EXPECTED[message]


@pytest.mark.parametrize("enum", sorted(set(SPEC_ENUMS) | set(ADDED_ENUMS)))
def test_enum_values_are_the_seeds_with_the_additions(enum):
    expected = {**SPEC_ENUMS.get(enum, {}), **ADDED_ENUM_VALUES.get(enum, {}), **ADDED_ENUMS.get(enum, {})}
    top, *rest = enum.split(".")
    desc = (_message(si_v18_pb2, top).enum_types_by_name[rest[0]] if rest
            else si_v18_pb2.DESCRIPTOR.enum_types_by_name[top])
    assert {v.name: v.number for v in desc.values} == expected


@pytest.mark.parametrize("message", sorted(RESERVED_NUMBERS))
def test_removed_numbers_stay_reserved(message):
    proto = descriptor_pb2.DescriptorProto()
    _message(si_v18_pb2, message).CopyToProto(proto)
    reserved = {n for r in proto.reserved_range for n in range(r.start, r.end)}
    assert RESERVED_NUMBERS[message] <= reserved


def test_the_revision_modules_share_one_process():
    """Both define si.v1: the v1.8 module lives in its own descriptor pool."""
    assert si_v18_pb2.Allocation.DESCRIPTOR.file.pool is not si_pb2.Allocation.DESCRIPTOR.file.pool
    assert "UUID" in si_pb2.Allocation.DESCRIPTOR.fields_by_name
    assert "UUID" not in si_v18_pb2.Allocation.DESCRIPTOR.fields_by_name


# -- the internal model ---------------------------------------------------------------------

@pytest.mark.parametrize("message", sorted(_all_messages(si_internal_pb2)))
def test_internal_message_is_the_union_of_both_revisions(message):
    union: dict = {}
    for module in (si_pb2, si_v18_pb2):
        if message in _all_messages(module):
            union.update(field_table(_message(module, message)))
    assert field_table(_message(si_internal_pb2, message)) == union


def test_internal_model_holds_what_the_scheduler_rpcs_carry_in_either_revision():
    names = _all_messages(si_internal_pb2)
    assert {"AllocationAsk", "AllocationAskRelease", "RejectedAllocationAsk", "RejectedAllocation"} <= names
    assert not {"EventRecord", "PredicatesArgs", "UpdateConfigurationRequest"} & names  # not on si.v1's wire
    assert si_internal_pb2.DESCRIPTOR.package == protogen.INTERNAL_PACKAGE


@pytest.mark.parametrize("module", [si_pb2, si_v18_pb2], ids=["seed", "v1.8"])
def test_internal_model_reads_and_writes_either_revision_byte_for_byte(module):
    req = module.AllocationRequest(rmID="rm")
    if module is si_pb2:
        req.asks.add(allocationKey="k", applicationID="a", maxAllocations=1, Originator=True)
        req.releases.allocationsToRelease.add(UUID="u", applicationID="a")
    else:
        req.allocations.add(allocationKey="k", applicationID="a", originator=True, nodeID="n")
        req.releases.allocationsToRelease.add(allocationKey="k", applicationID="a")
    raw = req.SerializeToString()
    internal = si_internal_pb2.AllocationRequest.FromString(raw)
    assert internal.SerializeToString() == raw
    assert module.AllocationRequest.FromString(internal.SerializeToString()) == req


def test_a_field_number_with_two_meanings_stops_the_merge():
    seed, v18 = (descriptor_pb2.FileDescriptorProto() for _ in range(2))
    si_pb2.DESCRIPTOR.CopyToProto(seed)
    si_v18_pb2.DESCRIPTOR.CopyToProto(v18)
    alloc = next(m for m in v18.message_type if m.name == "Allocation")
    next(f for f in alloc.field if f.name == "originator").number = 3  # the seed's UUID
    with pytest.raises(ValueError, match="Allocation: field 3 is UUID in one revision, originator in the other"):
        protogen.merge_revisions(seed, v18)
