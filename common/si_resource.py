"""The one conversion between resource maps and the SI's ``si.v1.Resource`` message, both ways.

``fill_si_resource`` writes any name -> int map (a dict, a ``common.resources.Resource``) into
an SI ``Resource``; ``resource_from_si`` reads one back as a ``Resource`` (``SiResourceCache``:
one shared ``Resource`` per distinct message, for a worker's asks). The worker's SI adapter, the
client, the simulator and the test RMs all convert through these two.
"""

from __future__ import annotations

from typing import Mapping

from common import si_pb2
from common.resources import Resource

__all__ = ["SiResourceCache", "fill_si_resource", "resource_from_si"]


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
    values = {k: res[k].value for k in res}  # a protobuf map's items() is a slow pure-Python view
    if "" in values:
        raise ValueError("resource name must be a non-empty string")
    return Resource._trusted(values)


class SiResourceCache:
    """``resource_from_si`` with one shared ``Resource`` per distinct message (Resources are
    immutable). Tasks come in few sizes: looking the message's bytes up costs a quarter of
    reading its map into a new ``Resource``. Holds at most ``limit`` sizes (then starts over);
    an invalid message raises ValueError each time and is never kept."""

    __slots__ = ("_by_bytes", "limit")

    def __init__(self, limit: int = 4096) -> None:
        self._by_bytes: dict[bytes, Resource] = {}
        self.limit = limit

    def get(self, msg: si_pb2.Resource) -> Resource:
        raw = msg.SerializeToString()  # same bytes, same content (map order may differ: a miss)
        res = self._by_bytes.get(raw)
        if res is None:
            res = resource_from_si(msg)
            if len(self._by_bytes) >= self.limit:
                self._by_bytes.clear()
            self._by_bytes[raw] = res
        return res
