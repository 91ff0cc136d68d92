"""Rows: the form in which asks reach a worker and new allocations leave it.

Reading an ask's protobuf fields costs about 1.5 us, building an SI ``Allocation`` about 1.3 us:
a quarter of the worker's time in a burst, on the one core its partition has. So rmproxy, on
its own core, reads every ask of every SI revision into an ``AskRow``
(``rmproxy.revision``), the worker applies rows and reports each new allocation as an
``AllocationRow``, and rmproxy writes those into the RM's revision of ``AllocationResponse``.
Rows are the worker's only way in for asks and its only way out for new allocations; everything
else of the allocation stream (releases, SI v1.8 allocations placed on a node or of another
scheduler, released and rejected asks) stays the protobuf it is, carried beside the rows.

Each row is a ``NamedTuple`` below: the one definition of its fields and their positions. On
the wire a row is a msgpack array in that order, and each size appears once in its body's
``sizes`` (name/value pairs), rows naming it by index.

Bodies:

- ``RequestRows`` (``Kind.SI_ALLOCATION``, rmproxy -> worker): one partition's part of an RM's
  ``AllocationRequest``, packed into bytes of its own (``pack``) so the worker times its decoding;
- ``NewAllocations`` (``Kind.SI_ALLOCATION_RESPONSE``, worker -> rmproxy): a step's allocation
  outcomes, a map inside the envelope (``wire``).

Sizes are checked where rows are applied (``sizes_from_rows``): an empty name or a non-integer
value is refused there with the asks that use it, as an invalid SI resource is.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from sys import intern
from typing import Any, Iterable, NamedTuple, Sequence

import msgpack

from common import si_internal_pb2 as si
from common.resources import Resource

__all__ = ["AskRow", "AllocationRow", "RequestRows", "NewAllocations", "SizeTable", "sizes_from_rows",
           "preemption_policy"]


class AskRow(NamedTuple):
    """One ask as a worker applies it: a seed ``AllocationAsk``, or an SI v1.8 ``Allocation``
    without node (``maxAllocations`` 1, no execution timeout: v1.8 has neither field)."""

    key: str  # allocationKey
    app_id: str  # applicationID
    size: int  # index into the body's sizes
    max_allocations: int
    priority: int
    execution_timeout_ms: int
    tags: dict[str, str] | None  # None when empty
    task_group: str
    placeholder: bool
    originator: bool
    allow_preempt_self: bool  # preemptionPolicy (both True when the ask has none)
    allow_preempt_other: bool


class AllocationRow(NamedTuple):
    """One new allocation as a worker reports it. Its fields are the core allocation's attributes
    of the same names, in this order (``NewAllocations.of`` reads them by name); the size is
    apart (``NewAllocations.size_of``)."""

    key: str
    uuid: str
    node_id: str
    app_id: str
    priority: int
    task_group: str
    placeholder: bool
    tags: dict[str, str] | None  # empty: {} or None
    originator: bool


_ALLOCATION_ROW = attrgetter(*AllocationRow._fields)


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


@dataclass(slots=True)
class RequestRows:
    """One partition's part of an ``AllocationRequest``, in the RM's order: ``asks`` as rows
    (``v18``: a v1.8 RM's allocations without node, checked as its allocations are), and
    ``rest``, the request without its asks (v1.8 allocations with a node or of another
    scheduler, releases), None when empty. ``rest_at[i]`` is the number of asks that come before
    ``rest.allocations[i]``; the releases come after everything (YuniKorn's order)."""

    sizes: list
    asks: Sequence[AskRow]
    v18: bool = False
    rest: si.AllocationRequest | None = None
    rest_at: Sequence[int] = ()

    def pack(self) -> bytes:
        body: dict[str, Any] = {"sizes": self.sizes, "asks": self.asks}
        if self.v18:
            body["v18"] = True
        if self.rest is not None:
            body["rest"] = self.rest.SerializeToString()
            if self.rest_at:
                body["rest_at"] = self.rest_at
        return msgpack.packb(body, use_bin_type=True)

    @classmethod
    def unpack(cls, raw: bytes) -> "RequestRows":
        """The body ``pack`` made (rows as tuples, ``rest`` parsed); ValueError naming what is
        wrong. Rows themselves are checked where they are applied."""
        try:
            body = msgpack.unpackb(raw, raw=False, use_list=False)
        except Exception as exc:  # msgpack raises several types; all mean "not a rows body"
            raise ValueError(f"not msgpack: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("sizes"), tuple) \
                or not isinstance(body.get("asks"), tuple):
            raise ValueError(f"expected a map with sizes and asks, got {_shape(body)}")
        rest = body.get("rest")
        if rest is not None:
            if not isinstance(rest, bytes):
                raise ValueError(f"rest must be a serialized AllocationRequest, got {type(rest).__name__}")
            try:
                rest = si.AllocationRequest.FromString(rest)
            except Exception as exc:  # protobuf's DecodeError
                raise ValueError(f"rest does not parse as an AllocationRequest: {exc}") from None
        rest_at = body.get("rest_at", ())
        if not isinstance(rest_at, tuple) or not all(type(i) is int for i in rest_at) \
                or len(rest_at) > (len(rest.allocations) if rest is not None else 0):
            raise ValueError(f"rest_at must place each of rest's allocations, got {rest_at!r}")
        return cls(body["sizes"], body["asks"], body.get("v18") is True, rest, rest_at)


@dataclass(slots=True)
class NewAllocations:
    """A step's allocation outcomes as a worker reports them: ``new`` as rows (``size_of[i]``:
    the index in ``sizes`` of row i's size) and ``rest``, the serialized ``AllocationResponse``
    of everything else (releases, released and rejected asks) in the RM's revision, None when
    there is nothing else. rmproxy writes one SI response of both, so the RM reads a
    placeholder's release with the allocation replacing it, as before."""

    sizes: list
    new: Sequence[AllocationRow]
    size_of: Sequence[int]
    rest: bytes | None = None

    @classmethod
    def of(cls, allocations: Iterable[Any], rest: bytes | None = None) -> "NewAllocations":
        """The rows of the core's new allocations (objects with ``AllocationRow``'s fields and a
        ``resource``), read by name; allocations of one ask share one ``Resource`` object, so
        sizes are keyed by identity."""
        sizes = SizeTable()
        index = sizes.index
        rows, size_of = [], []
        for al in allocations:
            rows.append(_ALLOCATION_ROW(al))
            r = al.resource
            i = index.get(id(r))
            size_of.append(sizes.add(id(r), r.items()) if i is None else i)
        return cls(sizes.rows, rows, size_of, rest)

    def wire(self) -> dict:
        body: dict[str, Any] = {"sizes": self.sizes, "new": self.new, "size_of": self.size_of}
        if self.rest is not None:
            body["rest"] = self.rest
        return body

    @classmethod
    def decode(cls, body: Any) -> "NewAllocations":
        """The map ``wire`` made; ValueError naming what is wrong (rows are checked where they
        are written)."""
        if not isinstance(body, dict) or not all(isinstance(body.get(k), (list, tuple))
                                                 for k in ("sizes", "new", "size_of")):
            raise ValueError(f"expected a map with sizes, new and size_of, got {_shape(body)}")
        rest = body.get("rest")
        if rest is not None and not isinstance(rest, bytes):
            raise ValueError(f"rest must be a serialized AllocationResponse, got {type(rest).__name__}")
        if len(body["size_of"]) != len(body["new"]):
            raise ValueError(f"{len(body['new'])} rows but {len(body['size_of'])} sizes")
        return cls(body["sizes"], body["new"], body["size_of"], rest)


def _shape(body: Any) -> str:
    return f"a map of {', '.join(map(str, body))}" if isinstance(body, dict) else type(body).__name__


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
