"""What crosses ZeroMQ: every envelope kind, and the body of each control kind as a small frozen
dataclass with one ``decode`` each (``common.envelope`` is the frame codec around them).

SI traffic (``si.*``, ``events``, ``scheduling.states``) carries serialized protobuf, or for
the allocation stream rows beside it (``common.si_rows``), and has no class here. Every other kind's body is a msgpack map on the wire; its class says which keys it
has, their types and defaults. ``decode`` takes the map (or ``None`` for an empty body, or an
instance, returned as it is) and raises ``EnvelopeError`` for anything else: a body that is not
a map, or a key of the wrong type. ``wire()`` gives the map to send. Missing keys take the
defaults, so an older peer that sends fewer keys still decodes.

The loops decode bodies when they decode the envelope (``common.envelope.decode_for``,
``decode_typed``), so a bad body is counted and dropped like any malformed frame; handlers call
``X.decode(env.body)`` again, which returns the decoded body as it is (and decodes an envelope
built in-process, e.g. by a test, with a plain map).
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, ClassVar, Mapping, TypeVar

__all__ = [
    "Kind", "KINDS", "EnvelopeError", "Body", "ProxyHello", "WorkerReady", "Heartbeat", "Status",
    "RMPartitions", "RMUnregister", "PartitionLoaded", "PartitionOwned", "PartitionLost", "ConfigUpdate",
    "PartitionRemove", "SiRevision", "Query", "PagedQuery", "PartitionQuery", "QueuesQuery", "AppsQuery",
    "AppQuery", "AppSummariesQuery", "AppStatusQuery", "ExplainQuery", "NodesQuery", "NodeQuery", "HeatmapQuery",
    "NodeUtilQuery", "UsageQuery", "EventsQuery", "PlacementRulesQuery", "HealthQuery", "MetricsQuery",
    "DumpQuery", "WhatIfQuery", "BadQuery", "QUERIES", "NotFound", "Reply", "Unroutable", "BODIES",
    "with_request_id",
]

B = TypeVar("B", bound="Body")


class Kind(StrEnum):
    """Every envelope kind. Direction in the comment: P=rmproxy, B=broker, W=worker."""

    # liveness and membership
    PROXY_HELLO = "proxy.hello"  # P->B: I am an rmproxy, with my RMs; ProxyHello
    WORKER_READY = "worker.ready"  # W->B: I am a worker (pinned to, owning); WorkerReady
    HEARTBEAT = "heartbeat"  # any direction; Heartbeat
    STATUS = "status"  # B->P: the broker's view; any->B: a status query; Status
    # RM registration and partition ownership
    RM_REGISTER = "rm.register"  # P->B: rm_id; RMPartitions
    RM_UNREGISTER = "rm.unregister"  # P->B: rm_id; RMUnregister
    RM_PARTITIONS = "rm.partitions"  # P->B: a config update changed the RM's partitions; RMPartitions
    PARTITION_ASSIGN = "partition.assign"  # B->W: rm_id, partition, epoch; no body
    PARTITION_RELEASE = "partition.release"  # B->W: stop owning rm_id/partition; no body
    PARTITION_LOADED = "partition.loaded"  # W->B: rm_id, partition, epoch; PartitionLoaded
    PARTITION_OWNED = "partition.owned"  # B->P: rm_id, partition, epoch; PartitionOwned
    PARTITION_LOST = "partition.lost"  # B->P: the owner of rm_id/partition died; PartitionLost
    # SI traffic, P->B->W; body = serialized si.v1 request for this partition only
    SI_ALLOCATION = "si.allocation"  # its asks as rows, the rest as protobuf: common.si_rows.RequestRows, packed
    SI_APPLICATION = "si.application"
    SI_NODE = "si.node"
    SI_REVISION = "si.revision"  # P->B->W: the RM's SI revision, before the requests that need it; SiRevision
    CONFIG_UPDATE = "config.update"  # P->B->W: ConfigUpdate
    PARTITION_REMOVE = "partition.remove"  # P->B->W: the partition left the config; PartitionRemove
    CONFIG_RESULT = "config.result"  # W->B->P: Reply
    # outcomes, W->B->P; body = serialized si.v1 response
    SI_ALLOCATION_RESPONSE = "si.allocation.response"  # new allocations as rows: common.si_rows.NewAllocations
    SI_APPLICATION_RESPONSE = "si.application.response"
    SI_NODE_RESPONSE = "si.node.response"
    EVENTS = "events"  # body [serialized si.v1.EventRecord...]
    SCHEDULING_STATES = "scheduling.states"  # body [serialized UpdateContainerSchedulingStateRequest...]
    # read-only queries (REST), P->B->W and back; Query, Reply
    QUERY = "query"
    QUERY_RESULT = "query.result"
    # routing failure, B->P; Unroutable
    UNROUTABLE = "unroutable"


KINDS = {k.value: k for k in Kind}  # wire name -> Kind


class EnvelopeError(ValueError):
    """A frame that is not a valid envelope; ``raw`` holds the bytes received."""

    def __init__(self, reason: str, raw: bytes) -> None:
        super().__init__(f"bad envelope ({len(raw)} bytes): {reason}")
        self.reason = reason
        self.raw = raw


class _Bad(Exception):
    """A key of the wrong type: becomes EnvelopeError in ``Body.decode``."""


def _get(m: Mapping, key: str, types: type | tuple[type, ...], default: Any = None) -> Any:
    """``m[key]`` checked against ``types``; ``default`` when missing or None."""
    value = m.get(key)
    if value is None:
        return default
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        raise _Bad(f"{key!r} must be {_names(types)}, got {type(value).__name__}")
    return value


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in _tuple(types))


def _strings(m: Mapping, key: str) -> tuple[str, ...]:
    """A list of strings (msgpack has no tuples)."""
    items = _get(m, key, (list, tuple), ())
    if not all(isinstance(x, str) for x in items):
        raise _Bad(f"{key!r} must be a list of strings")
    return tuple(items)


# The wire type of each field annotation the body classes use: keys are checked against it
# (None: any value; "strings": a list of strings).
_WIRE_TYPES: dict[str, Any] = {
    "str": str, "str | None": str, "int": int, "int | None": int, "bool": bool, "bytes | None": bytes,
    "dict": dict, "dict | None": dict, "tuple[str, ...]": "strings", "Any": None, "NotFound | None": "NotFound",
}


def _read(m: Mapping, f: Field) -> Any:
    default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    wire_type = _WIRE_TYPES[f.type]  # type: ignore[index]
    if wire_type is None:
        value = m.get(f.name)
        return default if value is None else value
    if wire_type == "strings":
        return _strings(m, f.name)
    if wire_type == "NotFound":
        value = _get(m, f.name, dict)
        return default if value is None else NotFound._from_map(value)
    return _get(m, f.name, wire_type, default)


def _by_fields(cls: type[B], m: dict) -> B:
    """Each field of ``cls`` from the key of its name, checked against its annotation."""
    return cls(**{f.name: _read(m, f) for f in fields(cls)})  # type: ignore[arg-type]


class Body:
    """Base of the body classes: ``decode`` (map -> instance, checked) and ``wire`` (instance -> map).

    By default each field is the key of its name, checked against its annotation; a class whose
    wire form differs (nested or renamed keys, keys left out) overrides ``_from_map``/``wire``."""

    __slots__ = ()

    @classmethod
    def decode(cls: type[B], body: Any, raw: Any = b"") -> B:
        """The body of an envelope as this class; EnvelopeError (holding ``raw``, the frame if the
        caller has it) when it is not a map of the right keys."""
        if isinstance(body, cls):
            return body
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise EnvelopeError(f"bad {cls.__name__} body: a map expected, got {type(body).__name__}", raw)
        try:
            return cls._from_map(body)
        except _Bad as exc:
            raise EnvelopeError(f"bad {cls.__name__} body: {exc}", raw) from None

    @classmethod
    def _from_map(cls: type[B], m: dict) -> B:
        return _by_fields(cls, m)

    def wire(self) -> dict:
        return {f.name: _listed(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _listed(value: Any) -> Any:
    """msgpack sends a tuple as a list; so does ``wire``, so a map sent in-process equals the received
    one; a body inside a body is sent as its map."""
    if isinstance(value, tuple):
        return list(value)
    return value.wire() if isinstance(value, Body) else value


# -- membership and liveness ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProxyHello(Body):
    """PROXY_HELLO, rmproxy -> broker: who the rmproxy is and the RMs it holds with the partitions
    each wants (``None``: the rmproxy holds the RM, and says nothing of its partitions). Name,
    host and pid None: unchanged (the broker learns an rmproxy it does not know from any message)."""

    name: str | None = None
    host: str | None = None
    pid: int | None = None
    rms: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)

    @classmethod
    def _from_map(cls, m: dict) -> "ProxyHello":
        rms = _get(m, "rms", (dict, list), {})
        if isinstance(rms, list):  # rmIDs only
            if not all(isinstance(r, str) for r in rms):
                raise _Bad("'rms' must list rmIDs")
            wants: dict[str, tuple[str, ...] | None] = dict.fromkeys(rms)
        else:
            wants = {rm_id: None if rms[rm_id] is None else _strings(rms, rm_id) for rm_id in rms}
        return cls(_get(m, "name", str), _get(m, "host", str), _get(m, "pid", int), wants)

    def wire(self) -> dict:
        return {"name": self.name, "host": self.host, "pid": self.pid,
                "rms": {rm_id: None if ps is None else list(ps) for rm_id, ps in self.rms.items()}}


@dataclass(frozen=True, slots=True)
class WorkerReady(Body):
    """WORKER_READY, worker -> broker: who the worker is, the partition it is pinned to (``pin``,
    sent as ``"rm/partition"``) and the one it owns (``owns``: rm_id, partition, epoch), when it
    re-announces itself after a broker restart."""

    name: str = ""
    host: str = ""
    pid: int = 0
    pin: tuple[str, str] | None = None
    owns: tuple[str, str, int] | None = None

    @classmethod
    def _from_map(cls, m: dict) -> "WorkerReady":
        pin = _get(m, "pin", str)
        owns = _get(m, "owns", dict)
        if owns is not None:
            owns = (_get(owns, "rm_id", str, ""), _get(owns, "partition", str, ""), _get(owns, "epoch", int, 0))
        return cls(_get(m, "name", str, ""), _get(m, "host", str, ""), _get(m, "pid", int, 0),
                   tuple(pin.split("/", 1)) if pin is not None and "/" in pin else None, owns)  # type: ignore[arg-type]

    def wire(self) -> dict:
        return {"name": self.name, "host": self.host, "pid": self.pid,
                "pin": "/".join(self.pin) if self.pin else None,
                "owns": {"rm_id": self.owns[0], "partition": self.owns[1], "epoch": self.owns[2]}
                if self.owns else None}


@dataclass(frozen=True, slots=True)
class Heartbeat(Body):
    """HEARTBEAT, any direction: empty, or from the broker ``reannounce`` (it does not know the
    peer: announce yourself again), or from an rmproxy its RMs' states (rmID -> {"state",
    "partitions"}, for ``korral status``)."""

    reannounce: bool = False
    rms: dict | None = None  # rmID -> {"state", "partitions"}

    def wire(self) -> dict:  # only what is set, as the peers always sent it
        out: dict = {}
        if self.reannounce:
            out["reannounce"] = True
        if self.rms is not None:
            out["rms"] = dict(self.rms)
        return out


@dataclass(frozen=True, slots=True)
class Status(Body):
    """STATUS, broker -> rmproxy (and to ``korral status --broker``): the broker's whole view as
    one document (workers, partitions, rmproxies, counters), kept as the map it is: rmproxy
    serves it as JSON and patches it with ownership events (``rmproxy.cluster_view``). Sent to
    the broker, an empty STATUS asks for one."""

    doc: dict = field(default_factory=dict)

    @classmethod
    def _from_map(cls, m: dict) -> "Status":
        return cls(m)

    def wire(self) -> dict:
        return self.doc


# -- RM registration and partition ownership -----------------------------------------------

@dataclass(frozen=True, slots=True)
class RMPartitions(Body):
    """RM_REGISTER and RM_PARTITIONS, rmproxy -> broker: every partition the RM wants."""

    partitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RMUnregister(Body):
    """RM_UNREGISTER, rmproxy -> broker: the RM stopped, and why."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class PartitionLoaded(Body):
    """PARTITION_LOADED, worker -> broker: the assigned partition is built (``error`` None) or not."""

    error: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionOwned(Body):
    """PARTITION_OWNED, broker -> rmproxy: ``worker`` owns the partition in the envelope's epoch,
    or failed to load it (``error``)."""

    worker: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLost(Body):
    """PARTITION_LOST, broker -> rmproxy: the owner of the envelope's epoch is gone, and why."""

    reason: str = "its worker is gone"
    worker: str | None = None


# -- requests to a partition's worker and their answers -------------------------------------

@dataclass(frozen=True, slots=True)
class SiRevision(Body):
    """SI_REVISION, rmproxy -> worker, in the RM's request sequence of the partition's epoch: the
    SI revision the RM speaks (a ``common.si_revision.Revision`` value), sent once rmproxy knows
    it and before any request that depends on it."""

    revision: str = ""


@dataclass(frozen=True, slots=True)
class ConfigUpdate(Body):
    """CONFIG_UPDATE, rmproxy -> worker: the RM's new queues.yaml and extraConfig (``None``: an
    older rmproxy that sends none; the worker keeps what it has); answered by a CONFIG_RESULT
    with the same ``id``."""

    config: str = ""
    id: int | None = None
    extra_config: dict | None = None


@dataclass(frozen=True, slots=True)
class PartitionRemove(Body):
    """PARTITION_REMOVE, rmproxy -> worker: the partition left the config; answered by a
    CONFIG_RESULT with the same ``id``."""

    id: int | None = None


# -- REST reads: a query of one partition, answered by its worker between two cycles -------------

@dataclass(frozen=True, slots=True)
class Query(Body):
    """QUERY, rmproxy -> worker: one read of a partition (each kind of read is a subclass, named
    on the wire by its ``what``), answered by a QUERY_RESULT ``Reply`` with the same ``id``.
    ``Query.decode`` gives the subclass ``what`` names, or a ``BadQuery`` saying why the map is
    none (the worker answers it with that error: the asker learns why instead of waiting)."""

    id: int | None = None
    what: ClassVar[str] = ""

    @classmethod
    def _from_map(cls, m: dict) -> "Query":
        qid = _get(m, "id", int)
        what = m.get("what")
        kind = QUERIES.get(what) if isinstance(what, str) else None
        if cls is not Query and kind is not cls:
            raise _Bad(f"'what' must be {cls.what!r}, got {what!r}")
        if kind is None:
            return BadQuery(qid, f"unknown query {what!r}; known: {', '.join(sorted(QUERIES))}")
        try:
            return _by_fields(kind, m)
        except _Bad as exc:
            return BadQuery(qid, f"bad query {what!r}: {exc}")

    def wire(self) -> dict:  # "id" first: the broker reads a request's id without decoding the rest
        return {"id": self.id, "what": self.what,
                **{f.name: _listed(getattr(self, f.name)) for f in fields(self)[1:]
                   if getattr(self, f.name) is not None}}


@dataclass(frozen=True, slots=True)
class BadQuery(Query):
    """What ``Query.decode`` gives for a map that is no query: ``reason`` says why."""

    reason: str = ""

    def wire(self) -> dict:
        raise TypeError(f"a BadQuery is never sent: {self.reason}")


@dataclass(frozen=True, slots=True)
class PagedQuery(Query):
    """A read of a list that can be long: at most ``limit`` items from ``offset`` (the worker's
    page bounds apply), answered ``{"total", "offset", "next", "items"}``."""

    offset: int | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionQuery(Query):
    """The partition: YuniKorn's PartitionInfo, with the counts of ClusterInfo."""

    what: ClassVar[str] = "partition"


@dataclass(frozen=True, slots=True)
class QueuesQuery(Query):
    """The queue tree."""

    what: ClassVar[str] = "queues"


@dataclass(frozen=True, slots=True)
class AppsQuery(PagedQuery):
    """Applications: of one ``queue`` (its active ones), else of the partition; ``category``
    (``active``, ``completed``, ``rejected``) and ``states`` (state names, any case) narrow them."""

    what: ClassVar[str] = "apps"
    queue: str | None = None
    category: str | None = None
    states: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AppQuery(Query):
    """One application (``queue``: only if it is in that queue)."""

    what: ClassVar[str] = "app"
    app: str = ""
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class AppSummariesQuery(PagedQuery):
    """One small row per application (the dashboard's list)."""

    what: ClassVar[str] = "app_summaries"


@dataclass(frozen=True, slots=True)
class AppStatusQuery(Query):
    """Where an application stands (``korral explain APP``), with at most ``limit`` pending keys."""

    what: ClassVar[str] = "app_status"
    app: str = ""
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ExplainQuery(Query):
    """Why the ask ``key`` of application ``app`` waits."""

    what: ClassVar[str] = "explain"
    app: str = ""
    key: str = ""


@dataclass(frozen=True, slots=True)
class NodesQuery(PagedQuery):
    """The nodes."""

    what: ClassVar[str] = "nodes"


@dataclass(frozen=True, slots=True)
class NodeQuery(Query):
    """One node."""

    what: ClassVar[str] = "node"
    node: str = ""


@dataclass(frozen=True, slots=True)
class HeatmapQuery(Query):
    """Every node in a few bytes (the dashboard's heat map)."""

    what: ClassVar[str] = "heatmap"


@dataclass(frozen=True, slots=True)
class NodeUtilQuery(Query):
    """The nodes' utilisation per resource (YuniKorn's node-utilizations)."""

    what: ClassVar[str] = "node_util"


@dataclass(frozen=True, slots=True)
class UsageQuery(Query):
    """Resource usage of ``kind`` ``users``, ``groups``, or one ``user`` or ``group`` by ``name``."""

    what: ClassVar[str] = "usage"
    kind: str = "users"
    name: str | None = None


@dataclass(frozen=True, slots=True)
class EventsQuery(Query):
    """Events of the partition's ring by id: from ``start`` (default: the lowest held), or the
    ``last`` n before ``before`` (default: all); at most ``limit``."""

    what: ClassVar[str] = "events"
    start: int | None = None
    last: int | None = None
    before: int | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class PlacementRulesQuery(Query):
    """The placement rules."""

    what: ClassVar[str] = "placement_rules"


@dataclass(frozen=True, slots=True)
class HealthQuery(Query):
    """YuniKorn's health checks of the partition."""

    what: ClassVar[str] = "health"


@dataclass(frozen=True, slots=True)
class MetricsQuery(Query):
    """Counters and gauges of the partition (rmproxy renders Prometheus text)."""

    what: ClassVar[str] = "metrics"


@dataclass(frozen=True, slots=True)
class DumpQuery(Query):
    """Everything of the partition in one consistent answer (the state dump); ``health``: with
    its health checks (rmproxy may have them already)."""

    what: ClassVar[str] = "dump"
    health: bool = True


@dataclass(frozen=True, slots=True)
class WhatIfQuery(Query):
    """What the config text ``config`` would do to the partition; nothing changes."""

    what: ClassVar[str] = "whatif"
    config: str = ""


# what -> its query class
QUERIES: dict[str, type[Query]] = {q.what: q for q in (
    PartitionQuery, QueuesQuery, AppsQuery, AppQuery, AppSummariesQuery, AppStatusQuery, ExplainQuery, NodesQuery,
    NodeQuery, HeatmapQuery, NodeUtilQuery, UsageQuery, EventsQuery, PlacementRulesQuery, HealthQuery, MetricsQuery,
    DumpQuery, WhatIfQuery)}


@dataclass(frozen=True, slots=True)
class NotFound(Body):
    """A read's answer when the object it names does not exist (REST answers 404): YuniKorn's
    ``message`` (e.g. ``Application not found``), the kind of ``object`` and its ``name``."""

    message: str = ""
    object: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class Reply(Body):
    """CONFIG_RESULT and QUERY_RESULT, worker -> rmproxy: the answer to request ``id``: ``data``
    (a query's answer; ``packed`` when the worker sent it msgpack-encoded), ``not_found`` (the
    object a query names does not exist), or ``error``; ``stale``: the worker does not own the
    partition in the asked epoch (ask again); ``unavailable``: the error is that no worker could
    be reached (retry), not a refusal."""

    id: int | None = None
    data: Any = None
    error: str | None = None
    stale: bool = False
    unavailable: bool = False
    packed: bytes | None = None
    not_found: NotFound | None = None

    def wire(self) -> dict:  # only what is set ("id" first: the broker reads it without the rest)
        out: dict = {"id": self.id}
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is not None and value is not False:
                out[f.name] = _listed(value)
        return out


@dataclass(frozen=True, slots=True)
class Unroutable(Body):
    """UNROUTABLE, broker -> rmproxy: a request the broker could not route (``kind``), quoted
    back (``body``: bytes for SI traffic, a map for asks as rows, a config change or a query),
    and why."""

    reason: str = "unroutable"
    kind: str | None = None
    body: Any = None

    @property
    def request_id(self) -> int | None:
        """The ``id`` of the quoted request (config changes and queries), else None."""
        qid = self.body.get("id") if isinstance(self.body, dict) else None
        return qid if type(qid) is int else None


def with_request_id(body: B, qid: int) -> B:
    """``body`` (a request with an ``id``: ConfigUpdate, PartitionRemove, Query) asking as ``qid``."""
    return replace(body, id=qid)  # type: ignore[type-var]


# kind -> its body class; kinds not listed carry SI protobuf (bytes, or lists of them) or nothing
BODIES: dict[Kind, type[Body]] = {
    Kind.PROXY_HELLO: ProxyHello,
    Kind.WORKER_READY: WorkerReady,
    Kind.HEARTBEAT: Heartbeat,
    Kind.STATUS: Status,
    Kind.RM_REGISTER: RMPartitions,
    Kind.RM_PARTITIONS: RMPartitions,
    Kind.RM_UNREGISTER: RMUnregister,
    Kind.PARTITION_LOADED: PartitionLoaded,
    Kind.PARTITION_OWNED: PartitionOwned,
    Kind.PARTITION_LOST: PartitionLost,
    Kind.CONFIG_UPDATE: ConfigUpdate,
    Kind.PARTITION_REMOVE: PartitionRemove,
    Kind.SI_REVISION: SiRevision,
    Kind.CONFIG_RESULT: Reply,
    Kind.QUERY: Query,
    Kind.QUERY_RESULT: Reply,
    Kind.UNROUTABLE: Unroutable,
}
