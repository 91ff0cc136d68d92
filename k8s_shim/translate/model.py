"""The shim's books: applications, tasks (our pods), foreign pods and nodes, and the SI v1.8
messages that report them. Plain data; ``k8s_shim.shim`` changes it.

A task is where its pod stands for the scheduler: ``where`` is ``NOWHERE`` (not in the core:
waiting for its application's verdict, its node's registration, a scheduling gate, a fix of a
bad field, or a retry after a refused bind), ``ASKED`` (an ask), ``PLACED`` (an allocation on
``node``: ours, being bound or bound, or a pod already running there). ``hold`` says why an
unplaced task is not asked for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import orjson

from common import si_v18_pb2 as si
from common.constants import (APP_TAG_CREATE_FORCE, APP_TAG_NAMESPACE, DOMAIN_YUNIKORN, TAG_APP_TASK_GROUPS,
                              TAG_FOREIGN, TAG_NODE_AFFINITY, TAG_NODE_REQUIREMENTS, TAG_POD_AFFINITY,
                              TAG_SCHEDULING_POLICY_PARAMETERS, TAG_GANG_TOPOLOGY,
                              TAG_UNSUPPORTED_CONSTRAINTS)
from common.si_resource import fill_si_resource
from k8s_shim.translate.gang import AppGang, placeholder_ask
from k8s_shim.translate.nodes import NodeState
from k8s_shim.translate.pods import PodSpec, PodState

__all__ = ["Where", "Hold", "Task", "App", "AppState", "NodeEntry", "NodePhase", "Foreign", "ask", "placed", "books",
           "foreign_allocation", "release", "foreign_release", "add_application", "exclude_nodes",
           "TAG_CREATION_TIME_APP"]

TAG_CREATION_TIME_APP = DOMAIN_YUNIKORN + "creationTime"
APP_TAG_IMAGE_PULL_SECRETS = "imagePullSecrets"


class Where(enum.Enum):
    NOWHERE = "nowhere"
    ASKED = "asked"
    PLACED = "placed"


class Hold(enum.Enum):
    NONE = ""
    GATES = "scheduling gates"
    INVALID = "invalid pod"
    RETRY = "retrying after a refused bind"
    REJECTED = "rejected by the scheduler"
    GONE = "waiting for the API server's word: the pod went, or is bound elsewhere"
    GANG = "waiting for its gang's placeholders to be asked for"


class AppState(enum.Enum):
    NAMESPACE = "Namespace"  # waiting to read its namespace's annotations (its tags) before it is added
    PARTITION = "Partition"  # its partition is not in the configuration (k8s_shim.pools): not added
    NEW = "New"  # AddApplication sent, no verdict yet
    ACCEPTED = "Accepted"


class NodePhase(enum.Enum):
    REGISTERING = "registering"  # CREATE_DRAIN sent, no verdict yet
    REGISTERED = "registered"
    REJECTED = "rejected"


@dataclass(slots=True, eq=False)
class Task:
    pod: PodState
    where: Where = Where.NOWHERE
    node: str = ""  # the node it is placed on, being bound to, or running on
    hold: Hold = Hold.NONE
    attempt: int = 0  # allocations received: a bind result of an older one is stale
    bound: bool = False  # the binding is written (ours or seen on the pod)
    announced: bool = False  # the "queued" event was posted
    avoid: dict[str, float] = field(default_factory=dict)  # node -> until (monotonic): refused binds
    retries: int = 0
    condition: tuple[str, str] = ("", "")  # the PodScheduled reason and message we wrote last
    constraints: tuple[str, ...] = ()  # what the ask carries in TAG_UNSUPPORTED_CONSTRAINTS
    affinity: str = ""  # TAG_POD_AFFINITY resolved against the namespaces' labels (a term with a namespaceSelector)
    group: str = ""  # the task group its ask names (a placeholder's, or a real member's of a known group)
    sent: dict[str, int] | None = None  # the size its last resize asked for
    booked: dict[str, int] | None = None  # the size the core books when it refused the pod's (a resize)
    # TAG_NODE_REQUIREMENTS by concern ("volumes", "devices", ...): lists of {reason, nodeSelector, retry}
    requirements: dict[str, list[dict]] = field(default_factory=dict)
    excluded: dict[str, tuple[float, str]] = field(default_factory=dict)  # node -> (until, reason): failed pre-binds
    counted: dict[str, int] = field(default_factory=dict)  # counted resources beside its size (CSI volumes to attach)

    @property
    def size(self) -> dict[str, int]:
        """The size the core books for it (placed), as far as the shim knows."""
        return self.booked if self.booked is not None else self.pod.spec.resource

    uid: str = field(init=False)  # the pod's (read often: plain attributes, not properties)
    spec: PodSpec = field(init=False)  # the pod's: ``follow`` keeps it so

    def __post_init__(self) -> None:
        self.uid, self.spec = self.pod.uid, self.pod.spec

    def follow(self, pod: PodState) -> None:
        """The pod as the API server has it now."""
        self.pod, self.spec = pod, pod.spec


@dataclass(slots=True, eq=False)
class App:
    app_id: str
    namespace: str
    queue: str
    user: str
    groups: tuple[str, ...]
    tags: dict[str, str]
    state: AppState = AppState.NEW
    tasks: set[str] = field(default_factory=set)
    originator: str = ""  # the uid of the pod that made the app (YuniKorn's originator task)
    created: int = 0
    gang: AppGang | None = None  # its task groups and placeholders (k8s_shim.writes.placeholders)


@dataclass(slots=True, eq=False)
class NodeEntry:
    state: NodeState
    phase: NodePhase = NodePhase.REGISTERING
    enabled: bool = False  # DRAIN_TO_SCHEDULABLE sent: the core may place pods here
    awaiting: set[str] = field(default_factory=set)  # placed allocations not confirmed yet

    @property
    def name(self) -> str:
        return self.state.name


@dataclass(slots=True, eq=False)
class Foreign:
    spec: PodSpec
    node: str
    reported: bool = False
    affinity: str = ""  # as Task.affinity


def _resource(values: dict[str, int]) -> si.Resource:
    return fill_si_resource(si.Resource(), values)


def exclude_nodes(required: str | None, nodes: list[str]) -> str:
    """The required node affinity (JSON NodeSelector, or None) that also excludes ``nodes``: each
    term gets a ``metadata.name NotIn`` field match (terms are ORed, a term's matches ANDed)."""
    exclusion = {"key": "metadata.name", "operator": "NotIn", "values": sorted(nodes)}
    terms = orjson.loads(required).get("nodeSelectorTerms") or [] if required else []
    if not terms:
        terms = [{}]
    out = []
    for term in terms:
        term = dict(term)
        term["matchFields"] = [*(term.get("matchFields") or []), exclusion]
        out.append(term)
    return orjson.dumps({"nodeSelectorTerms": out}).decode()


def _allocation(task: Task, app: App, allow_self: bool) -> si.Allocation:
    spec = task.spec
    placeholder = bool(task.group) and spec.gang is not None and spec.gang.placeholder
    size = {**spec.resource, **task.counted} if task.counted else spec.resource
    return si.Allocation(allocationKey=spec.uid, applicationID=app.app_id, resourcePerAlloc=_resource(size),
                         priority=spec.priority, originator=spec.uid == app.originator,
                         taskGroupName=task.group, placeholder=placeholder,
                         preemptionPolicy=si.PreemptionPolicy(allowPreemptSelf=allow_self,
                                                              allowPreemptOther=spec.preempt_others))


def ask(task: Task, app: App, allow_self: bool, avoid: list[str]) -> si.Allocation:
    """The ask for ``task``: its tags, the constraints Korral does not evaluate, and the nodes a
    refused bind excluded."""
    a = _allocation(task, app, allow_self)
    a.allocationTags.update(task.spec.tags)
    if task.affinity:
        a.allocationTags[TAG_POD_AFFINITY] = task.affinity
    if task.constraints:
        a.allocationTags[TAG_UNSUPPORTED_CONSTRAINTS] = ", ".join(task.constraints)
    if avoid:
        a.allocationTags[TAG_NODE_AFFINITY] = exclude_nodes(task.spec.tags.get(TAG_NODE_AFFINITY), avoid)
    required = node_requirements(task)
    if required:
        a.allocationTags[TAG_NODE_REQUIREMENTS] = orjson.dumps(required).decode()
    return a


def node_requirements(task: Task) -> list[dict]:
    """The ask's further node selectors: each concern's, and the nodes excluded for a while (one
    ``metadata.name NotIn`` selector per reason)."""
    out = [r for concern in sorted(task.requirements) for r in task.requirements[concern]]
    by_reason: dict[str, list[str]] = {}
    for node, (_, reason) in sorted(task.excluded.items()):
        by_reason.setdefault(reason, []).append(node)
    for reason, nodes in by_reason.items():
        out.append({"reason": reason, "retry": True, "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": nodes}]}]}})
    return out


def placed(task: Task, app: App, allow_self: bool) -> si.Allocation:
    """An allocation the core must book as it is: a pod running (or being bound) on its node."""
    a = _allocation(task, app, allow_self)
    a.allocationTags.update(task.spec.tags)
    if task.affinity:
        a.allocationTags[TAG_POD_AFFINITY] = task.affinity
    a.nodeID = task.node
    return a


def foreign_allocation(pod: Foreign) -> si.Allocation:
    """A pod of another scheduler on its node (tag ``foreign``: ``static`` for a static pod)."""
    spec = pod.spec
    a = si.Allocation(allocationKey=spec.uid, nodeID=pod.node, resourcePerAlloc=_resource(spec.resource),
                      priority=spec.priority)
    a.allocationTags.update(spec.tags)
    if pod.affinity:
        a.allocationTags[TAG_POD_AFFINITY] = pod.affinity
    a.allocationTags[TAG_FOREIGN] = "static" if spec.static else "default"
    return a


def release(task_uid: str, app_id: str, message: str) -> si.AllocationRelease:
    return si.AllocationRelease(applicationID=app_id, allocationKey=task_uid, terminationType=si.STOPPED_BY_RM,
                                message=message)


def foreign_release(uid: str) -> si.AllocationRelease:
    return si.AllocationRelease(allocationKey=uid, terminationType=si.STOPPED_BY_RM, message="pod terminated")


def add_application(app: App, force: bool) -> si.AddApplicationRequest:
    """YuniKorn's AddApplicationRequest; ``force`` (application.create.force) when one of its pods
    already runs: the core then never rejects it."""
    tags = dict(app.tags)
    tags[APP_TAG_NAMESPACE] = app.namespace
    tags[APP_TAG_CREATE_FORCE] = "true" if force else "false"
    if app.created:
        tags[TAG_CREATION_TIME_APP] = str(app.created)
    request = si.AddApplicationRequest(applicationID=app.app_id, queueName=app.queue,
                                       ugi=si.UserGroupInformation(user=app.user, groups=list(app.groups)), tags=tags)
    gang = app.gang
    if gang is not None:  # YuniKorn's shim: the gang's size, timeout and style, and both annotations as tags
        tags = request.tags
        tags[TAG_APP_TASK_GROUPS] = gang.groups_raw
        tags[TAG_SCHEDULING_POLICY_PARAMETERS] = gang.policy_raw
        if gang.groups:
            request.placeholderAsk.CopyFrom(_resource(placeholder_ask(gang.groups)))
        request.executionTimeoutMilliSeconds = gang.timeout_seconds * 1000
        request.gangSchedulingStyle = gang.style
        if gang.topology:
            tags[TAG_GANG_TOPOLOGY] = gang.topology
    return request


def app_tags(spec: PodSpec, namespace_tags: dict[str, str]) -> dict[str, str]:
    """An application's tags from its first pod and its namespace (YuniKorn's getAppMetadata)."""
    tags = dict(namespace_tags)
    if spec.image_pull_secrets:
        tags[APP_TAG_IMAGE_PULL_SECRETS] = ",".join(spec.image_pull_secrets)
    return tags


def books(nodes: dict[str, NodeEntry], node_pods: dict[str, set[str]], tasks: dict[str, Task],
          foreign: dict[str, Foreign], apps: dict[str, App]) -> dict:
    """The books as the state dump shows them: each node with the pods assumed on it (ours placed
    or bound there, and other schedulers'), tasks counted by where they are and why they wait,
    applications."""
    out_nodes = {}
    for name, entry in nodes.items():
        used: dict[str, int] = {}
        for uid in node_pods.get(name, ()):
            task, other = tasks.get(uid), foreign.get(uid)
            size = other.spec.resource if other is not None else task.size if task is not None and task.node == name \
                else None
            if other is None and size is not None and task.counted:
                size = {**size, **task.counted}  # the CSI volumes it attaches
            for k, v in (size.items() if size is not None else ()):
                used[k] = used.get(k, 0) + v
        out_nodes[name] = {"phase": entry.phase.value, "enabled": entry.enabled, "awaiting": len(entry.awaiting),
                           "cordoned": entry.state.unschedulable, "allocatable": entry.state.allocatable,
                           "assumed": used}
    counts: dict[str, int] = {}
    for task in tasks.values():
        key = task.where.value + (f"/{task.hold.name.lower()}" if task.hold is not Hold.NONE else "")
        counts[key] = counts.get(key, 0) + 1
    return {"nodes": out_nodes, "tasks": counts, "foreignPods": len(foreign),
            "applications": {a.app_id: {"state": a.state.value, "queue": a.queue, "tasks": len(a.tasks)}
                             for a in apps.values()}}
