"""Plain JSON-able views of the partition with YuniKorn's REST field names (REST_API.md).

What it owns: every view of the core's objects (queue, application, ask, allocation, node,
reservation, partition summary, node utilisation, placement rules, user/group usage), built in
one place so REST, ``korral status`` and ``PartitionSession.snapshot`` show the same thing; the
views computed over the whole partition (health checks, metric gauges) are ``dao_totals``.
Field names and types are YuniKorn 1.9's (``pkg/webservice/dao``); where YuniKorn omits an
empty field, Korral sends it (``null``, ``{}``, ``[]``, ``0``) so clients of every version find it
(docs/yunikorn-compat.md), and the v1.2 fields YuniKorn dropped stay (each view says which).
Who may use it: ``partition_worker.queries`` (REST queries: selection, paging, encoding)
and ``PartitionSession.snapshot``. Pure functions of the state; nothing here writes to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from common.config.policies import PROPERTY_PREEMPTION_DELAY, PROPERTY_PREEMPTION_POLICY
from common.constants import HOST_NAME, K8S_HOST_NAME, K8S_RACK_NAME, RACK_NAME
from common.resources import Resource
from common.timefmt import go_duration, rfc3339_nano

from .app_state import RUNNING_STATES, AppState
from .objects import INT32_MIN
from .outcomes import SchedState
from .preemption import parse_delay_ns
from .queue import RECOVERY_QUEUE

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .foreign import ForeignAllocation
    from .node import Node
    from .objects import Allocation, Ask, Reservation
    from .partition import Partition
    from .queue import Queue

__all__ = ["partition_snapshot", "partition_dao", "queues_dao", "queue_dao", "app_dao",
           "app_summary", "node_dao", "heatmap_row", "alloc_dao", "ask_dao", "reservation_dao",
           "usage_dao", "all_apps", "node_utilisation", "utilisation_bucket", "int_percent",
           "placement_rules_dao", "foreign_alloc_dao", "INT32_MIN"]

# REST partition summary: YuniKorn counts Completing apps as running, New/Accepted as pending
_PENDING_STATES = (AppState.NEW, AppState.ACCEPTED)
_REST_RUNNING_STATES = (AppState.STARTING, AppState.RUNNING, AppState.COMPLETING)


def _res(r: Resource | None) -> dict[str, int] | None:
    return r.as_dict() if r is not None else None


def int_percent(used: int, capacity: int) -> int:
    """YuniKorn's CalculateAbsUsedCapacity for one type: 0 when nothing is used, 100 when used
    without capacity, else the truncated percentage."""
    if used <= 0:
        return 0
    return 100 if capacity <= 0 else int(used * 100 / capacity)


def _percent(used: Mapping[str, int], total: Mapping[str, int] | None) -> dict[str, int]:
    """YuniKorn's CalculateAbsUsedCapacity: ``int_percent`` per type of ``total`` that ``used``
    has (Resources or plain dicts)."""
    if total is None:
        return {}
    return {k: int_percent(used[k], t) for k, t in total.items() if k in used}


def all_apps(p: "Partition") -> list["Application"]:
    """Active then finished applications (what REST lists)."""
    return list(p.apps.values()) + list(p.finished_apps.values())


# ------------------------------------------------------------------------------ partition
def partition_dao(p: "Partition", partition: str, rm_id: str) -> dict:
    """The partition summary (PartitionInfo plus Korral's cycle counters)."""
    apps = all_apps(p)
    states: dict[str, int] = {}
    for a in apps:
        states[a.state.value] = states.get(a.state.value, 0) + 1
    nodes = p.nodes.nodes.values()
    active = sum(1 for n in nodes if n.usable)
    pending_containers = sum(k.pending for a in p.apps.values() for k in a.asks.values() if k.pending > 0)
    cap = p.total.as_dict()
    used = p.root.allocated.prune().as_dict()
    return {
        "name": partition, "clusterId": rm_id, "rmID": rm_id, "state": p.state.value,
        "lastStateTransitionTime": p.state_time_ns,
        "capacity": {"capacity": cap, "usedCapacity": used, "utilization": _percent(used, cap)},
        "nodeSortingPolicy": {"type": p.nodes.policy.value, "resourceWeights": dict(p.nodes.weights)},
        "preemptionEnabled": p.preemption_enabled,
        "quotaPreemptionEnabled": p.config.preemption.quotapreemptionenabled,
        "applications": {**states, "total": len(apps)},
        "totalApplications": len(apps),
        "runningApplications": sum(1 for a in apps if a.state in _REST_RUNNING_STATES),
        "pendingApplications": sum(1 for a in apps if a.state in _PENDING_STATES),
        "completedApplications": states.get(AppState.COMPLETED.value, 0),
        "failedApplications": states.get(AppState.FAILED.value, 0) + states.get(AppState.REJECTED.value, 0),
        "totalContainers": len(p.allocations), "runningContainers": len(p.allocations),
        "pendingContainers": pending_containers, "failedContainers": 0,
        "totalNodes": len(p.nodes), "activeNodes": active,
        "failedNodes": sum(1 for n in nodes if not n.ready),
        "cycles": p.cycles, "lastCycleTime": p.last_cycle_ns,
    }


# ------------------------------------------------------------------------------ allocations, asks
def alloc_dao(al: "Allocation", partition: str) -> dict:
    """AllocationDAOInfo, plus v1.2's ``uuid``, ``partition`` and ``queueName``."""
    return {
        "allocationKey": al.key, "allocationTags": dict(al.tags), "requestTime": al.create_time_ns,
        "allocationTime": al.create_time_ns, "allocationDelay": 0, "uuid": al.uuid,
        "resource": al.resource.as_dict(), "priority": str(al.priority), "nodeId": al.node_id,
        "applicationId": al.app_id, "partition": partition, "queueName": al.queue_path,
        "placeholder": al.placeholder, "placeholderUsed": False, "taskGroupName": al.task_group,
        "preempted": False, "originator": al.originator,
    }


def foreign_alloc_dao(fa: "ForeignAllocation") -> dict:
    """ForeignAllocationDAOInfo: a pod of another scheduler the RM reported (tag ``foreign``)."""
    return {
        "allocationKey": fa.key, "allocationTags": dict(fa.tags), "allocationTime": fa.create_time_ns,
        "resource": fa.resource.as_dict(), "priority": str(fa.priority), "nodeId": fa.node_id,
        "preemptable": fa.preemptable,
    }


def ask_dao(a: "Ask", partition: str, placeholder_timeout_ms: int) -> dict:
    """AllocationAskDAOInfo, plus v1.2's ``pendingCount``, ``partition`` and ``placeholderTimeout``.
    ``schedulingAttempted``: a scheduling state was reported for the ask; ``triggeredScaleUp``:
    the last one told the RM it waits for cluster resources (FAILED), as YuniKorn's does."""
    log = [{"message": a.sched_reason, "lastOccurrence": a.sched_time_ns, "count": 1}] \
        if a.sched_reason else []
    if a.preemption_log is not None:  # why queue preemption did not help (YuniKorn's text)
        message, count, last = a.preemption_log
        log.append({"message": message, "lastOccurrence": last, "count": count})
    return {
        "allocationKey": a.key, "allocationTags": dict(a.tags), "requestTime": a.create_time_ns,
        "resource": a.resource.as_dict(), "pendingCount": a.pending, "priority": str(a.priority),
        "requiredNodeId": a.required_node, "applicationId": a.app_id, "partition": partition,
        "placeholder": a.placeholder, "placeholderTimeout": placeholder_timeout_ms if a.placeholder else 0,
        "taskGroupName": a.task_group, "allocationLog": log, "triggeredPreemption": a.triggered_preemption,
        "originator": a.originator, "schedulingAttempted": a.sched_state is not None,
        "triggeredScaleUp": a.sched_state is SchedState.FAILED,
    }


def reservation_dao(r: "Reservation") -> dict:
    return {"nodeID": r.node_id, "applicationID": r.app_id, "allocationKey": r.ask_key,
            "created": r.created_ns}


# ------------------------------------------------------------------------------ applications
def app_dao(app: "Application", partition: str) -> dict:
    """ApplicationDAOInfo, plus v1.2's ``lastStateChangeTime`` and ``minAllocationPriority``.
    ``placeholderData`` (count, replaced, timedout) is kept once a placeholder of the app is
    allocated; before that, the task groups are shown as the placeholder asks declare them."""
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
                             "timedout": d.timedout} for d in app.ph_data.values()]
        or _declared_task_groups(app),
        "hasReserved": bool(app.reservations),
        "reservations": [r.ask_key for r in app.reservations.values()],
        "maxRequestPriority": app.max_pending_priority(),
        "minAllocationPriority": min((al.priority for al in allocs), default=INT32_MIN),
        "startTime": _start_ms(app),
        "resourceHistory": {k: v for k, v in (app.resource_history or {}).items() if v},
        "backoffDeadline": rfc3339_nano(app.backoff_deadline_ns) if app.backoff_deadline_ns else None,
        "korralTopology": _topology_dao(app.topology),
    }


def _topology_dao(t) -> dict | None:
    """Korral: the gang's topology request (``topology.GangTopology``), the domain it got (level
    name -> domain, widest first; None: none yet; kept once its placeholders are replaced),
    whether it holds it now (``pinned``: while a placeholder of it is allocated, or about to be)
    and why it waits or went anywhere."""
    if t is None:
        return None
    return {"level": t.level, "mode": t.mode, "domain": dict(t.domain) if t.domain else None,
            "pinned": t.pin is not None, "reason": t.reason}


def _start_ms(app: "Application") -> int:
    """When the app first entered Running, in milliseconds (YuniKorn's REST ``startTime``, 1.6);
    0 before. (The app summary's StartTime is ``start_ns``: Starting or Running, whichever came first.)"""
    for t, state in app.state_log:
        if state == AppState.RUNNING.value:
            return t // 1_000_000
    return 0


def _declared_task_groups(app: "Application") -> list[dict]:
    """Task groups as the placeholder asks declare them, before any is allocated (nothing
    replaced or timed out yet)."""
    groups: dict[str, dict] = {}
    for ask in app.asks.values():
        if ask.placeholder and ask.task_group:
            g = groups.setdefault(ask.task_group, {"taskGroupName": ask.task_group, "count": 0,
                                                   "minResource": ask.resource.as_dict(),
                                                   "replaced": 0, "timedout": 0})
            g["count"] += ask.max_allocations
    return list(groups.values())


def app_summary(a: "Application") -> dict:
    """One small row per application (no allocation views): the dashboard's list."""
    return {"applicationID": a.app_id, "queueName": a.queue.path, "user": a.user,
            "applicationState": a.state.value, "allocations": len(a.allocations),
            "pendingCount": sum(k.pending for k in a.asks.values() if k.pending > 0),
            "usedResource": a.allocated.prune().as_dict(), "submissionTime": a.submission_time_ns}


# ------------------------------------------------------------------------------ queues
def queues_dao(p: "Partition", partition: str) -> dict:
    """The queue tree; YuniKorn sets ``partition`` on the root only."""
    root = queue_dao(p.root, p.settings.preemption_delay_ns)
    root["partition"] = partition
    return root


def queue_dao(q: "Queue", default_delay_ns: int, parent_headroom: Resource | None = None) -> dict:
    """PartitionQueueDAOInfo with its subtree, plus Korral's ``submitACL`` and ``adminACL``; the
    quota preemption and ask backoff fields as yunikorn-site documents them (YUNIKORN-3277):
    ``quotaPreemptionStartTime`` when the armed enforcement is due (ns, 0: not armed).
    ``default_delay_ns``: the partition's default ``preemption.delay``; ``parent_headroom``: the
    parent's ``headroom`` (None for root)."""
    accepted = [a.app_id for a in q.apps.values() if a.state is AppState.ACCEPTED and a.allocations]
    headroom = _headroom(q, parent_headroom)
    props = q.properties
    policy = props.get(PROPERTY_PREEMPTION_POLICY, "").lower()
    return {
        "queuename": q.path,
        "status": q.state.value,
        "partition": "",  # the root's is set by queues_dao, as YuniKorn's
        "pendingResource": q.pending.prune().as_dict(),
        "maxResource": _res(q.max),
        "guaranteedResource": _res(q.guaranteed),
        "allocatedResource": q.allocated.prune().as_dict(),
        "preemptingResource": q.preempting.prune().as_dict(),
        "headroom": headroom.as_dict() if headroom is not None else None,
        "isLeaf": q.is_leaf,
        "isManaged": not q.dynamic,
        "properties": dict(props),
        "parent": q.parent.path if q.parent else "",
        "template": _template_dao(q),
        "children": [queue_dao(c, default_delay_ns, headroom) for c in q.children.values()],
        "childNames": [c.path for c in q.children.values()],
        "absUsedCapacity": _percent(q.allocated, q.max),
        "maxRunningApps": q.max_apps,
        "runningApps": q.running_apps,
        "currentPriority": _current_priority(q),
        "allocatingAcceptedApps": accepted,
        "sortingPolicy": q.sort_policy.value,
        "prioritySorting": q.priority_enabled,
        "preemptionEnabled": policy != "disabled",
        "isPreemptionFence": policy == "fence",
        "preemptionDelay": go_duration(parse_delay_ns(props.get(PROPERTY_PREEMPTION_DELAY), default_delay_ns)),
        "quotaPreemptionDelay": go_duration(q.quota_preemption_delay_ns),
        "isPriorityFence": q.priority_fence,
        "priorityOffset": q.priority_offset,
        # Korral enforces a queue's quota within one step, so no read ever sees it running
        "isQuotaPreemptionRunning": False,
        "quotaPreemptionStartTime": q.quota_preemption_at_ns,
        "unschedAskBackoff": q.backoff_threshold,
        "askBackoffDelay": go_duration(q.backoff_delay_ns),
        "submitACL": q.submit_acl.text,
        "adminACL": q.admin_acl.text,
    }


def _headroom(q: "Queue", parent: Resource | None) -> Resource | None:
    """YuniKorn's headroom: for the types of this queue's max, max - allocated, then the
    permissive component-wise min with the parent's headroom; without a max, the parent's.
    Root's max is the partition's size (None without nodes: no headroom)."""
    if q.max is None:
        return parent
    own = Resource({k: v - q.allocated.get(k) for k, v in q.max.items()})
    return own if parent is None else own.component_wise_min_permissive(parent)


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


# ------------------------------------------------------------------------------ nodes
def node_dao(n: "Node", partition: str, with_allocations: bool = True, without_zeros: bool = False) -> dict:
    """NodeDAOInfo, plus v1.2's ``partition`` and Korral's ``ready``; host and rack also from the
    k8s shim's ``si.io/`` attributes. The RM's foreign allocations (``core.foreign``) are
    ``foreignAllocations``.
    Without ``with_allocations`` the view has no ``allocations`` key (the dump adds shared ones).
    ``without_zeros`` (compatibility 1.9, ``Compat.node_capacity_without_zeros``): the capacity
    leaves out its zero-valued types, and so do available and utilized (a type fully used stays)."""
    attrs = n.attributes
    capacity = n.capacity.prune() if without_zeros else n.capacity
    available = n.available.as_dict()
    if without_zeros:
        available = {k: v for k, v in available.items() if v or k in capacity}
    d = {
        "nodeID": n.node_id,
        "hostName": attrs.get(HOST_NAME) or attrs.get(K8S_HOST_NAME, ""),
        "rackName": attrs.get(RACK_NAME) or attrs.get(K8S_RACK_NAME, ""),
        "partition": partition, "attributes": dict(attrs),
        "capacity": capacity.as_dict(), "allocated": n.allocated.prune().as_dict(),
        "occupied": n.occupied.prune().as_dict(), "available": available,
        "utilized": _percent(n.allocated, capacity),
    }
    if with_allocations:
        d["allocations"] = [alloc_dao(al, partition) for al in n.allocations.values()]
    d.update({
        "foreignAllocations": [foreign_alloc_dao(fa) for fa in n.foreign.values()],
        "schedulable": n.schedulable, "ready": n.ready,
        "isReserved": n.reservation is not None,
        "reservations": [n.reservation.ask_key] if n.reservation is not None else [],
    })
    return d


def heatmap_row(n: "Node") -> list:
    """``[nodeID, highest utilisation % of any resource, schedulable, ready]``."""
    top = 0
    for k, c in n.capacity.items():
        if c > 0:
            top = max(top, int(n.allocated.get(k) * 100 / c))
    return [n.node_id, top, n.schedulable, n.ready]


def utilisation_bucket(percent: int) -> int:
    """Which tenth of utilisation ``percent`` falls in, as YuniKorn buckets nodes: 0-10 % -> 0
    (0 % included), (10, 20] -> 1, ..., (90, 100] -> 9; above 100 % (YuniKorn would fail) -> 9."""
    return min(9, max(-(-percent // 10) - 1, 0))


def node_utilisation(p: "Partition") -> list[dict]:
    """YuniKorn's node utilisations of one partition: per resource type any node advertises
    (sorted by name), ten buckets of the nodes' utilisation with their count and names."""
    buckets: dict[str, list[list[str]]] = {}
    for n in p.nodes.nodes.values():
        for k, c in n.capacity.items():
            b = utilisation_bucket(int_percent(n.allocated.get(k), c))
            buckets.setdefault(k, [[] for _ in range(10)])[b].append(n.node_id)
    return [{"type": k, "utilization": [{"bucketName": f"{i * 10}-{(i + 1) * 10}%", "numOfNodes": len(names),
                                         "nodeNames": names} for i, names in enumerate(buckets[k])]}
            for k in sorted(buckets)]


# ------------------------------------------------------------------------------ placement rules
def placement_rules_dao(p: "Partition") -> list[dict]:
    """The rule chain in effect (YuniKorn's RuleDAO list). Without configured rules (or with a
    set that failed to build at creation) Korral places apps in the queue they name, which
    existing leaf they name: YuniKorn's ``provided`` rule without ``create``. From compatibility
    1.4 the implicit ``recovery`` rule ends the chain, as YuniKorn lists it."""
    rules = p.placement.rules
    out = [_rule_dao(r) for r in rules] if rules else [{"name": "provided", "parameters": {"create": "false"}}]
    if p.settings.compat.recovery_rule:
        out.append({"name": "recovery", "parameters": {"queue": RECOVERY_QUEUE}})
    return out


def _rule_dao(rule) -> dict:
    params = {"create": str(rule.create).lower()}
    if rule.NAME == "fixed":
        params = {"queue": rule.queue, **params, "qualified": str(rule.qualified).lower()}
    elif rule.NAME == "tag":
        params = {"tagName": rule.tag_name, **params}
    d: dict = {"name": rule.NAME, "parameters": params}
    f = rule.filter
    if not f.empty:
        d["filter"] = {"type": "allow" if f.allow else "deny", "userList": sorted(f.users),
                       "groupList": sorted(f.groups), "userExp": f.user_exp.pattern if f.user_exp else "",
                       "groupExp": f.group_exp.pattern if f.group_exp else ""}
    if rule.parent is not None:
        d["parentRule"] = _rule_dao(rule.parent)
    return d


# ------------------------------------------------------------------------------ usage (ugm)
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
    out = {"queuePath": path, "resourceUsage": e["res"].prune().as_dict(),
           "runningApplications": e["running"],
           "children": [_usage_tree(tree, k, lt, kind, name) for k in kids]}
    lim = lt.limit_for(path, kind, name) if lt.active else None
    if lim is not None:
        if lim.max is not None:
            out["maxResources"] = lim.max.as_dict()
        if lim.max_apps:
            out["maxApplications"] = lim.max_apps
    return out


# ------------------------------------------------------------------------------ snapshot
def partition_snapshot(p: "Partition", partition: str, cluster_id: str) -> dict:
    """The whole partition: summary, queue tree, apps (active and finished), nodes,
    reservations, usage (``PartitionSession.snapshot``)."""
    return {
        "partition": partition_dao(p, partition, cluster_id),
        "queues": queues_dao(p, partition),
        "applications": [app_dao(a, partition) for a in all_apps(p)],
        "nodes": [node_dao(n, partition, without_zeros=p.settings.compat.node_capacity_without_zeros)
                  for n in p.nodes.nodes.values()],
        "reservations": [reservation_dao(r) for r in p.reservations.values()],
        "usage": usage_dao(p),
    }
