"""Worker-side answers to read-only REST queries (``Kind.QUERY``), in YuniKorn DAO shape.

What it owns: the query dispatch (``ANSWERS``, by the query's class: ``common.messages.Query``),
each query's selection and paging, and the dump's JSON encoding. The views themselves are
``partition_worker.core.dao``.

Contract: ``answer(session, query) -> data`` where ``data`` is msgpack-able
(dict/list/str/int/float/bool/None) or a ``NotFound``. The worker loop calls it between
scheduling cycles, so every answer is consistent for the partition. Answers select only what
is asked (a 5,000-node, 50,000-ask partition answers one app or one page of nodes without
building the rest).

- A ``BadQuery`` (an unknown ``what``, a parameter of the wrong type) or a parameter out of
  range raises ``ValueError`` (the loop turns it into an error reply naming the query).
- An object that does not exist is not an error of the query: the answer is a ``NotFound``
  (YuniKorn's message, e.g. ``Application not found``, the kind of object and its name), and
  rmproxy answers 404 naming it.
- Lists that can be large (``apps``, ``nodes``) take ``offset`` and ``limit`` and answer
  ``{"total": n, "items": [...]}``; ``events`` are read by id (``_events``).

Metrics are observers in the shell (STYLE #18): ``partition_worker.step_stats.observe_step``
records cycle time and outcome counts for a session; ``answer(..., what="metrics")`` returns
them with gauges read from the core. Nothing here writes to the core.
"""

from __future__ import annotations

import gc
import logging
from typing import Any, Callable

import orjson

from common.config import load_config
from common.config.errors import ConfigError
from common.messages import (AppQuery, AppsQuery, AppStatusQuery, AppSummariesQuery, BadQuery, DumpQuery,
                             EventsQuery, ExplainQuery, HealthQuery, HeatmapQuery, MetricsQuery, NodeQuery,
                             NodesQuery, NodeUtilQuery, NotFound, PagedQuery, PartitionQuery, PlacementRulesQuery,
                             Query, QueuesQuery, UsageQuery, WhatIfQuery)
from partition_worker.core import dao, dao_totals, whatif
from partition_worker.core.app_state import AppState
from partition_worker.core.dao import INT32_MIN
from partition_worker.events import event_dao
from partition_worker.step_stats import free_after_next_step, stats_of

__all__ = ["answer", "ANSWERS", "INT32_MIN"]

log = logging.getLogger("korral.worker")

MAX_PAGE = 10_000  # items per answer at most
PAGE_COST = 1_000  # work units per answer (an app or node = 1 + its allocations and asks): ~5-10 ms
DUMP_EVENTS = 1_000  # the newest events in a state dump


# --------------------------------------------------------------------------- parameters, paging

def _missing(obj: str, message: str, name: object) -> NotFound:
    return NotFound(message, obj, str(name))


def _page(q: PagedQuery, items: list, render: Callable[[Any], Any],
          cost: Callable[[Any], int] | None = None) -> dict:
    """A page of ``items`` from ``offset``: at most ``limit`` items and at most ``PAGE_COST``
    work units (``cost(item)``, e.g. 1 + its allocations), but always at least one item, so one
    answer stays within a few milliseconds however big the objects are. ``next`` is the offset
    of the following page (== ``total`` at the end)."""
    offset = 0 if q.offset is None else q.offset
    limit = MAX_PAGE if q.limit is None else q.limit
    if offset < 0 or limit < 0:
        raise ValueError("offset and limit must not be negative")
    limit = min(limit, MAX_PAGE)
    out: list = []
    spent = 0
    i = offset
    while i < len(items) and len(out) < limit:
        c = cost(items[i]) if cost is not None else 1
        if out and spent + c > PAGE_COST:
            break
        out.append(render(items[i]))
        spent += c
        i += 1
    return {"total": len(items), "offset": offset, "next": i if out else max(offset, len(items)), "items": out}


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _find_app(p, app_id: str):
    return p.apps.get(app_id) or p.finished_apps.get(app_id)


def _lookup_queue(p, path: str):
    """The queue at exactly ``path`` (``root.a.b``), or None."""
    parts = path.split(".")
    q = p.root
    if parts[0] != q.name:
        return None
    for name in parts[1:]:
        q = q.children.get(name)
        if q is None:
            return None
    return q


# --------------------------------------------------------------------------- queries

def _partition(s, q: PartitionQuery) -> dict:
    return dao.partition_dao(s.core, s.partition_name, s.rm_id)


def _queues(s, q: QueuesQuery) -> dict:
    return dao.queues_dao(s.core, s.partition_name)


# which applications ``apps`` lists per ``category`` (YuniKorn's ``applications/{state}``):
# active = not yet finished; completed = Completed or Failed; rejected = Rejected
_FINISHED = {"completed": (AppState.COMPLETED, AppState.FAILED), "rejected": (AppState.REJECTED,)}


def _apps(s, q: AppsQuery) -> dict | NotFound:
    """A page of applications: of one ``queue`` (its active ones, like YuniKorn's), else of the
    partition; ``category`` (``active``, ``completed``, ``rejected``) and ``states`` (state
    names, any case) narrow the list."""
    p = s.core
    queue, category = q.queue, q.category
    if queue:
        found = _lookup_queue(p, queue)
        if found is None:
            return _missing("queue", "Queue not found", queue)
        apps = list(found.apps.values())  # a queue holds its active apps only, like YuniKorn's
    elif category == "active":
        apps = list(p.apps.values())
    elif category in _FINISHED:
        apps = [a for a in p.finished_apps.values() if a.state in _FINISHED[category]]
    elif category is None:
        apps = dao.all_apps(p)
    else:
        raise ValueError(f"category must be active, completed or rejected, got {category!r}")
    if q.states:
        wanted = {x.lower() for x in q.states}
        apps = [a for a in apps if a.state.value.lower() in wanted]
    return _page(q, apps, lambda a: dao.app_dao(a, s.partition_name),
                 lambda a: 1 + len(a.allocations) + len(a.asks))


def _app_summaries(s, q: AppSummariesQuery) -> dict:
    """One small row per application (no allocation views): the dashboard's list."""
    return _page(q, dao.all_apps(s.core), dao.app_summary, lambda a: 1 + len(a.asks) // 50)


def _app(s, q: AppQuery) -> dict | NotFound:
    p = s.core
    app_id, queue = q.app, q.queue
    if queue and _lookup_queue(p, queue) is None:
        return _missing("queue", "Queue not found", queue)
    a = _find_app(p, app_id)
    if a is None or (queue and a.queue.path != queue):
        return _missing("application", "Application not found", app_id)
    return dao.app_dao(a, s.partition_name)


def _explain(s, q: ExplainQuery) -> dict | NotFound:
    """Why one pending ask waits (``PartitionSession.explain``): its scheduling state, the node
    pipeline's rejections counted by stage, and the queue or user/group limit that holds it."""
    app_id, key = q.app, q.key
    if app_id not in s.core.apps:  # a finished app has no pending asks
        return _missing("application", "Application not found", app_id)
    try:
        return s.explain(app_id, key)
    except LookupError:
        return _missing("ask", "Allocation ask not found", key)


def _app_status(s, q: AppStatusQuery) -> dict | NotFound:
    """Where an application stands, for ``korral explain APP``: an active app's state and the
    keys of its pending asks (at most ``limit``, default 50); a finished, removed or expired one's
    end (state, since, why) from the finished list or the partition's history of gone apps."""
    p = s.core
    app_id = q.app
    app = p.apps.get(app_id)
    if app is not None:
        keys = [k.key for k in app.asks.values() if k.pending > 0][:_or(q.limit, 50)]
        return {"applicationID": app_id, "active": True, "state": app.state.value, "queue": app.queue.path,
                "pendingKeys": keys}
    app = p.finished_apps.get(app_id)
    if app is not None:
        return {"applicationID": app_id, "active": False, "state": app.state.value, "queue": app.queue.path,
                "since": app.finished_ns or app.state_time_ns, "reason": app.message, "removed": False}
    gone = p.lifecycle.gone.get(app_id)
    if gone is not None:
        return {"applicationID": app_id, "active": False, "state": gone.state, "queue": gone.queue,
                "since": gone.since_ns, "reason": gone.reason, "removed": gone.removed, "expired": not gone.removed}
    return _missing("application", "Application not found", app_id)


def _whatif(s, q: WhatIfQuery) -> dict:
    """What the config text ``config`` would do to this partition (``core.whatif``): kept with
    its new settings, or removed when the config leaves it out. Nothing changes."""
    try:
        config = load_config(q.config)
    except ConfigError as exc:
        raise ValueError(f"config is not valid: {exc}") from None
    mine = next((pc for pc in config.partitions if pc.name == s.partition_name), None)
    return whatif.removal_whatif(s.core) if mine is None else whatif.config_whatif(s.core, mine)


def _nodes(s, q: NodesQuery) -> dict:
    nodes = list(s.core.nodes.nodes.values())
    without_zeros = s.core.settings.compat.node_capacity_without_zeros
    return _page(q, nodes, lambda n: dao.node_dao(n, s.partition_name, without_zeros=without_zeros),
                 lambda n: 1 + len(n.allocations))


def _node(s, q: NodeQuery) -> dict | NotFound:
    node_id = q.node
    n = s.core.nodes.nodes.get(node_id)
    if n is None:
        return _missing("node", "Node not found", node_id)
    return dao.node_dao(n, s.partition_name, without_zeros=s.core.settings.compat.node_capacity_without_zeros)


def _heatmap(s, q: HeatmapQuery) -> dict:
    """Every node in a few bytes, for the dashboard's heat map: ``[nodeID, highest utilisation
    % of any resource, schedulable, ready]`` (~1 ms per 1,000 nodes, so never paged)."""
    rows = [dao.heatmap_row(n) for n in s.core.nodes.nodes.values()]
    return {"total": len(rows), "items": rows}


_USAGE = {"users": ("users", "userName", None), "user": ("users", "userName", ("user", "User not found")),
          "groups": ("groups", "groupName", None), "group": ("groups", "groupName", ("group", "Group not found"))}


def _usage(s, q: UsageQuery) -> Any:
    kind = q.kind
    if kind not in _USAGE:
        raise ValueError(f"usage kind must be users, user, groups or group, got {kind!r}")
    key, name_field, missing = _USAGE[kind]
    items = sorted(dao.usage_dao(s.core)[key], key=lambda d: d[name_field])
    if missing is None:
        return items
    name = q.name
    for d in items:
        if d[name_field] == name:
            return d
    return _missing(*missing, name)


def _events(s, q: EventsQuery) -> dict:
    """Events of the session's ring by id (``partition_worker.events``): from ``start`` (default:
    the lowest held), or the ``last`` n before ``before`` (default: all); at most ``limit``
    (``MAX_PAGE``). ``ring`` names the ring: ids start again at 0 in a new session."""
    held = len(s.event_ring)
    lowest = s.events_total - held
    limit = min(_or(q.limit, MAX_PAGE), MAX_PAGE)
    if q.last is not None:
        end = min(max(_or(q.before, s.events_total), lowest), s.events_total)
        first = max(lowest, end - max(q.last, 0))
        end = min(end, first + limit)
    else:
        first = max(_or(q.start, lowest), lowest)
        end = min(s.events_total, first + limit)
    ring = s.event_ring
    items = [event_dao(ring[i - lowest], i, s.partition_name) for i in range(first, max(first, end))]
    return {"ring": s.created_ns, "lowest": lowest, "next": max(first, end), "total": s.events_total,
            "items": items}


def _node_util(s, q: NodeUtilQuery) -> list[dict]:
    return dao.node_utilisation(s.core)


def _placement_rules(s, q: PlacementRulesQuery) -> list[dict]:
    return dao.placement_rules_dao(s.core)


def _health(s, q: HealthQuery) -> list[dict]:
    """YuniKorn's health checks for this partition (names and descriptions as in v1.2)."""
    return dao_totals.health_checks(s.core, f"[{s.rm_id}]{s.partition_name}")


def _metrics(s, q: MetricsQuery) -> dict:
    """Counters and gauges of this partition as plain data; rmproxy renders Prometheus text."""
    st = stats_of(s)
    return {"rmID": s.rm_id, "partition": s.partition_name, **dao_totals.metrics_dao(s.core),
            "events": len(s.event_ring), "observed": st.to_data() if st is not None else None}


def _dump(s, q: DumpQuery) -> dict:
    """Everything of the partition in one consistent answer (for ``/ws/v1/fullstatedump``).

    The two large lists come pre-encoded: ``applicationsJson`` and ``nodesJson`` hold one compact
    JSON text (UTF-8 bytes) per app and per node, each node with its allocation views inline,
    encoded here once with orjson, so neither msgpack nor rmproxy walks a million small
    objects; rmproxy splices the texts into the dump. Each allocation view is built once and
    shared by its app and its node."""
    p = s.core
    part = s.partition_name
    apps = [dao.app_dao(a, part) for a in dao.all_apps(p)]
    views = {al["uuid"]: al for a in apps for al in a["allocations"]}
    without_zeros = p.settings.compat.node_capacity_without_zeros
    nodes = []
    for n in p.nodes.nodes.values():
        d = dao.node_dao(n, part, with_allocations=False, without_zeros=without_zeros)
        d["allocations"] = [views.get(al.uuid) or dao.alloc_dao(al, part) for al in n.allocations.values()]
        nodes.append(_encode(d))
    # ~150,000 dicts at 50,000 allocations take ~20-30 ms to free: not before the answer leaves
    free_after_next_step(apps, views)
    return {
        "partition": _partition(s, PartitionQuery()),
        "queues": _queues(s, QueuesQuery()),
        "applicationsJson": [_encode(a) for a in apps],
        "nodesJson": nodes,
        "reservations": [dao.reservation_dao(r) for r in p.reservations.values()],
        **dao.usage_dao(p),
        **({"health": _health(s, HealthQuery())} if q.health else {}),  # rmproxy may have them
        "placementRules": _placement_rules(s, PlacementRulesQuery()),
        "events": _events(s, EventsQuery(last=DUMP_EVENTS))["items"],
    }


def _encode(value: dict) -> bytes:
    """Compact JSON as UTF-8 bytes. Every key of a view is a string, and orjson is ~10% faster
    without ``OPT_NON_STR_KEYS``; a view with another key (json.dumps would turn it into a
    string) is encoded again with it, so the text is the same either way."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


ANSWERS: dict[type[Query], Callable[[Any, Any], Any]] = {
    PartitionQuery: _partition,
    QueuesQuery: _queues,
    AppsQuery: _apps,
    AppQuery: _app,
    NodesQuery: _nodes,
    NodeQuery: _node,
    HeatmapQuery: _heatmap,
    AppSummariesQuery: _app_summaries,
    UsageQuery: _usage,
    EventsQuery: _events,
    NodeUtilQuery: _node_util,
    PlacementRulesQuery: _placement_rules,
    HealthQuery: _health,
    MetricsQuery: _metrics,
    DumpQuery: _dump,
    ExplainQuery: _explain,
    AppStatusQuery: _app_status,
    WhatIfQuery: _whatif,
}


def answer(session: Any, query: Query) -> Any:
    """Answer one query for ``session`` (see module doc).

    Raises only ``ValueError``: for a ``BadQuery`` or a parameter out of range, and also (logged
    with its traceback) for a bug in an answer, so a REST read can never stop the worker loop."""
    if isinstance(query, BadQuery):
        raise ValueError(query.reason)
    handler = ANSWERS[type(query)]  # every query class has its answer (tests/rest/test_queries.py)
    # A dump builds ~100,000 short-lived dicts at 50,000 allocations; with the cyclic GC on,
    # it would rescan the worker's large heap several times (measured: 0.9 s instead of 0.4 s).
    pause_gc = type(query) is DumpQuery and gc.isenabled()
    if pause_gc:
        gc.disable()
    try:
        return handler(session, query)
    except ValueError:
        raise
    except Exception as exc:
        log.exception("query %r failed", query.what)
        raise ValueError(f"internal error: {type(exc).__name__}: {exc}") from exc
    finally:
        if pause_gc:
            gc.enable()
