"""Views computed over the whole partition, for REST and metrics: YuniKorn's health checks and the
metric gauges (``dao`` has the views of single objects). Pure functions of the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .app_state import AppState
from .dao import all_apps, int_percent, utilisation_bucket

if TYPE_CHECKING:  # pragma: no cover
    from .partition import Partition

__all__ = ["health_checks", "metrics_dao"]

# metrics: app states as the per-queue-name queue_app metrics (YuniKorn < 1.8) label them
_QUEUE_APP_STATES = {AppState.ACCEPTED: "accepted", AppState.STARTING: "running",
                     AppState.RUNNING: "running", AppState.COMPLETING: "running",
                     AppState.REJECTED: "rejected", AppState.COMPLETED: "completed",
                     AppState.FAILED: "failed", AppState.FAILING: "failed"}
# ... and as yunikorn_queue_app{queue,state} (1.5+) labels the apps a queue holds; its terminal
# states (completed, failed, rejected) count every app that ended there (``AppLifecycle.ended``),
# as YuniKorn's gauges only ever grow
_HELD_APP_LABELS = {AppState.NEW: "new", AppState.ACCEPTED: "accepted", AppState.STARTING: "running",
                    AppState.RUNNING: "running", AppState.RESUMING: "resuming",
                    AppState.FAILING: "failing", AppState.COMPLETING: "completing"}
_HELD_LABELS = ("new", "accepted", "running", "resuming", "failing", "completing")
_ENDED_LABELS = ("completed", "failed", "rejected")


# ------------------------------------------------------------------------------ health
def _check(name: str, description: str, problems: list[str]) -> dict:
    return {"Name": name, "Succeeded": not problems, "Description": description,
            "DiagnosisMessage": "; ".join(problems[:20]) + (f" (+{len(problems) - 20} more)"
                                                             if len(problems) > 20 else "")}


def _nonzero(d: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in d.items() if v}


def health_checks(p: "Partition", part: str) -> list[dict]:
    """YuniKorn's health checks for the partition ``part`` (``[rmID]name``), with the names
    and descriptions of v1.2."""
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


# ------------------------------------------------------------------------------ metrics
def metrics_dao(p: "Partition") -> dict:
    """The partition's gauges as plain data (rmproxy renders Prometheus text): apps per state,
    queue resources and apps, node states and usage buckets, containers, asks, cycles.
    Per queue ``apps`` are the per-queue-name metrics' states (served while
    ``perQueueMetricNames``: compatibility below 1.8), ``appStates`` those of
    ``yunikorn_queue_app``; ``appsEnded`` ``[path, state, count]`` feeds the counter
    ``yunikorn_queue_app_total`` (every queue, removed ones included)."""
    app_states: dict[str, int] = {}
    per_queue: dict[str, dict[str, int]] = {}
    held: dict[str, dict[str, int]] = {}
    for a in all_apps(p):
        app_states[a.state.value] = app_states.get(a.state.value, 0) + 1
        label = _QUEUE_APP_STATES.get(a.state)
        if label is not None:
            qs = per_queue.setdefault(a.queue.path, {})
            qs[label] = qs.get(label, 0) + 1
    for a in p.apps.values():
        label = _HELD_APP_LABELS.get(a.state)
        if label is not None:
            qs = held.setdefault(a.queue.path, {})
            qs[label] = qs.get(label, 0) + 1
    ended = p.lifecycle.ended
    queues = []
    stack = [p.root]
    while stack:
        q = stack.pop()
        counts = held.get(q.path, {})
        queues.append({"path": q.path,
                       "guaranteed": q.guaranteed.as_dict() if q.guaranteed is not None else {},
                       "max": q.max.as_dict() if q.max is not None else {},
                       "allocated": q.allocated.as_dict(), "pending": q.pending.as_dict(),
                       "preempting": q.preempting.as_dict(), "maxRunningApps": q.max_apps,
                       "apps": per_queue.get(q.path, {}),
                       "appStates": {**{s: counts.get(s, 0) for s in _HELD_LABELS},
                                     **{s: ended.get((q.path, s), 0) for s in _ENDED_LABELS}}})
        stack.extend(q.children.values())
    ended_paths = sorted({q["path"] for q in queues} | {path for path, _ in ended})
    apps_ended = [[path, s, ended.get((path, s), 0)] for path in ended_paths for s in _ENDED_LABELS]
    nodes = list(p.nodes.nodes.values())
    usage: dict[str, list[int]] = {}
    for n in nodes:  # YuniKorn's <resource>_node_usage_total: nodes per 10% utilisation bucket
        for k, c in n.capacity.items():
            if c > 0:
                usage.setdefault(k, [0] * 10)[utilisation_bucket(int_percent(n.allocated.get(k), c))] += 1
    return {
        "apps": app_states, "queues": queues, "appsEnded": apps_ended,
        "perQueueMetricNames": not p.settings.compat.queue_metrics_by_label_only,
        "nodes": {"active": sum(1 for n in nodes if n.ready and n.schedulable),
                  "draining": sum(1 for n in nodes if not n.schedulable),
                  "unhealthy": sum(1 for n in nodes if not n.ready)},
        "nodeUsage": usage,
        "containers": len(p.allocations),
        "pendingAsks": sum(k.pending for a in p.apps.values() for k in a.asks.values() if k.pending > 0),
        "reservations": len(p.reservations),
        "cycles": p.cycles, "lastCycleTime": p.last_cycle_ns,
    }
