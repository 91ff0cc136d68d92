"""Kubernetes' own gang API (``scheduling.k8s.io/v1alpha2``, Kubernetes 1.35 on, feature gate
``GenericWorkload``) read as Korral's gang: a pod joins a PodGroup through
``spec.schedulingGroup.podGroupName`` (``PodSpec.pod_group``); the PodGroup's policy is
``gang: {minCount}`` or ``basic: {}``.

``read_pod_group(raw)`` gives a ``PodGroupInfo``. ``join(spec, group)`` rewrites a member's
``PodSpec`` in place (the informer keeps the spec it read once, so the rewrite holds for the
pod's later updates):

- a gang: the application is the PodGroup's (``app_id_of``: ``<namespace>.<name>``; a namespace
  has no dots, so two PodGroups never share one), with one task group named after the PodGroup,
  ``minMember`` = ``minCount`` and ``minResource`` = the member's own requests; the placeholder
  timeout and gang style are the pod's ``schedulingPolicyParameters`` annotation's, else
  Korral's defaults. The pod's own ``task-groups`` annotation, if any, gives way to the PodGroup.
- basic: nothing changes (the group is informational, as for kube-scheduler).

A gang's topology (``TAG_GANG_TOPOLOGY``): the PodGroup's ``spec.schedulingConstraints.topology[0].key``
(a node label key; mode ``required``: the API asks for every member in one domain), else the
topology the pod's task-groups annotation names (``k8s_shim.translate.gang``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from k8s_shim.translate.gang import (DEFAULT_STYLE, GangSpec, parse_task_groups, topology_problem, topology_tag)
from k8s_shim.translate.pods import PodSpec

__all__ = ["PodGroupInfo", "read_pod_group", "join", "app_id_of", "key_of", "GROUP_VERSION", "SCHEDULED",
           "scheduled_condition"]

GROUP_VERSION = "scheduling.k8s.io/v1alpha2"
SCHEDULED = "PodGroupScheduled"  # kube-scheduler's condition type on a PodGroup
_TOPOLOGY_FIELD = "spec.schedulingConstraints.topology"


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    namespace: str
    name: str
    uid: str
    min_count: int  # a gang's minCount; 0: the basic policy
    topology: str = ""  # the TAG_GANG_TOPOLOGY value its constraint asks for ("" none)
    problems: tuple[tuple[str, str], ...] = ()  # (field, message): inputs it cannot use
    scheduled: tuple[str, str, str] | None = None  # its PodGroupScheduled condition: (status, reason, message)
    conditions: tuple[dict, ...] = ()  # its status conditions as written (a status write keeps the others)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def key_of(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def app_id_of(namespace: str, name: str) -> str:
    """The application of a gang PodGroup's members (module doc)."""
    return f"{namespace}.{name}"


def _topology(spec: dict, problems: list[tuple[str, str]]) -> str:
    terms = (spec.get("schedulingConstraints") or {}).get("topology") or []
    if not isinstance(terms, list) or not terms:
        return ""
    if len(terms) > 1:
        problems.append((_TOPOLOGY_FIELD, f"{len(terms)} constraints: only the first is used"))
    key = terms[0].get("key") if isinstance(terms[0], dict) else None
    bad = topology_problem(key, "required")
    if bad is not None:
        problems.append((f"{_TOPOLOGY_FIELD}[0].key", bad))
        return ""
    return topology_tag(key, "required")


def read_pod_group(raw: dict) -> PodGroupInfo:
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    gang = (spec.get("schedulingPolicy") or {}).get("gang")
    count = gang.get("minCount") if isinstance(gang, dict) else 0
    problems: list[tuple[str, str]] = []
    conditions = tuple(c for c in (raw.get("status") or {}).get("conditions") or [] if isinstance(c, dict))
    scheduled = next(((c.get("status", ""), c.get("reason", ""), c.get("message", ""))
                      for c in conditions if c.get("type") == SCHEDULED), None)
    return PodGroupInfo(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""),
                        count if isinstance(count, int) and count > 0 else 0, _topology(spec, problems),
                        tuple(problems), scheduled, conditions)


def _min_resource(size: dict[str, int]) -> dict[str, str]:
    """A pod's size (SI units) as Kubernetes quantities for its placeholders."""
    out = {}
    for name, amount in size.items():
        if name == "pods" or not amount:
            continue
        out["cpu" if name == "vcore" else name] = f"{amount}m" if name == "vcore" else str(amount)
    return out


def join(spec: PodSpec, group: PodGroupInfo) -> None:
    """Make ``spec`` a member of ``group``'s gang (module doc); a basic group changes nothing."""
    if group.min_count <= 0:
        return
    own = spec.gang
    raw = orjson.dumps([{"name": group.name, "minMember": group.min_count,
                         "minResource": _min_resource(spec.resource)}]).decode()
    groups = parse_task_groups(raw)
    problems = tuple(p for p in own.problems if "task-groups" not in p[0]) if own is not None else ()
    spec.app_id = app_id_of(spec.namespace, group.name)
    spec.gang = GangSpec(groups, raw, group.name, placeholder=False,
                         timeout_seconds=own.timeout_seconds if own is not None else 0,
                         style=own.style if own is not None else DEFAULT_STYLE,
                         policy_raw=own.policy_raw if own is not None else "",
                         problems=problems + tuple(group.problems),
                         topology=group.topology or (own.topology if own is not None else ""),
                         topology_conflict=own.topology_conflict if own is not None and not group.topology else "")
    return None


def scheduled_condition(group: PodGroupInfo, status: str, reason: str, message: str, now: str) -> dict[str, Any]:
    """The status merge patch that sets ``group``'s PodGroupScheduled condition: a merge patch
    replaces the list, so the group's other conditions are in it; the transition time is kept
    when the status stays."""
    old = next((c for c in group.conditions if c.get("type") == SCHEDULED), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    condition = {"type": SCHEDULED, "status": status, "reason": reason, "message": message,
                 "lastTransitionTime": since or now}
    others = [c for c in group.conditions if c.get("type") != SCHEDULED]
    return {"status": {"conditions": [*others, condition]}}



