"""Rows: the compact form of the two SI items that make up a burst, asks in and allocations out.

A seed ``AllocationAsk`` (or an SI v1.8 ``Allocation`` without node) costs the worker about 1.5
us of protobuf field reads, an SI ``Allocation`` about 1.3 us to build: a quarter of the
worker's time in a burst, on the one core the partition has. rmproxy runs on the other one: it
reads each request's asks into rows (``ask_rows``), the worker applies rows, reports its new
allocations as rows, and rmproxy writes those into the RM's revision of ``AllocationResponse``
(``fill_allocations``). The protobuf work then overlaps the scheduling instead of adding to it.
The worker's SI entry points go through the same two functions (``PartitionSession``), so each
conversion exists once.

Bodies (msgpack maps; ``sizes`` holds each distinct resource once, rows name it by index):

- ``Kind.SI_ASKS`` (rmproxy -> worker): ``{"sizes": [[name, value, name, value, ...], ...],
  "asks": [ask row, ...], "v18": true when they are a v1.8 RM's allocations}``; an ask row is
  ``ASK_FIELDS``, tags ``None`` when empty; packed into bytes of its own (``pack_rows``), so the
  worker times its decoding as it times protobuf's;
- ``Kind.SI_ALLOCATIONS`` (worker -> rmproxy): ``{"sizes": [...], "new": [allocation row, ...]}``;
  an allocation row is ``ALLOCATION_FIELDS``.

Sizes are checked where rows are applied (``sizes_from_rows``): an empty name or a non-integer
value is refused there with the asks that use it, as an invalid SI resource is.
"""

from __future__ import annotations

from sys import intern
from typing import Any, Iterable, Sequence

import msgpack

from common import si_internal_pb2 as si
from common.constants import TAG_FOREIGN
from common.resources import Resource
from common.si_resource import fill_si_resource
from common.si_revision import Revision

__all__ = ["ASK_FIELDS", "ALLOCATION_FIELDS", "ask_rows", "allocation_ask_rows", "is_plain_ask",
           "fill_allocations", "sizes_from_rows", "SizeTable", "pack_rows", "unpack_rows",
           "preemption_policy"]

ASK_FIELDS = ("allocationKey", "applicationID", "size", "maxAllocations", "priority",
              "executionTimeoutMilliSeconds", "tags", "taskGroupName", "placeholder", "Originator",
              "allowPreemptSelf", "allowPreemptOther")
ALLOCATION_FIELDS = ("allocationKey", "UUID", "nodeID", "applicationID", "size", "priority",
                     "taskGroupName", "placeholder", "allocationTags", "originator")


class SizeTable:
    """Distinct sizes of one body, each given an index the first time it is seen. ``index``
    maps a key that identifies a size (serialized SI bytes; a ``Resource``'s ``id``: hashing a
    new ``Resource`` builds a frozenset, so each request's shared size object is keyed by
    identity) to its index; ``add`` a key missing there."""

    __slots__ = ("index", "rows")

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.rows: list[list] = []

    def add(self, key: Any, pairs: Iterable[tuple[str, int]]) -> int:
        i = self.index[key] = len(self.rows)
        self.rows.append([x for pair in pairs for x in pair])
        return i


def pack_rows(body: dict) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


def unpack_rows(raw: bytes, *keys: str) -> dict:
    """A packed rows body (rows as tuples) holding ``keys``; ValueError when it is not one."""
    try:
        body = msgpack.unpackb(raw, raw=False, use_list=False)
    except Exception as exc:  # msgpack raises several types; all mean "not a rows body"
        raise ValueError(f"not msgpack: {exc}") from None
    if not isinstance(body, dict) or not all(k in body for k in keys):
        raise ValueError(f"expected a map of {', '.join(keys)}, got {type(body).__name__}")
    return body


def ask_rows(asks: Iterable[Any]) -> dict:
    """The ``SI_ASKS`` body of seed ``AllocationAsk`` messages (either protobuf module)."""
    sizes = SizeTable()
    rows = []
    for a in asks:
        tags = a.tags
        rows.append([a.allocationKey, a.applicationID, _size(sizes, a.resourceAsk), a.maxAllocations,
                     a.priority, a.executionTimeoutMilliSeconds, dict(tags) if tags else None,
                     a.taskGroupName, a.placeholder, a.Originator, *preemption_policy(a)])
    return {"sizes": sizes.rows, "asks": rows}


def is_plain_ask(a: Any) -> bool:
    """An SI v1.8 ``Allocation`` that is an ask: no node, not another scheduler's pod."""
    return not a.nodeID and TAG_FOREIGN not in a.allocationTags


def allocation_ask_rows(allocations: Iterable[Any]) -> dict:
    """The ``SI_ASKS`` body of SI v1.8 ``Allocation`` messages that are asks (``is_plain_ask``):
    one repeat each, no execution timeout (v1.8 has neither field)."""
    sizes = SizeTable()
    rows = []
    for a in allocations:
        tags = a.allocationTags
        rows.append([a.allocationKey, a.applicationID, _size(sizes, a.resourcePerAlloc), 1, a.priority, 0,
                     dict(tags) if tags else None, a.taskGroupName, a.placeholder, a.originator,
                     *preemption_policy(a)])
    return {"sizes": sizes.rows, "asks": rows, "v18": True}


def _size(sizes: SizeTable, msg: Any) -> int:
    raw = msg.SerializeToString()  # same bytes, same size (map order may differ: one more row)
    i = sizes.index.get(raw)
    if i is None:
        res = msg.resources
        i = sizes.add(raw, [(k, res[k].value) for k in res])
    return i


def preemption_policy(msg: Any) -> tuple[bool, bool]:
    """(allowPreemptSelf, allowPreemptOther) of an ask or allocation; both True when unset."""
    if not msg.HasField("preemptionPolicy"):
        return True, True
    pp = msg.preemptionPolicy
    return pp.allowPreemptSelf, pp.allowPreemptOther


def sizes_from_rows(rows: Sequence[Any]) -> list[Resource | ValueError]:
    """Each size row as a ``Resource``, or the ValueError saying why it is not one."""
    out: list[Resource | ValueError] = []
    for flat in rows:
        try:
            if not isinstance(flat, (list, tuple)) or len(flat) % 2:
                raise ValueError(f"resource must be name/value pairs, got {flat!r}")
            values = {}
            for name, value in zip(flat[::2], flat[1::2]):
                if not isinstance(name, str) or not name:
                    raise ValueError("resource name must be a non-empty string")
                if type(value) is not int:
                    raise ValueError(f"resource {name}: value must be an integer, got {value!r}")
                values[intern(name)] = value
            out.append(Resource._trusted(values))
        except ValueError as exc:
            out.append(exc)
    return out


def fill_allocations(resp: si.AllocationResponse, body: dict, partition: str,
                     revision: Revision | None) -> si.AllocationResponse:
    """Add an ``SI_ALLOCATIONS`` body's rows to ``resp.new`` (the internal model, read by
    either revision) in the RM's revision and return ``resp``: a seed RM names an allocation by
    UUID, a v1.8 one by key (and reads ``originator``); undecided, the UUID is written (a v1.8
    RM ignores it)."""
    seed = revision is not Revision.V18
    sizes = body["sizes"]  # (may grow while "new" is read: a session's rows are made as they are read)
    built: dict[int, si.Resource] = {}  # each size's SI message, built once: allocations share few sizes
    add = resp.new.add
    for key, uuid, node, app, size, priority, task_group, placeholder, tags, originator in body["new"]:
        if seed:
            m = add(allocationKey=key, UUID=uuid, nodeID=node, applicationID=app, partitionName=partition)
        else:
            m = add(allocationKey=key, nodeID=node, applicationID=app, partitionName=partition)
            if originator:
                m.originator = True
        if priority:  # proto3: a field left at its default is not sent either way
            m.priority = priority
        if task_group:
            m.taskGroupName = task_group
        if placeholder:
            m.placeholder = True
        if tags:
            m.allocationTags.update(tags)
        res = built.get(size)
        if res is None:
            flat = sizes[size]
            res = built[size] = fill_si_resource(si.Resource(), dict(zip(flat[::2], flat[1::2])))
        m.resourcePerAlloc.CopyFrom(res)
    return resp
