"""Worker-side answers to read-only REST queries (``Kind.QUERY``), in YuniKorn DAO shape.

Contract: ``answer(session, body) -> data`` where ``body["what"]`` names the query and
``data`` is msgpack-able (dict/list/str/int/float/bool/None). The worker loop calls it
between scheduling cycles, so every answer is consistent for the partition. Answers select
only what is asked (a 5,000-node, 50,000-ask partition answers one app or one page of nodes
without building the rest).

- Unknown ``what`` or a malformed parameter raises ``ValueError`` (the loop turns it into an
  error reply naming the query).
- An object that does not exist is not an error of the query: the answer is
  ``{"missing": "<YuniKorn message>", "object": "<kind>"}`` (e.g. ``Application not found``),
  and rmproxy maps it to YuniKorn's status code.
- Lists that can be large (``apps``, ``nodes``, ``events``) take ``offset`` and ``limit`` and
  answer ``{"total": n, "items": [...]}``.

Metrics are observers in the shell (STYLE #18): ``partition_worker.step_stats.observe_step``
records cycle time and outcome counts for a session; ``answer(..., what="metrics")`` returns
them with gauges read from the core. Nothing here writes to the core.
"""

from __future__ import annotations

import gc
import logging
from typing import Any, Callable

import orjson

from partition_worker.core import dao
from partition_worker.core.app_state import AppState
from partition_worker.step_stats import free_after_next_step, stats_of

__all__ = ["answer", "QUERIES", "INT32_MIN"]

log = logging.getLogger("korral.worker")

INT32_MIN = -(1 << 31)
MAX_PAGE = 10_000  # items per answer at most
PAGE_COST = 1_000  # work units per answer (an app or node = 1 + its allocations and asks): ~5-10 ms
_PENDING_STATES = (AppState.NEW, AppState.ACCEPTED)
_RUNNING_STATES = (AppState.STARTING, AppState.RUNNING, AppState.COMPLETING)
# --------------------------------------------------------------------------- helpers

def _missing(obj: str, message: str) -> dict:
    return {"missing": message, "object": obj}


def _page(body: dict, items: list, render: Callable[[Any], dict],
          cost: Callable[[Any], int] | None = None) -> dict:
    """A page of ``items`` from ``offset``: at most ``limit`` items and at most ``PAGE_COST``
    work units (``cost(item)``, e.g. 1 + its allocations), but always at least one item, so one
    answer stays within a few milliseconds however big the objects are. ``next`` is the offset
    of the following page (== ``total`` at the end)."""
    offset = _int_param(body, "offset", 0)
    limit = _int_param(body, "limit", MAX_PAGE)
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


def _int_param(body: dict, name: str, default: int) -> int:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    return v


def _percent(used: dict[str, int], cap: dict[str, int]) -> dict[str, int]:
    """YuniKorn's CalculateAbsUsedCapacity: int(used/cap*100) per key of used with a capacity."""
    out = {}
    for k, u in used.items():
        c = cap.get(k, 0)
        if c > 0:
            out[k] = int(u * 100 / c)
    return out


def _all_apps(p) -> list:
    return list(p.apps.values()) + list(p.finished_apps.values())


def _find_app(p, app_id: str):
    return p.apps.get(app_id) or p.finished_apps.get(app_id)


# --------------------------------------------------------------------------- partition

def _partition(s, body: dict) -> dict:
    p = s.core
    apps = _all_apps(p)
    states: dict[str, int] = {}
    for a in apps:
        states[a.state.value] = states.get(a.state.value, 0) + 1
    nodes = p.nodes.nodes.values()
    active = sum(1 for n in nodes if n.usable)
    pending_containers = sum(k.pending for a in p.apps.values() for k in a.asks.values() if k.pending > 0)
    cap = p.total.as_dict()
    used = p.root.allocated.prune().as_dict()
    return {
        "name": s.partition_name, "clusterId": s.rm_id, "rmID": s.rm_id, "state": p.state.value,
        "lastStateTransitionTime": p.state_time_ns,
        "capacity": {"capacity": cap, "usedCapacity": used, "utilization": _percent(used, cap)},
        "nodeSortingPolicy": {"type": p.nodes.policy.value, "resourceWeights": dict(p.nodes.weights)},
        "applications": {**states, "total": len(apps)},
        "totalApplications": len(apps),
        "runningApplications": sum(1 for a in apps if a.state in _RUNNING_STATES),
        "pendingApplications": sum(1 for a in apps if a.state in _PENDING_STATES),
        "completedApplications": states.get(AppState.COMPLETED.value, 0),
        "failedApplications": states.get(AppState.FAILED.value, 0) + states.get(AppState.REJECTED.value, 0),
        "totalContainers": len(p.allocations), "runningContainers": len(p.allocations),
        "pendingContainers": pending_containers, "failedContainers": 0,
        "totalNodes": len(p.nodes), "activeNodes": active,
        "failedNodes": sum(1 for n in nodes if not n.ready),
        "cycles": p.cycles, "lastCycleTime": p.last_cycle_ns,
    }


# --------------------------------------------------------------------------- queues

def _queues(s, body: dict) -> dict:
    root = dao.queue_dao(s.core.root)
    root["partition"] = s.partition_name  # YuniKorn sets it on the root only
    return root


def _lookup_queue(p, path: str):
    parts = path.split(".")
    q = p.root
    if parts[0] != q.name:
        return None
    for name in parts[1:]:
        q = q.children.get(name)
        if q is None:
            return None
    return q


# --------------------------------------------------------------------------- applications

def app_dao(a, part: str) -> dict:
    """The core's ApplicationDAOInfo. The core fills ``placeholderData`` (count, replaced,
    timedout) once a placeholder of the app is allocated; before that, the task groups are
    shown as the placeholder asks declare them."""
    d = dao.app_dao(a, part)
    if not d.get("placeholderData"):
        d["placeholderData"] = _placeholder_data(a)
    return d


def _placeholder_data(a) -> list[dict]:
    """Task groups as the placeholder asks declare them, before any is allocated (nothing
    replaced or timed out yet)."""
    groups: dict[str, dict] = {}
    for ask in a.asks.values():
        if ask.placeholder and ask.task_group:
            g = groups.setdefault(ask.task_group, {"taskGroupName": ask.task_group, "count": 0,
                                                   "minResource": ask.resource.as_dict(),
                                                   "replaced": 0, "timedout": 0})
            g["count"] += ask.max_allocations
    return list(groups.values())


def _apps(s, body: dict) -> dict:
    p = s.core
    queue = body.get("queue")
    if queue:
        q = _lookup_queue(p, str(queue))
        if q is None:
            return _missing("queue", "Queue not found")
        apps = list(q.apps.values())  # a queue holds its active apps only, like YuniKorn's
    else:
        apps = _all_apps(p)
    states = body.get("states")
    if states:
        wanted = {str(x).lower() for x in states}
        apps = [a for a in apps if a.state.value.lower() in wanted]
    return _page(body, apps, lambda a: app_dao(a, s.partition_name),
                 lambda a: 1 + len(a.allocations) + len(a.asks))


def _app_summaries(s, body: dict) -> dict:
    """One small row per application (no allocation views): the dashboard's list."""
    def row(a) -> dict:
        return {"applicationID": a.app_id, "queueName": a.queue.path, "user": a.user,
                "applicationState": a.state.value, "allocations": len(a.allocations),
                "pendingCount": sum(k.pending for k in a.asks.values() if k.pending > 0),
                "usedResource": a.allocated.prune().as_dict(), "submissionTime": a.submission_time_ns}
    return _page(body, _all_apps(s.core), row, lambda a: 1 + len(a.asks) // 50)


def _app(s, body: dict) -> dict:
    p = s.core
    app_id = str(body.get("app", ""))
    queue = body.get("queue")
    if queue and _lookup_queue(p, str(queue)) is None:
        return _missing("queue", "Queue not found")
    a = _find_app(p, app_id)
    if a is None or (queue and a.queue.path != queue):
        return _missing("application", "Application not found")
    return app_dao(a, s.partition_name)


def _explain(s, body: dict) -> dict:
    """Why one pending ask waits (``PartitionSession.explain``): its scheduling state, the node
    pipeline's rejections counted by stage, and the queue or user/group limit that holds it."""
    app_id, key = str(body.get("app", "")), str(body.get("key", ""))
    if app_id not in s.core.apps:  # a finished app has no pending asks
        return _missing("application", "Application not found")
    try:
        return s.explain(app_id, key)
    except LookupError:
        return _missing("ask", "Allocation ask not found")


# --------------------------------------------------------------------------- nodes

def node_dao(n, part: str) -> dict:
    """The core's NodeDAOInfo; host and rack also from the k8s shim's ``si.io/`` attributes."""
    d = dao.node_dao(n, part)
    d["hostName"] = d["hostName"] or n.attributes.get("si.io/hostname", "")
    d["rackName"] = d["rackName"] or n.attributes.get("si.io/rackname", "")
    return d


def _nodes(s, body: dict) -> dict:
    nodes = list(s.core.nodes.nodes.values())
    return _page(body, nodes, lambda n: node_dao(n, s.partition_name), lambda n: 1 + len(n.allocations))


def _node(s, body: dict) -> dict:
    n = s.core.nodes.nodes.get(str(body.get("node", "")))
    if n is None:
        return _missing("node", "Node not found")
    return node_dao(n, s.partition_name)


def _heatmap(s, body: dict) -> dict:
    """Every node in a few bytes, for the dashboard's heat map: ``[nodeID, highest utilisation
    % of any resource, schedulable, ready]`` (~1 ms per 1,000 nodes, so never paged)."""
    rows = []
    for n in s.core.nodes.nodes.values():
        top = 0
        for k, c in n.capacity.items():
            if c > 0:
                top = max(top, int(n.allocated.get(k) * 100 / c))
        rows.append([n.node_id, top, n.schedulable, n.ready])
    return {"total": len(rows), "items": rows}


# --------------------------------------------------------------------------- usage (ugm)

_USAGE = {"users": ("users", "userName", None), "user": ("users", "userName", ("user", "User not found")),
          "groups": ("groups", "groupName", None), "group": ("groups", "groupName", ("group", "Group not found"))}


def _usage(s, body: dict) -> Any:
    kind = body.get("kind", "users")
    if kind not in _USAGE:
        raise ValueError(f"usage kind must be users, user, groups or group, got {kind!r}")
    key, name_field, missing = _USAGE[kind]
    items = sorted(dao.usage_dao(s.core)[key], key=lambda d: d[name_field])
    if missing is None:
        return items
    name = body.get("name")
    for d in items:
        if d[name_field] == name:
            return d
    return _missing(*missing)


# --------------------------------------------------------------------------- events

def _events(s, body: dict) -> dict:
    ring = list(s.event_ring)
    from common import si_pb2  # the type names of EventRecord (REQUEST, APP, NODE, QUEUE)

    def render(e) -> dict:
        return {"type": si_pb2.EventRecord.Type.Name(e.type), "objectID": e.objectID,
                "groupID": e.groupID, "reason": e.reason, "message": e.message,
                "timestampNano": e.timestampNano, "partition": s.partition_name}
    return _page(body, ring, render)


# --------------------------------------------------------------------------- health

def _check(name: str, description: str, problems: list[str]) -> dict:
    return {"Name": name, "Succeeded": not problems, "Description": description,
            "DiagnosisMessage": "; ".join(problems[:20]) + (f" (+{len(problems) - 20} more)"
                                                             if len(problems) > 20 else "")}


def _health(s, body: dict) -> list[dict]:
    """YuniKorn's health checks for this partition (names and descriptions as in v1.2)."""
    p = s.core
    part = f"[{s.rm_id}]{s.partition_name}"
    nodes = list(p.nodes.nodes.values())
    failed = [n.node_id for n in nodes if not n.ready]
    neg_part = [part] if p.total.has_negative() or p.root.allocated.has_negative() else []
    neg_nodes = [n.node_id for n in nodes if n.allocated.has_negative() or n.occupied.has_negative()
                 or n.capacity.has_negative()]
    sum_alloc: dict[str, int] = {}
    sum_cap: dict[str, int] = {}
    cap_mismatch, over = [], []
    for n in nodes:
        for k, v in n.allocated.items():
            sum_alloc[k] = sum_alloc.get(k, 0) + v
        for k, v in n.capacity.items():
            sum_cap[k] = sum_cap.get(k, 0) + v
        for k, c in n.capacity.items():
            # available may be negative by design when occupied grows; check the sum only
            if c != n.allocated.get(k) + n.occupied.get(k) + n.available.get(k):
                cap_mismatch.append(n.node_id)
                break
        if not n.allocated.fits_in(n.capacity):
            over.append(n.node_id)
    alloc_total = _nonzero(sum_alloc)
    part_alloc = _nonzero(p.root.allocated.as_dict())
    # Set differences instead of per-allocation lookups: ~10x cheaper at 50,000 allocations.
    on_nodes: dict[str, str] = {}
    for n in nodes:
        on_nodes.update(dict.fromkeys(n.allocations, n.node_id))
    on_apps: dict[str, str] = {}
    for a in p.apps.values():
        on_apps.update(dict.fromkeys(a.allocations, a.app_id))
    orphan_node = [f"{on_nodes[u]}/{u}" for u in on_nodes.keys() - on_apps.keys()]
    orphan_app = [f"{on_apps[u]}/{u}" for u in on_apps.keys() - on_nodes.keys()]
    return [
        _check("Scheduling errors", "Check for scheduling error entries in metrics", []),
        _check("Failed nodes", "Check for failed nodes entries in metrics",
               [f"{part}: {len(failed)} node(s) not ready: {', '.join(failed[:10])}"] if failed else []),
        _check("Negative resources", "Check for negative resources in the partitions",
               [f"partition {x} has negative resources" for x in neg_part]),
        _check("Negative resources", "Check for negative resources in the nodes",
               [f"node {x} has negative resources" for x in neg_nodes]),
        _check("Consistency of data", "Check if a node's allocated resource <= total resource of the node",
               [] if alloc_total == part_alloc else
               [f"{part}: sum of node allocations {alloc_total} != partition allocated {part_alloc}"]),
        _check("Consistency of data", "Check if total partition resource == sum of the node resources",
               [] if _nonzero(sum_cap) == _nonzero(p.total.as_dict()) else
               [f"{part}: partition total {_nonzero(p.total.as_dict())} != sum of nodes {_nonzero(sum_cap)}"]),
        _check("Consistency of data", "Check if node total resource = allocated resource + occupied "
               "resource + available resource", [f"node {x}" for x in cap_mismatch]),
        _check("Consistency of data", "Check if node capacity >= allocated resources on the node",
               [f"node {x}" for x in over]),
        _check("Reservation check", "Check the reservation nr compared to the number of nodes", []),
        _check("Orphan allocation on node check", "Check if there are orphan allocations on the nodes",
               orphan_node),
        _check("Orphan allocation on app check", "Check if there are orphan allocations on the applications",
               orphan_app),
    ]


def _nonzero(d: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in d.items() if v}


# --------------------------------------------------------------------------- metrics

_QUEUE_APP_STATES = {AppState.ACCEPTED: "accepted", AppState.STARTING: "running",
                     AppState.RUNNING: "running", AppState.COMPLETING: "running",
                     AppState.REJECTED: "rejected", AppState.COMPLETED: "completed",
                     AppState.FAILED: "failed", AppState.FAILING: "failed"}


def _metrics(s, body: dict) -> dict:
    """Counters and gauges of this partition as plain data; rmproxy renders Prometheus text."""
    p = s.core
    apps = _all_apps(p)
    app_states: dict[str, int] = {}
    per_queue: dict[str, dict[str, int]] = {}
    for a in apps:
        app_states[a.state.value] = app_states.get(a.state.value, 0) + 1
        label = _QUEUE_APP_STATES.get(a.state)
        if label is not None:
            qs = per_queue.setdefault(a.queue.path, {})
            qs[label] = qs.get(label, 0) + 1
    queues = []
    stack = [p.root]
    while stack:
        q = stack.pop()
        queues.append({"path": q.path,
                       "guaranteed": q.guaranteed.as_dict() if q.guaranteed is not None else {},
                       "max": q.max.as_dict() if q.max is not None else {},
                       "allocated": q.allocated.as_dict(), "pending": q.pending.as_dict(),
                       "apps": per_queue.get(q.path, {})})
        stack.extend(q.children.values())
    nodes = list(p.nodes.nodes.values())
    usage: dict[str, list[int]] = {}
    for n in nodes:  # YuniKorn's <resource>_node_usage_total: nodes per 10% utilisation bucket
        for k, c in n.capacity.items():
            if c <= 0:
                continue
            pct = n.allocated.get(k) * 100 / c
            bucket = 0 if pct <= 10 else min(9, int((pct - 1e-9) // 10))
            usage.setdefault(k, [0] * 10)[bucket] += 1
    st = stats_of(s)
    return {
        "rmID": s.rm_id, "partition": s.partition_name,
        "apps": app_states, "queues": queues,
        "nodes": {"active": sum(1 for n in nodes if n.ready and n.schedulable),
                  "draining": sum(1 for n in nodes if not n.schedulable),
                  "unhealthy": sum(1 for n in nodes if not n.ready)},
        "nodeUsage": usage,
        "containers": len(p.allocations),
        "pendingAsks": sum(k.pending for a in p.apps.values() for k in a.asks.values() if k.pending > 0),
        "reservations": len(p.reservations),
        "cycles": p.cycles, "lastCycleTime": p.last_cycle_ns,
        "events": len(s.event_ring),
        "observed": st.to_data() if st is not None else None,
    }


# --------------------------------------------------------------------------- dump


def _dump(s, body: dict) -> dict:
    """Everything of the partition in one consistent answer (for ``/ws/v1/fullstatedump``).

    The two large lists come pre-encoded: ``applicationsJson`` and ``nodesJson`` hold one compact
    JSON text (UTF-8 bytes) per app and per node, each node with its allocation views inline,
    encoded here once with orjson, so neither msgpack nor rmproxy walks a million small
    objects; rmproxy splices the texts into the dump. Each allocation view is built once and
    shared by its app and its node."""
    p = s.core
    part = s.partition_name
    apps = [app_dao(a, part) for a in _all_apps(p)]
    views = {al["uuid"]: al for a in apps for al in a["allocations"]}
    nodes = []
    for n in p.nodes.nodes.values():
        d = node_dao_shell(n, part)
        d["allocations"] = [views.get(uuid) or dao.alloc_dao(al, part) for uuid, al in n.allocations.items()]
        nodes.append(_encode(d))
    # ~150,000 dicts at 50,000 allocations take ~20-30 ms to free: not before the answer leaves
    free_after_next_step(apps, views)
    return {
        "partition": _partition(s, body),
        "queues": _queues(s, body),
        "applicationsJson": [_encode(a) for a in apps],
        "nodesJson": nodes,
        "reservations": [{"nodeID": r.node_id, "applicationID": r.app_id, "allocationKey": r.ask_key,
                          "created": r.created_ns} for r in p.reservations.values()],
        **dao.usage_dao(p),
        **({"health": _health(s, body)} if body.get("health", True) else {}),  # rmproxy may have them
        "events": _events(s, {"limit": len(s.event_ring)})["items"],
    }


def _encode(value: dict) -> bytes:
    """Compact JSON as UTF-8 bytes. Every key of a view is a string, and orjson is ~10% faster
    without ``OPT_NON_STR_KEYS``; a view with another key (json.dumps would turn it into a
    string) is encoded again with it, so the text is the same either way."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def node_dao_shell(n, part: str) -> dict:
    """``node_dao`` without its ``allocations`` (the dump shares the apps' allocation views).
    The same fields as ``core.dao.node_dao``; a test keeps the two equal."""
    attrs = n.attributes
    return {
        "nodeID": n.node_id,
        "hostName": attrs.get("si/hostname") or attrs.get("si.io/hostname", ""),
        "rackName": attrs.get("si/rackname") or attrs.get("si.io/rackname", ""),
        "partition": part, "attributes": dict(attrs),
        "capacity": n.capacity.as_dict(), "allocated": n.allocated.prune().as_dict(),
        "occupied": n.occupied.prune().as_dict(), "available": n.available.as_dict(),
        "utilized": _percent(n.allocated.as_dict(), n.capacity.as_dict()),
        "schedulable": n.schedulable, "ready": n.ready,
        "isReserved": n.reservation is not None,
        "reservations": [n.reservation.node_key] if n.reservation is not None else [],
    }


QUERIES: dict[str, Callable[[Any, dict], Any]] = {
    "partition": _partition,
    "queues": _queues,
    "apps": _apps,
    "app": _app,
    "nodes": _nodes,
    "node": _node,
    "heatmap": _heatmap,
    "app_summaries": _app_summaries,
    "usage": _usage,
    "events": _events,
    "health": _health,
    "metrics": _metrics,
    "dump": _dump,
    "explain": _explain,
}


def answer(session: Any, body: dict) -> Any:
    """Answer one query for ``session`` (see module doc).

    Raises only ``ValueError``: for an unknown ``what`` or a bad parameter, and also (logged
    with its traceback) for a bug in an answer, so a REST read can never stop the worker loop."""
    what = body.get("what")
    handler = QUERIES.get(what) if isinstance(what, str) else None
    if handler is None:
        raise ValueError(f"unknown query {what!r}; known: {', '.join(sorted(QUERIES))}")
    # A dump builds ~100,000 short-lived dicts at 50,000 allocations; with the cyclic GC on,
    # it would rescan the worker's large heap several times (measured: 0.9 s instead of 0.4 s).
    pause_gc = what == "dump" and gc.isenabled()
    if pause_gc:
        gc.disable()
    try:
        return handler(session, body)
    except ValueError:
        raise
    except Exception as exc:
        log.exception("query %r failed", what)
        raise ValueError(f"internal error: {type(exc).__name__}: {exc}") from exc
    finally:
        if pause_gc:
            gc.enable()
