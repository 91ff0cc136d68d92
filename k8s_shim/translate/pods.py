"""YuniKorn's pod contract: what a pod means to the scheduler, read from its raw JSON once.

``read_pod(raw, rules)`` gives a ``PodSpec``: the application, queue and user the pod belongs to
(YuniKorn's precedence, ``app_identity``), its size as Kubernetes computes it (``pod_size``), its
priority and preemption settings, the ask tags (YuniKorn's, plus the node-check tags the core
evaluates: tolerations, node selector, required node affinity, host ports, and the inter-pod
constraints of ``k8s_shim.translate.interpod``: the pod's labels, its pod (anti-)affinity and its
topology spread constraints) and the constraints Korral does not evaluate. Every input it cannot
use becomes a ``Problem`` naming the field; a blocking one (no containers, a request that is not a
quantity, an affinity term or spread constraint that cannot be read) keeps the pod from being
asked for.

``PodState`` is what the informer keeps per pod: the few fields that change (node, phase,
deletion, scheduling gates) and the ``PodSpec``, read once per pod and reused afterwards (labels
changed later are not followed, as YuniKorn's shim does not follow them). Only its size follows
an in-place resize: every whole decode of a known pod computes it again (``resized``), and the
light reading of a watch line decodes the line whole when its ``resize_mark`` differs from the
pod's last one (``metadata.generation``, which grows when the spec is resized; the resize
being infeasible; container statuses whose allocated or current requests differ from the
spec's), so the lines of a pod nobody resizes stay light.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import attrgetter
from typing import Any, Callable

import logging

import msgspec
import orjson

from common.constants import (DOMAIN_K8S, DOMAIN_YUNIKORN, GROUP_LABEL, TAG_HOST_PORTS, TAG_NAMESPACE,
                              TAG_NODE_AFFINITY, TAG_NODE_SELECTOR_PREFIX, TAG_POD_AFFINITY, TAG_POD_LABELS,
                              TAG_POD_NAME, TAG_REQUIRED_NODE, TAG_TOLERATIONS, TAG_TOPOLOGY_SPREAD, CREATION_TIME)
from k8s_shim.translate import quantity
from k8s_shim.translate.interpod import InterPod, affinity_tag, labels_tag, read_interpod, spread_tag
from k8s_shim.translate.gang import GangSpec, read_gang
from k8s_shim.translate.devices import PodClaim, read_pod_claims
from k8s_shim.watch.informer import FULL, LiteWatch

__all__ = ["PodRules", "PodSpec", "PodState", "Problem", "read_pod", "decoder", "refresher", "lite_watch", "LitePod",
           "LiteEvent", "LITE_DECODER", "app_identity", "pod_size", "resized", "resize_mark",
           "LABEL_APP_ID", "ANNOTATION_APP_ID", "LABEL_APPLICATION_ID", "LABEL_SPARK_APP", "LABEL_QUEUE",
           "ANNOTATION_QUEUE", "LABEL_QUEUE_SHORT", "ANNOTATION_USER_INFO", "LABEL_USER", "DEFAULT_USER",
           "ANNOTATION_ALLOW_PREEMPTION", "ANNOTATION_PARTITION", "TERMINATED"]

# YuniKorn's names (k8shim pkg/common/constants)
LABEL_APP_ID = ANNOTATION_APP_ID = DOMAIN_YUNIKORN + "app-id"
LABEL_APPLICATION_ID = "applicationId"
LABEL_SPARK_APP = "spark-app-selector"
LABEL_QUEUE = ANNOTATION_QUEUE = DOMAIN_YUNIKORN + "queue"
LABEL_QUEUE_SHORT = "queue"
ANNOTATION_USER_INFO = DOMAIN_YUNIKORN + "user.info"
LABEL_USER = DOMAIN_YUNIKORN + "username"  # deprecated in YuniKorn, still read
DEFAULT_USER = "nobody"
ANNOTATION_ALLOW_PREEMPTION = DOMAIN_YUNIKORN + "allow-preemption"
ANNOTATION_PARTITION = DOMAIN_YUNIKORN + "partition"  # Korral's: on a pod or its namespace (k8s_shim.pools)
UNIQUE_AUTOGEN_SUFFIX = "-uniqueautogen"
TERMINATED = ("Succeeded", "Failed")
_LABEL_TAG = DOMAIN_K8S + GROUP_LABEL
_INT32 = (-(2**31), 2**31 - 1)
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Problem:
    """An input the shim cannot use: ``field`` is its path in the pod (or namespace) object."""

    field: str
    message: str
    blocking: bool = False  # the pod cannot be asked for until it is fixed

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class PodRules:
    """The settings the contract depends on (flags and the non-reloadable configmap keys)."""

    scheduler_name: str = "yunikorn"
    unique_app_ids: bool = False  # admissionController.filtering.generateUniqueAppId
    gang_scheduling: bool = True  # not service.disableGangScheduling: task groups are read


@dataclass(slots=True)
class PodSpec:
    """What the scheduler is told about one pod (see module doc)."""

    uid: str
    namespace: str
    name: str
    ours: bool  # schedulerName is ours; else a foreign pod
    app_id: str = ""
    queue: str = ""
    user: str = DEFAULT_USER
    groups: tuple[str, ...] = ()
    resource: dict[str, int] = field(default_factory=dict)
    priority: int = 0
    priority_class: str = ""
    allow_preemption: bool | None = None  # the pod's annotation; None: its PriorityClass decides
    preempt_others: bool = True  # preemptionPolicy is not Never
    tags: dict[str, str] = field(default_factory=dict)
    claims: tuple[str, ...] = ()  # persistent volume claims (and ephemeral volumes' claims)
    resource_claims: tuple[PodClaim, ...] = ()  # DRA: spec.resourceClaims (k8s_shim.translate.devices)
    image_pull_secrets: tuple[str, ...] = ()
    static: bool = False  # a static (mirror) pod: owned by its Node
    created: int = 0  # creationTimestamp, unix seconds
    interpod: InterPod | None = None  # its pod (anti-)affinity terms (k8s_shim.translate.interpod)
    gang: GangSpec | None = None  # its gang annotations (k8s_shim.translate.gang), None without any
    owners: tuple[dict, ...] = ()  # a placeholder's owner references (its app's, copied when it was made)
    partition: str = ""  # the yunikorn.apache.org/partition annotation (k8s_shim.pools)
    pod_group: str = ""  # spec.schedulingGroup.podGroupName: its PodGroup (k8s_shim.translate.podgroups)
    problems: tuple[Problem, ...] = ()
    requests: dict[str, Any] = field(default_factory=dict)  # container name -> its spec requests, as written
    ref: Any = field(default=None, compare=False, repr=False)  # its events' Regarding, made once (k8s_shim.shim)
    alias: str = field(init=False, compare=False, repr=False)  # namespace/name

    @property
    def blocked(self) -> Problem | None:
        return next((p for p in self.problems if p.blocking), None)

    def __post_init__(self) -> None:
        self.alias = f"{self.namespace}/{self.name}"  # in most of its events' notes: made once


@dataclass(slots=True)
class PodState:
    """The informer's record of a pod: what changes, and the spec read once."""

    uid: str
    node: str
    phase: str
    deleting: bool
    gates: tuple[str, ...]
    spec: PodSpec
    conditions: dict[str, tuple[str, str, str]]  # PodScheduled etc.: type -> (status, reason, message)
    mark: tuple = ()  # its resize_mark: when a watch line's differs, the line is decoded whole


# ---------------------------------------------------------------------- identity
_LABEL, _ANNOTATION = "labels", "annotations"
# every place an application ID (a queue) may be set, in YuniKorn's precedence: (where, which map, key)
_APP_ID_PLACES = ((f"metadata.labels[{LABEL_APP_ID}]", _LABEL, LABEL_APP_ID),
                  (f"metadata.annotations[{ANNOTATION_APP_ID}]", _ANNOTATION, ANNOTATION_APP_ID),
                  (f"metadata.labels[{LABEL_APPLICATION_ID}]", _LABEL, LABEL_APPLICATION_ID),
                  (f"metadata.labels[{LABEL_SPARK_APP}]", _LABEL, LABEL_SPARK_APP))
_QUEUE_PLACES = ((f"metadata.labels[{LABEL_QUEUE}]", _LABEL, LABEL_QUEUE),
                 (f"metadata.annotations[{ANNOTATION_QUEUE}]", _ANNOTATION, ANNOTATION_QUEUE),
                 (f"metadata.labels[{LABEL_QUEUE_SHORT}]", _LABEL, LABEL_QUEUE_SHORT))


def _candidates(places: tuple, labels: dict, annotations: dict) -> list[tuple[str, str]]:
    """(where, value) of each place, in order."""
    return [(where, (labels if which is _LABEL else annotations).get(key, "")) for where, which, key in places]


def _app_id_candidates(labels: dict, annotations: dict) -> list[tuple[str, str]]:
    return _candidates(_APP_ID_PLACES, labels, annotations)


def _queue_candidates(labels: dict, annotations: dict) -> list[tuple[str, str]]:
    return _candidates(_QUEUE_PLACES, labels, annotations)


def _first(candidates: list[tuple[str, str]]) -> str:
    return next((v for _, v in candidates if v), "")


def generated_app_id(namespace: str, uid: str, unique: bool) -> str:
    """YuniKorn's ID for a pod that names no application: one per namespace
    (``yunikorn-<ns>-autogen``), or one per pod with ``generateUniqueAppId`` (``<ns>-<uid>``,
    the namespace cut at 26 characters); at most 63 characters."""
    if unique:
        return f"{namespace[:26]}-{uid}"[:63]
    return f"yunikorn-{namespace}-autogen"[:63]


def app_identity(labels: dict, annotations: dict, namespace: str, uid: str,
                 rules: PodRules) -> tuple[str, str, str, tuple[str, ...], list[Problem]]:
    """(app ID, queue, user, groups, problems) with YuniKorn's precedence: app ID from label
    ``yunikorn.apache.org/app-id``, that annotation, label ``applicationId``, label
    ``spark-app-selector`` (a ``-uniqueautogen`` suffix becomes ``-<pod uid>``), else generated;
    queue from label ``yunikorn.apache.org/queue``, that annotation, label ``queue`` (else empty:
    the placement rules decide); user and groups from the ``yunikorn.apache.org/user.info``
    annotation, else label ``yunikorn.apache.org/username``, else ``nobody``."""
    problems: list[Problem] = []
    app_candidates = _app_id_candidates(labels, annotations)
    app_id = _first(app_candidates)
    if app_id.endswith(UNIQUE_AUTOGEN_SUFFIX):
        app_id = f"{app_id[:-len(UNIQUE_AUTOGEN_SUFFIX)]}-{uid}"
    if not app_id:
        app_id = generated_app_id(namespace, uid, rules.unique_app_ids)
    queue_candidates = _queue_candidates(labels, annotations)
    queue = _first(queue_candidates)
    for what, candidates, chosen in (("app-id", app_candidates, _first(app_candidates)),
                                     ("queue", queue_candidates, queue)):
        ignored = [f"{where}={value}" for where, value in candidates if value and value != chosen]
        if ignored:  # YuniKorn warns about the same (checkPodMetadataBeforeScheduling)
            problems.append(Problem(", ".join(w.split("=")[0] for w in ignored),
                                    f"more than one {what} value: using {chosen!r}, ignoring {', '.join(ignored)}"))
    user, groups = DEFAULT_USER, ()
    info = annotations.get(ANNOTATION_USER_INFO)
    where = f"metadata.annotations[{ANNOTATION_USER_INFO}]"
    if info:
        try:
            doc = orjson.loads(info)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            name, raw_groups = doc.get("user", ""), doc.get("groups") or []
            if not isinstance(name, str) or not isinstance(raw_groups, list) or \
                    not all(isinstance(g, str) for g in raw_groups):
                raise ValueError('expected {"user": "<name>", "groups": ["<group>", ...]}')
            user, groups = name or DEFAULT_USER, tuple(raw_groups)
            if not name:
                problems.append(Problem(where, f"empty user: using {DEFAULT_USER}"))
        except ValueError as exc:  # orjson's error is a ValueError too
            problems.append(Problem(where, f"not valid user info JSON ({exc}): using user {DEFAULT_USER}"))
    elif labels.get(LABEL_USER):
        user = labels[LABEL_USER]
    return app_id, queue, user, groups, problems


# ---------------------------------------------------------------------- size
def _requests(container: dict, where: str, problems: list[Problem]) -> dict[str, int]:
    return _resource_list(((container.get("resources") or {}).get("requests")) or {}, f"{where}.resources.requests",
                          problems)


def _resource_list(entries: Any, where: str, problems: list[Problem]) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(entries, dict):
        problems.append(Problem(where, "not a map of resource quantities", blocking=True))
        return out
    for name, text in entries.items():
        try:
            si_name, amount = quantity.si_value(name, text)
        except ValueError as exc:
            problems.append(Problem(f"{where}.{name}", str(exc), blocking=True))
            continue
        if amount < 0:
            problems.append(Problem(f"{where}.{name}", f"negative quantity {text!r}", blocking=True))
            continue
        out[si_name] = amount
    return out


def _add(left: dict[str, int], right: dict[str, int]) -> dict[str, int]:
    out = dict(left)
    for k, v in right.items():
        out[k] = out.get(k, 0) + v
    return out


def _max_into(target: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        if v > target.get(k, -1):
            target[k] = v


def _statuses(status: dict) -> list[dict]:
    return [s for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
            if isinstance(s, dict)]


def _infeasible(resize: Any, conditions) -> bool:
    """Whether the kubelet found the pod's resize infeasible: ``status.resize`` (Kubernetes up to
    1.32) or a ``PodResizePending`` condition of reason ``Infeasible`` (1.33 on); ``conditions``:
    (type, reason) pairs."""
    return resize == "Infeasible" or any(t == "PodResizePending" and r == "Infeasible" for t, r in conditions)


def _container_size(container: dict, where: str, statuses: dict[str, dict], infeasible: bool,
                    problems: list[Problem]) -> dict[str, int]:
    """The larger of the container's requests and what its status says it was given (an in-place
    resize, KEP-1287), unless a resize was found infeasible: then what its status says it runs
    with (as YuniKorn: its status' resources, even without requests)."""
    size = _requests(container, where, problems)
    status = statuses.get(container.get("name", ""))
    if status:
        current = status.get("resources")
        if infeasible and current is not None:
            return _resource_list(current.get("requests") or {}, f"status of {where}.resources.requests", problems)
        _max_into(size, _resource_list(status.get("allocatedResources") or {},
                                       f"status of {where}.allocatedResources", problems))
        if current is not None:
            _max_into(size, _resource_list(current.get("requests") or {}, f"status of {where}.resources.requests",
                                           problems))
    return size


def resize_mark(generation: Any, infeasible: bool, changed: list[tuple]) -> tuple:
    """What a pod's size depends on besides what was read with its spec: its ``generation``, whether
    its resize is infeasible, and its ``changed`` container statuses, (name, allocatedResources,
    resources.requests) of those whose requests differ from the spec's (``_repeats_spec``). Two
    equal marks of one pod (at one generation) give the same size."""
    return (generation or 0, infeasible, tuple(changed)) if changed else (generation or 0, infeasible)


_NO_REQUESTS: dict = {}


def _repeats_spec(requests: dict[str, Any], name: str, allocated: Any, current: Any) -> bool:
    """Whether a container status says nothing beyond the spec's requests (as a kubelet writes for
    every running container that was not resized)."""
    wanted = requests.get(name, _NO_REQUESTS)
    return (allocated is None or allocated == wanted) and (current is None or current == wanted)


def _raw_mark(meta: dict, status: dict, requests: dict[str, Any]) -> tuple:
    changed = []
    for s in _statuses(status):
        entry = (s.get("name", ""), s.get("allocatedResources"),
                 (s["resources"] or {}).get("requests") if s.get("resources") is not None else None)
        if not _repeats_spec(requests, *entry):
            changed.append(entry)
    infeasible = _infeasible(status.get("resize"), ((c.get("type"), c.get("reason"))
                                                     for c in status.get("conditions") or [] if isinstance(c, dict)))
    return resize_mark(meta.get("generation"), infeasible, changed)


def spec_requests(spec: dict) -> dict[str, Any]:
    """Each container's (and init container's) requests as the spec writes them, by name."""
    return {c.get("name", ""): (c.get("resources") or {}).get("requests") or {}
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []) if isinstance(c, dict)}


def pod_size(spec: dict, status: dict, problems: list[Problem]) -> dict[str, int]:
    """The pod's request as Kubernetes computes it (YuniKorn's ``GetPodResource``): the sum of
    the containers; native sidecars (init containers with restartPolicy Always) added to it,
    and each init container's need (itself plus the sidecars started before it) taken where it
    is larger; pod-level requests replace cpu and memory; the RuntimeClass overhead is added;
    plus ``pods: 1``. CPU in milli-cores (``vcore``), the rest in whole units."""
    statuses = {s.get("name", ""): s for s in _statuses(status)}
    infeasible = _infeasible(status.get("resize"), ((c.get("type"), c.get("reason"))
                                                     for c in status.get("conditions") or [] if isinstance(c, dict)))
    containers = spec.get("containers") or []
    if not containers:
        problems.append(Problem("spec.containers", "the pod has no containers", blocking=True))
    size: dict[str, int] = {}
    for i, c in enumerate(containers):
        size = _add(size, _container_size(c, f"spec.containers[{i}]", statuses, infeasible, problems))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, c in enumerate(spec.get("initContainers") or []):
        own = _container_size(c, f"spec.initContainers[{i}]", statuses, infeasible, problems)
        _max_into(init_max, _add(own, sidecars))
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, own)
    size = _add(size, sidecars)
    _max_into(size, init_max)
    pod_level = (spec.get("resources") or {}).get("requests")
    if pod_level:
        for name, amount in _resource_list(pod_level, "spec.resources.requests", problems).items():
            if name in ("vcore", "memory"):  # the pod-level resources Kubernetes supports
                size[name] = amount
    if spec.get("overhead"):
        size = _add(size, _resource_list(spec["overhead"], "spec.overhead", problems))
    size["pods"] = 1
    return size


# ---------------------------------------------------------------------- constraints and tags
def host_ports(spec: dict) -> list[dict]:
    """The host ports the pod takes (its containers' and native sidecars'), defaults filled in."""
    ports = []
    containers = list(spec.get("containers") or [])
    containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for c in containers:
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                ports.append({"hostIP": p.get("hostIP") or "0.0.0.0", "hostPort": p["hostPort"],
                              "protocol": p.get("protocol") or "TCP"})
    return ports


def claim_names(spec: dict, pod_name: str) -> tuple[str, ...]:
    """The persistent volume claims the pod uses; an ephemeral volume's claim is ``<pod>-<volume>``."""
    names = []
    for v in spec.get("volumes") or []:
        if v.get("persistentVolumeClaim"):
            names.append(v["persistentVolumeClaim"].get("claimName", ""))
        elif v.get("ephemeral"):
            names.append(f"{pod_name}-{v.get('name', '')}")
    return tuple(n for n in names if n)


def required_node(owners: list, spec: dict) -> str:
    """A DaemonSet pod's node (YuniKorn's rule: a DaemonSet owner and a required node affinity
    term matching field ``metadata.name``), else empty."""
    if not any(o.get("kind") == "DaemonSet" for o in owners):
        return ""
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")) or []
    node = ""
    for term in terms:
        for match in term.get("matchFields") or []:
            if match.get("key") == "metadata.name" and match.get("values"):
                node = match["values"][0]
    return node


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def pod_tags(meta: dict, spec: dict, owners: list, created: int, ours: bool = True) -> dict[str, str]:
    """The ask's tags: YuniKorn's (namespace, pod name, every label, the DaemonSet's required node,
    creation time) and the node checks' (tolerations, node selector, required node affinity,
    host ports). A foreign pod's: only YuniKorn's and its host ports (what it takes on its node)."""
    tags = {TAG_NAMESPACE: meta.get("namespace", ""), TAG_POD_NAME: meta.get("name", ""),
            CREATION_TIME: str(created), TAG_POD_LABELS: labels_tag(meta.get("labels") or {})}
    node = required_node(owners, spec)
    if node:
        tags[TAG_REQUIRED_NODE] = node
    for k, v in (meta.get("labels") or {}).items():
        tags[_LABEL_TAG + k] = v
    ports = host_ports(spec)
    if ports:
        tags[TAG_HOST_PORTS] = _dumps(ports)
    if not ours:
        return tags
    if spec.get("tolerations"):
        tags[TAG_TOLERATIONS] = _dumps(spec["tolerations"])
    for k, v in (spec.get("nodeSelector") or {}).items():
        tags[TAG_NODE_SELECTOR_PREFIX + k] = v
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required:
        tags[TAG_NODE_AFFINITY] = _dumps(required)
    return tags


def interpod_tags(pod: PodSpec, spec: dict, labels: dict, problems: list[Problem]) -> None:
    """Add the pod's inter-pod constraints to ``pod``: its affinity terms (``pod.interpod``; the
    tag too unless a term's namespaces depend on the namespaces' labels: the shim resolves those)
    and, for our pod, its spread constraints. A field that cannot be read blocks our pod (a
    Problem naming it); a foreign pod's unreadable terms are left out."""
    interpod, spread, bad = read_interpod(spec, labels)
    if bad is not None:
        if pod.ours:
            problems.append(Problem(bad[0], f"{bad[1]}: the constraint cannot be evaluated", blocking=True))
        return
    if interpod is not None:
        pod.interpod = interpod
        if not interpod.by_labels:
            pod.tags[TAG_POD_AFFINITY] = affinity_tag(interpod, pod.namespace, {})
    if spread and pod.ours:
        pod.tags[TAG_TOPOLOGY_SPREAD] = spread_tag(spread)


def _created(meta: dict) -> int:
    stamp = meta.get("creationTimestamp")
    if not stamp:
        return 0
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def _priority(spec: dict, problems: list[Problem]) -> int:
    value = spec.get("priority", 0) or 0
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(Problem("spec.priority", f"not an integer ({value!r}): using 0"))
        return 0
    return max(_INT32[0], min(_INT32[1], value))


def _allow_preemption(annotations: dict, problems: list[Problem]) -> bool | None:
    value = annotations.get(ANNOTATION_ALLOW_PREEMPTION)
    if value is None or value == "":
        return None
    if value in ("true", "false"):
        return value == "true"
    problems.append(Problem(f"metadata.annotations[{ANNOTATION_ALLOW_PREEMPTION}]",
                            f"{value!r} is neither true nor false: the PriorityClass decides"))
    return None


# ---------------------------------------------------------------------- the whole pod
def read_pod(raw: dict, rules: PodRules) -> PodSpec:
    """The ``PodSpec`` of a raw pod (see module doc)."""
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    owners = meta.get("ownerReferences") or []
    problems: list[Problem] = []
    created = _created(meta)
    ours = spec.get("schedulerName") == rules.scheduler_name
    pod = PodSpec(uid=meta.get("uid", ""), namespace=meta.get("namespace", ""), name=meta.get("name", ""), ours=ours,
                  created=created, static=any(o.get("kind") == "Node" for o in owners))
    pod.resource = pod_size(spec, status, problems)
    pod.requests = spec_requests(spec)
    pod.priority = _priority(spec, problems)
    pod.tags = pod_tags(meta, spec, owners, created, ours)
    if spec.get("affinity") or spec.get("topologySpreadConstraints"):
        interpod_tags(pod, spec, labels, problems)
    if ours:
        pod.app_id, pod.queue, pod.user, pod.groups, found = app_identity(labels, annotations, pod.namespace,
                                                                           pod.uid, rules)
        problems.extend(found)
        pod.priority_class = spec.get("priorityClassName", "") or ""
        pod.partition = annotations.get(ANNOTATION_PARTITION, "")
        pod.allow_preemption = _allow_preemption(annotations, problems)
        pod.preempt_others = spec.get("preemptionPolicy") != "Never"
        pod.claims = claim_names(spec, pod.name)
        pod.resource_claims = read_pod_claims(spec)
        pod.image_pull_secrets = tuple(s.get("name", "") for s in spec.get("imagePullSecrets") or [] if s.get("name"))
        pod.gang = read_gang(annotations, rules.gang_scheduling)  # its problems are told as GangScheduling events
        group = spec.get("schedulingGroup")
        if isinstance(group, dict) and isinstance(group.get("podGroupName"), str):
            pod.pod_group = group["podGroupName"]
        if pod.gang is not None and pod.gang.placeholder:
            pod.owners = tuple(owners)
    pod.problems = tuple(problems)
    return pod


def resized(old: PodSpec, raw: dict) -> PodSpec:
    """``old`` (the pod's spec as read before) with the size ``raw`` (the pod now) has, when it
    changed (an in-place resize); ``old`` itself otherwise. A size that cannot be read (a bad
    quantity in the status) keeps the old one."""
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    problems: list[Problem] = []
    size = pod_size(spec, status, problems)
    requests = spec_requests(spec)
    if size == old.resource and requests == old.requests:
        return old
    blocked = next((p for p in problems if p.blocking), None)
    if blocked is not None:
        log.warning("pod %s: its new size is not read (%s): it keeps %s", old.alias, blocked, old.resource)
        return old
    return replace(old, resource=size, requests=requests)


def _conditions(status: dict) -> dict[str, tuple[str, str, str]]:
    out = {}
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled":
            out["PodScheduled"] = (c.get("status", ""), c.get("reason", ""), c.get("message", ""))
    return out


# ---------------------------------------------------------------------- watch lines, decoded lightly
class _Meta(msgspec.Struct):
    uid: str = ""
    resourceVersion: str = ""
    deletionTimestamp: str | None = None
    generation: int = 0


class _Gate(msgspec.Struct):
    name: str = ""


class _Spec(msgspec.Struct):
    nodeName: str | None = None
    schedulerName: str | None = None
    schedulingGates: list[_Gate] | None = None


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""
    reason: str | None = None
    message: str | None = None


class _Requests(msgspec.Struct):
    requests: dict[str, str] | None = None


class _ContainerStatus(msgspec.Struct):
    name: str = ""
    allocatedResources: dict[str, str] | None = None
    resources: _Requests | None = None


class _Status(msgspec.Struct):
    phase: str | None = None
    conditions: list[_Condition] | None = None
    resize: str | None = None
    containerStatuses: list[_ContainerStatus] | None = None
    initContainerStatuses: list[_ContainerStatus] | None = None


def _lite_changed(status: "_Status", requests: dict[str, Any]) -> list[tuple]:
    """``_raw_mark``'s changed statuses, from a watch line read lightly."""
    changed = []
    for group in (status.containerStatuses, status.initContainerStatuses):
        for c in group or ():
            current = c.resources.requests if c.resources is not None else None
            if not _repeats_spec(requests, c.name, c.allocatedResources, current):
                changed.append((c.name, c.allocatedResources, current))
    return changed


class LitePod(msgspec.Struct):
    """The fields of a pod that change once it is known; every other field is skipped unread."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)
    status: _Status = msgspec.field(default_factory=_Status)


class LiteEvent(msgspec.Struct):
    """A watch line with its object read as a ``LitePod``."""

    type: str = ""
    object: LitePod = msgspec.field(default_factory=LitePod)


LITE_DECODER = msgspec.json.Decoder(LiteEvent)


def refresher(rules: PodRules, keep: Callable[[str, str, bool], bool]) -> Callable[[LitePod, PodState], Any]:
    """The informer's update of a known pod from a watch line's ``LitePod`` (a third of the cost
    of decoding the line whole): the new ``PodState``, None to drop it (as ``decoder`` would), or
    ``FULL`` when the pod may have been resized (its ``resize_mark`` changed)."""
    def refresh(lite: LitePod, old: PodState) -> Any:
        spec, status = lite.spec, lite.status
        node, phase = spec.nodeName or "", status.phase or ""
        if not keep(node, phase, spec.schedulerName == rules.scheduler_name):
            return None
        conditions = {}
        infeasible = status.resize == "Infeasible"
        for c in status.conditions or ():
            if c.type == "PodScheduled":
                conditions["PodScheduled"] = (c.status, c.reason or "", c.message or "")
            elif c.type == "PodResizePending" and c.reason == "Infeasible":
                infeasible = True
        mark = resize_mark(lite.metadata.generation, infeasible, _lite_changed(status, old.spec.requests))
        if mark != old.mark:
            return FULL
        gates = tuple(g.name for g in spec.schedulingGates) if spec.schedulingGates else ()
        return PodState(old.uid, node, phase, bool(lite.metadata.deletionTimestamp), gates, old.spec, conditions, mark)
    return refresh


def lite_watch(rules: PodRules, keep: Callable[[str, str, bool], bool]) -> LiteWatch:
    """The informer's light reading of a known pod's watch lines (``refresher``)."""
    return LiteWatch(LITE_DECODER, attrgetter("metadata.uid"), attrgetter("metadata.resourceVersion"),
                     refresher(rules, keep))


def decoder(rules: PodRules, keep: Callable[[str, str, bool], bool]) -> Callable[[dict, PodState | None], PodState | None]:
    """The informer's decode for pods: a ``PodState`` for a pod ``keep(node, phase, ours)`` wants,
    the spec read once per pod (reused from ``old``, its size computed again: ``resized``); None
    drops the pod (e.g. terminated)."""
    def decode(raw: dict, old: PodState | None) -> PodState | None:
        meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
        node, phase = spec.get("nodeName", "") or "", status.get("phase", "") or ""
        ours = spec.get("schedulerName") == rules.scheduler_name
        if not keep(node, phase, ours):
            return None
        uid = meta["uid"]
        if old is not None and old.uid == uid:
            mark = _raw_mark(meta, status, old.spec.requests)
            pod_spec = old.spec if mark == old.mark else resized(old.spec, raw)
            if pod_spec is not old.spec:
                mark = _raw_mark(meta, status, pod_spec.requests)
        else:
            pod_spec = read_pod(raw, rules)
            mark = _raw_mark(meta, status, pod_spec.requests)
        gates = tuple(g.get("name", "") for g in spec.get("schedulingGates") or [])
        return PodState(uid, node, phase, bool(meta.get("deletionTimestamp")), gates, pod_spec, _conditions(status),
                        mark)
    return decode

