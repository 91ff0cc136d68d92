"""Plain JSON-able views of the partition with YuniKorn's REST field names (REST_API.md).

``partition_snapshot(p, partition_name, cluster_id)`` is what ``PartitionSession.snapshot``
returns; the REST layer can serve its parts as they are. Pure functions of the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.resources import Resource

from .app_state import RUNNING_STATES, AppState

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node
    from .objects import Allocation, Ask
    from .partition import Partition
    from .queue import Queue

__all__ = ["partition_snapshot", "queue_dao", "app_dao", "node_dao", "alloc_dao", "ask_dao",
           "usage_dao"]

INT32_MIN = -(1 << 31)


def _res(r: Resource | None) -> dict[str, int] | None:
    return r.as_dict() if r is not None else None


def _percent(used: Resource, total: Resource | None) -> dict[str, int]:
    """int(used/total*100) per type of ``used`` that ``total`` defines (YuniKorn's abs usage)."""
    if total is None:
        return {}
    out = {}
    for k, v in used.items():
        t = total.get(k, 0)
        if t > 0:
            out[k] = int(v * 100 / t)
    return out


def alloc_dao(al: "Allocation", partition: str) -> dict:
    return {
        "allocationKey": al.key, "allocationTags": dict(al.tags), "requestTime": al.create_time_ns,
        "allocationTime": al.create_time_ns, "allocationDelay": 0, "uuid": al.uuid,
        "resource": al.resource.as_dict(), "priority": str(al.priority), "nodeId": al.node_id,
        "applicationId": al.app_id, "partition": partition, "queueName": al.queue_path,
        "placeholder": al.placeholder, "placeholderUsed": False, "taskGroupName": al.task_group,
        "preempted": False,
    }


def ask_dao(a: "Ask", partition: str, placeholder_timeout_ms: int) -> dict:
    log = [{"message": a.sched_reason, "lastOccurrence": a.sched_time_ns, "count": 1}] \
        if a.sched_reason else []
    return {
        "allocationKey": a.key, "allocationTags": dict(a.tags), "requestTime": a.create_time_ns,
        "resource": a.resource.as_dict(), "pendingCount": a.pending, "priority": str(a.priority),
        "requiredNodeId": a.required_node, "applicationId": a.app_id, "partition": partition,
        "placeholder": a.placeholder, "placeholderTimeout": placeholder_timeout_ms if a.placeholder else 0,
        "taskGroupName": a.task_group, "allocationLog": log, "triggeredPreemption": a.triggered_preemption,
    }


def app_dao(app: "Application", partition: str) -> dict:
    allocs = list(app.allocations.values())
    return {
        "applicationID": app.app_id,
        "usedResource": app.allocated.prune().as_dict(),
        "maxUsedResource": app.max_used.prune().as_dict(),
        "pendingResource": app.pending.prune().as_dict(),
        "partition": partition,
        "queueName": app.queue.path,
        "submissionTime": app.submission_time_ns,
        "finishedTime": app.finished_ns or None,
        "requests": [ask_dao(a, partition, app.execution_timeout_ms)
                     for a in app.asks.values() if a.pending > 0],
        "allocations": [alloc_dao(al, partition) for al in allocs],
        "applicationState": app.state.value,
        "lastStateChangeTime": app.state_time_ns,
        "user": app.user,
        "groups": list(app.groups),
        "rejectedMessage": app.message if app.state is AppState.REJECTED else "",
        "stateLog": [{"time": t, "applicationState": s} for t, s in app.state_log],
        "placeholderData": [{"taskGroupName": d.task_group, "count": d.count,
                             "minResource": d.min_resource.as_dict(), "replaced": d.replaced,
                             "timedout": d.timedout} for d in app.ph_data.values()],
        "hasReserved": bool(app.reservations),
        "reservations": [r.app_key for r in app.reservations.values()],
        "maxRequestPriority": app.max_pending_priority(),
        "minAllocationPriority": min((al.priority for al in allocs), default=INT32_MIN),
    }


def queue_dao(q: "Queue", current_priority: dict | None = None) -> dict:
    accepted = [a.app_id for a in q.apps.values() if a.state is AppState.ACCEPTED and a.allocations]
    return {
        "queuename": q.path,
        "status": q.state.value,
        "pendingResource": q.pending.prune().as_dict(),
        "maxResource": _res(q.max),
        "guaranteedResource": _res(q.guaranteed),
        "allocatedResource": q.allocated.prune().as_dict(),
        "preemptingResource": q.preempting.prune().as_dict(),
        "isLeaf": q.is_leaf,
        "isManaged": not q.dynamic,
        "properties": dict(q.properties),
        "parent": q.parent.path if q.parent else "",
        "template": _template_dao(q),
        "children": [queue_dao(c, current_priority) for c in q.children.values()],
        "absUsedCapacity": _percent(q.allocated, q.max),
        "maxRunningApps": q.max_apps,
        "runningApps": q.running_apps,
        "currentPriority": _current_priority(q),
        "allocatingAcceptedApps": accepted,
        "submitACL": q.submit_acl.text,
        "adminACL": q.admin_acl.text,
    }


def _current_priority(q: "Queue") -> int:
    cur = INT32_MIN
    if q.is_leaf:
        for app in q.apps.values():
            if app.has_pending():
                cur = max(cur, app.max_pending_priority())
    else:
        for c in q.children.values():
            if not c.pending.is_zero():
                cur = max(cur, _current_priority(c))
    return q.priority_value(cur)


def _template_dao(q: "Queue") -> dict | None:
    t = q.template
    if t is None:
        return None
    return {"maxApplications": t.maxapplications, "properties": dict(t.properties),
            "maxResource": dict(t.resources.max) or None,
            "guaranteedResource": dict(t.resources.guaranteed) or None}


def node_dao(n: "Node", partition: str) -> dict:
    return {
        "nodeID": n.node_id, "hostName": n.attributes.get("si/hostname", ""),
        "rackName": n.attributes.get("si/rackname", ""), "partition": partition,
        "attributes": dict(n.attributes),
        "capacity": n.capacity.as_dict(), "allocated": n.allocated.prune().as_dict(),
        "occupied": n.occupied.prune().as_dict(), "available": n.available.as_dict(),
        "utilized": _percent(n.allocated, n.capacity),
        "allocations": [alloc_dao(al, partition) for al in n.allocations.values()],
        "schedulable": n.schedulable, "ready": n.ready,
        "isReserved": n.reservation is not None,
        "reservations": [n.reservation.node_key] if n.reservation else [],
    }


def usage_dao(p: "Partition") -> dict:
    """User and group usage per queue path, with the limit that applies where one is set
    (YuniKorn v1.3 ``maxResources`` / ``maxApplications``). The group of an app is the one
    its limits resolve to (first group named in a group limit), else its first group."""
    users: dict[str, dict] = {}
    groups: dict[str, dict] = {}
    lt = p.limits
    for app in p.apps.values():
        if not app.user:
            continue
        group = (lt.group_of(app) if lt.active else "") \
            or (app.groups[0] if app.groups else app.user)
        u = users.setdefault(app.user, {"userName": app.user, "groups": {}, "_tree": {}})
        u["groups"][app.app_id] = group
        g = groups.setdefault(group, {"groupName": group, "applications": [], "_tree": {}})
        g["applications"].append(app.app_id)
        for tree in (u["_tree"], g["_tree"]):
            _add_usage(tree, app)
    for d in users.values():
        d["queues"] = _usage_tree(d.pop("_tree"), "root", lt, "user", d["userName"])
    for d in groups.values():
        d["queues"] = _usage_tree(d.pop("_tree"), "root", lt, "group", d["groupName"])
    return {"users": list(users.values()), "groups": list(groups.values())}


def _add_usage(tree: dict, app: "Application") -> None:
    q = app.queue
    while q is not None:
        e = tree.setdefault(q.path, {"res": Resource(), "running": []})
        e["res"] = e["res"].add(app.allocated)
        if app.state in RUNNING_STATES:
            e["running"].append(app.app_id)
        q = q.parent


def _usage_tree(tree: dict, path: str, lt, kind: str, name: str) -> dict:
    e = tree.get(path, {"res": Resource(), "running": []})
    depth = path.count(".") + 1
    kids = sorted(k for k in tree if k.startswith(path + ".") and k.count(".") == depth)
    out = {"queuePath": path, "resourceUsage": {"Resources": e["res"].prune().as_dict()},
           "runningApplications": e["running"],
           "children": [_usage_tree(tree, k, lt, kind, name) for k in kids]}
    lim = lt.limit_for(path, kind, name) if lt.active else None
    if lim is not None:
        if lim.max is not None:
            out["maxResources"] = {"Resources": lim.max.as_dict()}
        if lim.max_apps:
            out["maxApplications"] = lim.max_apps
    return out


def partition_snapshot(p: "Partition", partition: str, cluster_id: str) -> dict:
    """The whole partition: summary, queue tree, apps (active and finished), nodes, usage."""
    apps = list(p.apps.values()) + list(p.finished_apps.values())
    counts: dict[str, int] = {"total": len(p.apps)}
    for a in apps:
        counts[a.state.value] = counts.get(a.state.value, 0) + 1
    root = queue_dao(p.root)
    root["partition"] = partition
    return {
        "partition": {
            "clusterId": cluster_id, "name": partition, "state": p.state.value,
            "lastStateTransitionTime": p.state_time_ns,
            "capacity": {"capacity": p.total.as_dict(),
                         "usedCapacity": p.root.allocated.prune().as_dict(),
                         "utilization": _percent(p.root.allocated, p.total)},
            "nodeSortingPolicy": {"type": p.nodes.policy.value,
                                  "resourceWeights": dict(p.nodes.weights)},
            "applications": counts,
            "totalNodes": len(p.nodes), "totalApplications": len(p.apps),
            "totalContainers": len(p.allocations),
            "runningApplications": sum(1 for a in p.apps.values() if a.state in RUNNING_STATES),
            "activeNodes": sum(1 for n in p.nodes.nodes.values() if n.usable),
            "pendingContainers": sum(a.pending for app in p.apps.values() for a in app.asks.values()
                                     if a.pending > 0),
        },
        "queues": root,
        "applications": [app_dao(a, partition) for a in apps],
        "nodes": [node_dao(n, partition) for n in p.nodes.nodes.values()],
        "reservations": [{"nodeID": r.node_id, "applicationID": r.app_id,
                          "allocationKey": r.ask_key} for r in p.reservations.values()],
        "usage": usage_dao(p),
    }
