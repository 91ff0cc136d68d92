"""The one conversion between resource maps and the SI's ``si.v1.Resource`` message, both ways.

``fill_si_resource`` writes any name -> int map (a dict, a ``common.resources.Resource``) into
an SI ``Resource``; ``resource_from_si`` reads one back as a ``Resource``. The worker's SI adapter,
the client, the simulator and the test RMs all convert through these two (asks and new
allocations travel as rows: ``common.si_rows``).
"""

from __future__ import annotations

from sys import intern
from typing import Mapping

from common import si_pb2
from common.resources import Resource

__all__ = ["fill_si_resource", "resource_from_si"]


def fill_si_resource(target: si_pb2.Resource, values: Mapping[str, int]) -> si_pb2.Resource:
    """Write ``values`` into ``target`` and return it: a message's field (protobuf lets one fill
    a field, not assign it) or a new message, ``fill_si_resource(si_pb2.Resource(), values)``.
    Names ``target`` already holds and ``values`` does not are kept."""
    for name, value in values.items():
        target.resources[name].value = value
    return target


def resource_from_si(msg: si_pb2.Resource) -> Resource:
    """An SI Resource as a ``Resource``. Protobuf guarantees str keys and int64 values; only an
    empty name is invalid (ValueError)."""
    res = msg.resources
    # a protobuf map's items() is a slow pure-Python view; interned names: one str per name,
    # not one per node
    values = {intern(k): res[k].value for k in res}
    if "" in values:
        raise ValueError("resource name must be a non-empty string")
    return Resource._trusted(values)
