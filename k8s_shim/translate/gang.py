"""YuniKorn's gang annotations, read from a pod: task groups, a pod's task group, the scheduling
policy parameters, the placeholder flag; and the names and sizes derived from them.

``read_gang(annotations)`` gives a pod's ``GangSpec`` (None when it has none of these
annotations), with a (field, message) pair in its ``problems`` for each input it cannot use. It follows YuniKorn's shim:

- ``yunikorn.apache.org/task-groups`` is a JSON list of groups (``name``, ``minMember``,
  ``minResource``, ``labels``, ``annotations``, ``nodeSelector``, ``tolerations``, ``affinity``,
  ``topologySpreadConstraints``; keys matched without regard to case, as Go's JSON decoder does).
  A group without a name or ``minResource``, a ``minMember`` that is missing, 0 or negative, a
  field of the wrong type, a quantity that does not parse, a pod (anti-)affinity term or spread
  constraint the core could not read (``k8s_shim.translate.interpod``; its placeholders carry
  them): the whole annotation is ignored (the
  application is scheduled without a gang) and the problem names the field.
- ``yunikorn.apache.org/task-group-name`` names the pod's group.
- ``yunikorn.apache.org/schedulingPolicyParameters``: space-separated ``key=value`` pairs;
  ``placeholderTimeoutInSeconds`` (an integer; anything else is 0: the scheduler's default) and
  ``gangSchedulingStyle`` (``Soft`` or ``Hard``; anything else is ``Soft``).
- Korral's own key of a task group, ``topology``: ``{"level": LEVEL, "mode": "required" | "preferred"}``
  (mode ``required`` when left out): where the gang's members must (or should) land together,
  sent as the application's ``korral.io/gang-topology`` tag. LEVEL is a topology level of the
  partition, by name or by its node label key. A value that cannot be used is a problem naming
  the field (the tag is not sent; the groups are still used); groups that name different
  topologies: the first is used (``topology_conflict`` says so).
- ``internal.yunikorn.apache.org/placeholder`` (and the deprecated ``yunikorn.apache.org/placeholder``)
  ``true`` marks a placeholder pod the shim created.

``placeholder_name`` is YuniKorn's ``tg-<app>-<group>-<nonce>`` (app cut to 28 characters, group
to 20, a 10-character base-36 nonce: at most 63 characters).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from common.constants import DOMAIN_YUNIKORN, TAG_GANG_TOPOLOGY
from k8s_shim.translate import quantity
from k8s_shim.translate.interpod import read_interpod

__all__ = ["TaskGroup", "GangSpec", "read_gang", "placeholder_name", "placeholder_ask", "group_size",
           "ANNOTATION_TASK_GROUPS", "ANNOTATION_TASK_GROUP_NAME", "ANNOTATION_POLICY", "ANNOTATION_PLACEHOLDER",
           "ANNOTATION_PLACEHOLDER_OLD", "STYLES", "DEFAULT_STYLE", "TOPOLOGY_KEY", "TOPOLOGY_MODES",
           "topology_problem", "topology_tag", "TAG_GANG_TOPOLOGY"]

DOMAIN_INTERNAL = "internal." + DOMAIN_YUNIKORN
ANNOTATION_TASK_GROUPS = DOMAIN_YUNIKORN + "task-groups"
ANNOTATION_TASK_GROUP_NAME = DOMAIN_YUNIKORN + "task-group-name"
ANNOTATION_POLICY = DOMAIN_YUNIKORN + "schedulingPolicyParameters"
ANNOTATION_PLACEHOLDER = DOMAIN_INTERNAL + "placeholder"
ANNOTATION_PLACEHOLDER_OLD = DOMAIN_YUNIKORN + "placeholder"  # deprecated in YuniKorn, still read
TIMEOUT_PARAM = "placeholderTimeoutInSeconds"
STYLE_PARAM = "gangSchedulingStyle"
STYLES = ("Soft", "Hard")
DEFAULT_STYLE = "Soft"
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_INT64 = re.compile(r"[+-]?\d+")
_NONCE_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"
TOPOLOGY_KEY = "topology"  # Korral's key of a task group (module doc)
TOPOLOGY_MODES = ("required", "preferred")
# a level's name or a node label key: [prefix/]name, the name a Kubernetes qualified name
_LEVEL = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class TaskGroup:
    name: str
    min_member: int
    min_resource: dict[str, str]  # as written: Kubernetes quantities, placed on the placeholder pods
    size: dict[str, int]  # min_resource as the SI counts it (vcore in milli-cores), plus pods: 1
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple = ()
    affinity: dict | None = None
    topology_spread: tuple = ()


@dataclass(frozen=True, slots=True)
class GangSpec:
    """A pod's gang annotations, read (see module doc)."""

    groups: tuple[TaskGroup, ...] = ()  # valid task groups (empty: none, or invalid)
    groups_raw: str = ""  # the task-groups annotation as written (passed on to placeholders and as an app tag)
    group_name: str = ""  # the pod's task-group-name
    placeholder: bool = False
    timeout_seconds: int = 0  # placeholderTimeoutInSeconds; 0: the scheduler's default
    style: str = DEFAULT_STYLE
    policy_raw: str = ""  # the schedulingPolicyParameters annotation as written
    problems: tuple[tuple[str, str], ...] = ()  # (field, message) of each input it cannot use
    topology: str = ""  # the gang-topology tag's value (JSON), "" for none
    topology_conflict: str = ""  # groups named different topologies: what was used and what was not

    def group(self, name: str) -> TaskGroup | None:
        return next((g for g in self.groups if g.name == name), None)


def _where(key: str) -> str:
    return f"metadata.annotations[{key}]"


def _lookup(obj: dict, key: str) -> Any:
    """Go's JSON decoding of a struct field: the exact key, else one that differs only in case."""
    if key in obj:
        return obj[key]
    lower = key.lower()
    return next((v for k, v in obj.items() if k.lower() == lower), None)


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{what} is not a map of strings")
    return dict(value)


def _group(raw: Any, i: int) -> TaskGroup:
    """One task group; ``ValueError`` naming the field (``[i].minMember``) otherwise."""
    if not isinstance(raw, dict):
        raise ValueError(f"[{i}] is not an object")
    name = _lookup(raw, "name")
    if name is None or name == "":
        raise ValueError(f"[{i}].name is missing or empty")
    if not isinstance(name, str):
        raise ValueError(f"[{i}].name is not a string")
    members = _lookup(raw, "minMember")
    if members is None or members == 0:
        raise ValueError(f"[{i}].minMember of task group {name} is missing or 0: a gang needs at least one member")
    if isinstance(members, bool) or not isinstance(members, int) or not -(2**31) <= members < 2**31:
        raise ValueError(f"[{i}].minMember of task group {name} is not a 32-bit integer ({members!r})")
    if members < 0:
        raise ValueError(f"[{i}].minMember of task group {name} is negative ({members})")
    resources = _lookup(raw, "minResource")
    if resources is None:
        raise ValueError(f"[{i}].minResource of task group {name} is missing")
    if not isinstance(resources, dict):
        raise ValueError(f"[{i}].minResource of task group {name} is not a map of quantities")
    written: dict[str, str] = {}
    size: dict[str, int] = {}
    for res, text in resources.items():
        text = str(text) if isinstance(text, (int, float)) and not isinstance(text, bool) else text
        try:
            si_name, amount = quantity.si_value(res, text)
        except ValueError as exc:
            raise ValueError(f"[{i}].minResource.{res} of task group {name}: {exc}") from None
        if res:
            written[res], size[si_name] = text, amount
    size["pods"] = 1
    terms = {}
    for key, kind in (("tolerations", list), ("topologySpreadConstraints", list), ("affinity", dict)):
        value = _lookup(raw, key)
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"[{i}].{key} of task group {name} is not a JSON {'list' if kind is list else 'object'}")
        terms[key] = value or kind()
    tolerations, spread, affinity = terms["tolerations"], terms["topologySpreadConstraints"], terms["affinity"]
    # its placeholders carry these terms: one the core cannot read would keep them all pending
    _, _, bad = read_interpod({"affinity": affinity, "topologySpreadConstraints": spread}, {}, f"[{i}]")
    if bad is not None:
        raise ValueError(f"{bad[0]} of task group {name}: {bad[1]}")
    return TaskGroup(name, members, written, size,
                     labels=_string_map(_lookup(raw, "labels"), f"[{i}].labels of task group {name}"),
                     annotations=_string_map(_lookup(raw, "annotations"), f"[{i}].annotations of task group {name}"),
                     node_selector=_string_map(_lookup(raw, "nodeSelector"), f"[{i}].nodeSelector of task group {name}"),
                     tolerations=tuple(tolerations), affinity=affinity or None, topology_spread=tuple(spread))


def parse_task_groups(text: str) -> tuple[TaskGroup, ...]:
    """The task groups of the annotation; ``ValueError`` saying which field is wrong."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(doc, list):
        raise ValueError("not a JSON list of task groups")
    groups = tuple(_group(raw, i) for i, raw in enumerate(doc))
    seen: set[str] = set()
    for g in groups:
        if g.name in seen:
            raise ValueError(f"task group {g.name} is defined twice")
        seen.add(g.name)
    return groups


def parse_policy(text: str, problems: list[tuple[str, str]]) -> tuple[int, str]:
    """(placeholderTimeoutInSeconds, gangSchedulingStyle) of the annotation, YuniKorn's defaults for
    what is missing or does not parse (each such value a problem naming it)."""
    timeout, style = 0, DEFAULT_STYLE
    where = _where(ANNOTATION_POLICY)
    for item in text.split(" "):
        if not item:
            continue
        parts = item.split("=")
        if len(parts) != 2:
            problems.append((where, f"{item!r} is not key=value: ignored"))
            continue
        key, value = parts
        if key == TIMEOUT_PARAM:
            if _INT64.fullmatch(value) and -(2**63) <= int(value) < 2**63:
                timeout = int(value)
            else:
                timeout = 0
                problems.append((f"{where} {TIMEOUT_PARAM}",
                                        f"{value!r} is not a whole number of seconds: the scheduler's default "
                                        "placeholder timeout applies"))
        elif key == STYLE_PARAM:
            if value in STYLES:
                style = value
            else:
                style = DEFAULT_STYLE
                problems.append((f"{where} {STYLE_PARAM}",
                                        f"{value!r} is neither Soft nor Hard: using {DEFAULT_STYLE}"))
    return timeout, style


def topology_problem(level: Any, mode: Any) -> str | None:
    """Why a topology cannot be used (None: it can)."""
    if not isinstance(level, str) or not level:
        return "the level is missing or not a string"
    if len(level) > 316 or not _LEVEL.match(level):
        return f"{level!r} is neither a level name nor a node label key"
    if mode not in TOPOLOGY_MODES:
        return f"{mode!r} is neither required nor preferred"
    return None


def topology_tag(level: str, mode: str) -> str:
    """The ``korral.io/gang-topology`` value."""
    return orjson.dumps({"level": level, "mode": mode}).decode()


def _topologies(text: str, problems: list[tuple[str, str]]) -> tuple[str, str]:
    """(the tag, the conflict) of the groups' ``topology`` keys; a bad one is a problem, not used."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "", ""
    found: list[tuple[str, str]] = []  # (group, tag)
    for i, raw in enumerate(doc if isinstance(doc, list) else ()):
        value = _lookup(raw, TOPOLOGY_KEY) if isinstance(raw, dict) else None
        if value is None:
            continue
        where = f"{_where(ANNOTATION_TASK_GROUPS)}[{i}].{TOPOLOGY_KEY}"
        if not isinstance(value, dict):
            problems.append((where, "is not an object {level, mode}: no topology is asked for"))
            continue
        mode = _lookup(value, "mode")
        mode = "required" if mode is None else mode
        bad = topology_problem(_lookup(value, "level"), mode)
        if bad is not None:
            field_name = "mode" if bad.endswith("nor preferred") else "level"
            problems.append((f"{where}.{field_name}", f"{bad}: no topology is asked for"))
            return "", ""
        found.append((str(_lookup(raw, "name")), topology_tag(_lookup(value, "level"), mode)))
    if not found:
        return "", ""
    first = found[0]
    other = next((f for f in found[1:] if f[1] != first[1]), None)
    conflict = "" if other is None else (f"task group {first[0]} asks for topology {first[1]}, task group "
                                         f"{other[0]} for {other[1]}: the first is used")
    return first[1], conflict


def _flag(annotations: dict) -> bool:
    for key in (ANNOTATION_PLACEHOLDER, ANNOTATION_PLACEHOLDER_OLD):
        value = annotations.get(key)
        if value in _GO_TRUE:
            return True
        if value in _GO_FALSE:
            return False
    return False


def read_gang(annotations: dict, enabled: bool = True) -> GangSpec | None:
    """The pod's ``GangSpec`` (module doc); None when it has none of the annotations. With
    ``enabled`` False (``service.disableGangScheduling``) task groups and group names are not
    read, as YuniKorn: only the placeholder flag is."""
    raw_groups = annotations.get(ANNOTATION_TASK_GROUPS, "") if enabled else ""
    group_name = annotations.get(ANNOTATION_TASK_GROUP_NAME, "") if enabled else ""
    policy = annotations.get(ANNOTATION_POLICY, "")
    placeholder = _flag(annotations)
    if not (raw_groups or group_name or policy or placeholder):
        return None
    problems: list[tuple[str, str]] = []
    groups: tuple[TaskGroup, ...] = ()
    if raw_groups:
        try:
            groups = parse_task_groups(raw_groups)
        except ValueError as exc:
            problems.append((_where(ANNOTATION_TASK_GROUPS),
                                    f"{exc}: the application is scheduled without a gang"))
    if not isinstance(group_name, str):
        group_name = ""
    timeout, style = parse_policy(policy, problems) if policy else (0, DEFAULT_STYLE)
    topology, conflict = _topologies(raw_groups, problems) if groups and not placeholder else ("", "")
    return GangSpec(groups, raw_groups, group_name, placeholder, timeout, style, policy, tuple(problems),
                    topology, conflict)


def _nonce(rng: random.Random, length: int = 10) -> str:
    return "".join(rng.choice(_NONCE_LETTERS) for _ in range(length))


def placeholder_name(app_id: str, group: str, rng: random.Random | None = None) -> str:
    """YuniKorn's placeholder pod name (module doc)."""
    return f"tg-{app_id[:28]}-{group[:20]}-{_nonce(rng or random)}"


def group_size(group: TaskGroup) -> dict[str, int]:
    """All of a group's members together: its minResource times minMember, pods included."""
    return {k: v * group.min_member for k, v in group.size.items()}


def placeholder_ask(groups: tuple[TaskGroup, ...]) -> dict[str, int]:
    """The application's ``placeholderAsk``: every group's members together."""
    out: dict[str, int] = {}
    for g in groups:
        for k, v in group_size(g).items():
            out[k] = out.get(k, 0) + v
    return out


@dataclass(slots=True, eq=False)
class AppGang:
    """An application's gang, as the shim keeps it: its task groups and policy (from the pod that
    made the application) and where its placeholders stand."""

    groups: tuple[TaskGroup, ...]
    groups_raw: str
    timeout_seconds: int
    style: str
    policy_raw: str
    owners: tuple[dict, ...]  # the placeholders' owner references: the originator pod
    priority_class: str = ""
    topology: str = ""  # the korral.io/gang-topology tag ("" none)
    reserving: bool = False  # placeholders being made: the real members wait until every one is asked for
    creating: bool = False  # the create requests are under way
    made: bool = False  # placeholders were created (or found) once: never again in this run
    complete: bool = False  # every placeholder was allocated once (GangReservationComplete posted)

    def group(self, name: str) -> TaskGroup | None:
        return next((g for g in self.groups if g.name == name), None)
