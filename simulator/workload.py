"""Sim workloads: the YAML format, its validation, and the seeded plan it expands to.

A workload describes node groups and app templates; ``plan(workload, seed)``
expands it into concrete nodes and apps (arrival times, task counts, per-task
durations) with one ``random.Random(seed)``, so a seed always gives the same run.

Format (every key but ``nodes`` and ``apps`` optional)::

    name: demo
    seed: 42                 # default seed (``--seed`` overrides)
    duration: 30             # seconds the sim may run (``--duration`` overrides)
    config: |                # queues.yaml sent at registration; default: see default_config_text
      partitions: ...
    config_updates:          # queues.yaml sent later with UpdateConfiguration (e.g. a lowered max)
      - {at: 10, config: "partitions: ..."}
    nodes:
      - name: a              # node ids a-0000, a-0001, ...
        count: 20
        partition: default   # other names set the si/node-partition attribute
        resources: {vcore: 16, memory: 64Gi}
        attributes: {si/rackname: rack-1}
        foreign: {vcore: 2, memory: 4Gi}  # a pod of another scheduler on each node (tag foreign)
    apps:
      - name: etl            # app ids etl-0000, ...
        count: 40
        queue: root.a
        partition: default
        user: alice
        groups: [dev]
        namespace: team-a    # app tag "namespace"
        arrival: {start: 0, interval: 0.5, jitter: 0.1}
        tasks: 50            # or [min, max]
        resources: {vcore: 500m, memory: 1Gi}
        priority: 0
        duration: [1, 3]     # seconds per task; a number or [min, max]
        gang:                # optional: the app is a gang (one task group named after the template)
          members: 50        # placeholders (task group minMember); default: the app's task count
          style: Hard        # Hard | Soft (default Soft, as YuniKorn)
          timeout: 60        # placeholder timeout, seconds; default: the scheduler's (15 min)
          resources: {...}   # per placeholder (task group minResource); default: the task's
        preemption: {self: true, other: true}  # SI preemptionPolicy of every ask (default: unset)
        on_preempted: resubmit   # resubmit (default: a controller re-creates the task) | fail

Errors are ``WorkloadError`` with one message per fault, each naming the node
group or app template and key at fault.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

from common.config.quantity import parse_resources
from common.constants import DEFAULT_PARTITION, HOST_NAME, NODE_PARTITION

__all__ = ["AppPlan", "AppTemplate", "GangSpec", "NodeGroup", "NodePlan", "Plan", "TaskPlan", "Workload",
           "WorkloadError", "default_config_text", "parse_workload", "plan"]


class WorkloadError(ValueError):
    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


@dataclass(frozen=True, slots=True)
class NodeGroup:
    name: str
    count: int
    partition: str
    resources: dict[str, int]
    attributes: dict[str, str]
    foreign: dict[str, int] | None = None  # one foreign allocation per node (None: none)


@dataclass(frozen=True, slots=True)
class GangSpec:
    members: int | None  # None: one placeholder per task
    style: str  # Hard | Soft
    timeout: float  # seconds; 0: the scheduler's default
    resources: dict[str, int] | None  # None: the task's resources


@dataclass(frozen=True, slots=True)
class AppTemplate:
    name: str
    count: int
    queue: str
    partition: str
    user: str
    groups: tuple[str, ...]
    namespace: str
    arrival_start: float
    arrival_interval: float
    arrival_jitter: float
    tasks: tuple[int, int]
    resources: dict[str, int]
    priority: int
    duration: tuple[float, float]
    gang: GangSpec | None = None
    preempt_self: bool | None = None  # SI preemptionPolicy; None: not sent
    preempt_other: bool | None = None
    on_preempted: str = "resubmit"  # resubmit | fail


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    seed: int
    duration: float
    config: str
    nodes: tuple[NodeGroup, ...]
    apps: tuple[AppTemplate, ...]
    config_updates: tuple[tuple[float, str], ...] = ()  # (seconds into the run, queues.yaml)


@dataclass(frozen=True, slots=True)
class NodePlan:
    node_id: str
    partition: str
    resources: dict[str, int]
    attributes: dict[str, str]
    foreign: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class TaskPlan:
    key: str
    duration: float


@dataclass(frozen=True, slots=True)
class AppPlan:
    app_id: str
    template: AppTemplate
    submit_at: float
    tasks: tuple[TaskPlan, ...]
    members: int = 0  # gang placeholders (0: not a gang)


@dataclass(frozen=True, slots=True)
class Plan:
    workload: Workload
    seed: int
    nodes: tuple[NodePlan, ...]
    apps: tuple[AppPlan, ...]  # sorted by submit_at

    @property
    def task_count(self) -> int:
        return sum(len(a.tasks) for a in self.apps)


_NODE_KEYS = {"name", "count", "partition", "resources", "attributes", "foreign"}
_APP_KEYS = {"name", "count", "queue", "partition", "user", "groups", "namespace", "arrival", "tasks",
             "resources", "priority", "duration", "gang", "preemption", "on_preempted"}
_GANG_KEYS = {"members", "style", "timeout", "resources"}
_GANG_STYLES = ("Hard", "Soft")
_TOP_KEYS = {"name", "seed", "duration", "config", "config_updates", "nodes", "apps"}


class _Reader:
    """Collects every fault instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def keys(self, where: str, raw: dict, allowed: set[str]) -> None:
        for key in raw:
            if key not in allowed:
                self.errors.append(f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(allowed))})")

    def number(self, where: str, raw: Any, *, integer: bool = False, minimum: float = 0) -> float:
        ok = isinstance(raw, int) if integer else isinstance(raw, (int, float))
        if not ok or isinstance(raw, bool) or raw < minimum:
            kind = "an integer" if integer else "a number"
            self.errors.append(f"{where}: must be {kind} >= {minimum}, got {raw!r}")
            return minimum
        return raw

    def span(self, where: str, raw: Any, *, integer: bool = False, minimum: float = 0) -> tuple:
        if isinstance(raw, list):
            if len(raw) != 2:
                self.errors.append(f"{where}: a range is [min, max], got {raw!r}")
                return (minimum, minimum)
            lo = self.number(f"{where}[0]", raw[0], integer=integer, minimum=minimum)
            hi = self.number(f"{where}[1]", raw[1], integer=integer, minimum=minimum)
            if hi < lo:
                self.errors.append(f"{where}: max {hi} is below min {lo}")
            return (lo, max(lo, hi))
        value = self.number(where, raw, integer=integer, minimum=minimum)
        return (value, value)

    def text(self, where: str, raw: Any, default: str = "") -> str:
        if raw is None:
            return default
        if not isinstance(raw, str) or not raw.strip():
            self.errors.append(f"{where}: must be a non-empty string, got {raw!r}")
            return default
        return raw.strip()

    def resources(self, where: str, raw: Any) -> dict[str, int]:
        if not isinstance(raw, dict) or not raw:
            self.errors.append(f"{where}: must be a non-empty map of resource -> quantity, got {raw!r}")
            return {}
        parsed, errors = parse_resources(raw)
        self.errors.extend(f"{where}: {e}" for e in errors)
        return parsed


def parse_workload(text: str, source: str = "<workload>") -> Workload:
    """Parse and validate workload YAML; raises ``WorkloadError`` naming every fault."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError([f"{source}: not valid YAML: {exc}"]) from None
    if not isinstance(raw, dict):
        raise WorkloadError([f"{source}: a workload is a map with 'nodes' and 'apps'"])
    r = _Reader()
    r.keys(source, raw, _TOP_KEYS)
    name = r.text(f"{source}: name", raw.get("name"), "workload")
    seed = int(r.number(f"{source}: seed", raw.get("seed", 1), integer=True))
    duration = float(r.number(f"{source}: duration", raw.get("duration", 60), minimum=0.1))
    config = raw.get("config", "") or ""
    if not isinstance(config, str):
        r.errors.append(f"{source}: config must be queues.yaml text (use 'config: |'), got {type(config).__name__}")
        config = ""
    nodes = tuple(_node_group(r, i, g) for i, g in enumerate(_list(r, source, raw, "nodes")))
    apps = tuple(_app_template(r, i, a) for i, a in enumerate(_list(r, source, raw, "apps")))
    for kind, items in (("node group", nodes), ("app template", apps)):
        seen: set[str] = set()
        for item in items:
            if item.name in seen:
                r.errors.append(f"{kind} '{item.name}': name used twice (ids would collide)")
            seen.add(item.name)
    node_partitions = {g.partition for g in nodes}
    for a in apps:
        if a.partition not in node_partitions:
            r.errors.append(f"app template '{a.name}': partition '{a.partition}' has no nodes "
                            f"(node partitions: {', '.join(sorted(node_partitions)) or 'none'})")
    updates = []
    raw_updates = raw.get("config_updates") or []
    if not isinstance(raw_updates, list):
        r.errors.append(f"{source}: config_updates must be a list of {{at, config}}")
        raw_updates = []
    for i, u in enumerate(raw_updates):
        where = f"{source}: config_updates[{i}]"
        if not isinstance(u, dict) or not isinstance(u.get("config"), str):
            r.errors.append(f"{where}: must be a map with at (seconds) and config (queues.yaml text)")
            continue
        r.keys(where, u, {"at", "config"})
        updates.append((float(r.number(f"{where}: at", u.get("at", 0))), u["config"]))
    if r.errors:
        raise WorkloadError(r.errors)
    return Workload(name, seed, duration, config, nodes, apps, tuple(sorted(updates)))


def _list(r: _Reader, source: str, raw: dict, key: str) -> list[dict]:
    items = raw.get(key)
    if not isinstance(items, list) or not items:
        r.errors.append(f"{source}: '{key}' must be a non-empty list")
        return []
    good = []
    for i, item in enumerate(items):
        if isinstance(item, dict):
            good.append(item)
        else:
            r.errors.append(f"{source}: {key}[{i}] must be a map, got {item!r}")
    return good


def _partition(r: _Reader, where: str, raw: Any) -> str:
    name = r.text(where, raw, "default").lower()
    return "default" if name == "" else name


def _node_group(r: _Reader, index: int, g: dict) -> NodeGroup:
    name = r.text(f"nodes[{index}]: name", g.get("name"), f"node{index}")
    where = f"node group '{name}'"
    r.keys(where, g, _NODE_KEYS)
    attributes = g.get("attributes", {}) or {}
    if not isinstance(attributes, dict):
        r.errors.append(f"{where}: attributes must be a map of string -> string")
        attributes = {}
    return NodeGroup(
        name=name,
        count=int(r.number(f"{where}: count", g.get("count", 1), integer=True, minimum=1)),
        partition=_partition(r, f"{where}: partition", g.get("partition")),
        resources=r.resources(f"{where}: resources", g.get("resources")),
        attributes={str(k): str(v) for k, v in attributes.items()},
        foreign=None if g.get("foreign") is None else r.resources(f"{where}: foreign", g.get("foreign")),
    )


def _app_template(r: _Reader, index: int, a: dict) -> AppTemplate:
    name = r.text(f"apps[{index}]: name", a.get("name"), f"app{index}")
    where = f"app template '{name}'"
    r.keys(where, a, _APP_KEYS)
    arrival = a.get("arrival", {}) or {}
    if not isinstance(arrival, dict):
        r.errors.append(f"{where}: arrival must be a map with start, interval, jitter")
        arrival = {}
    r.keys(f"{where}: arrival", arrival, {"start", "interval", "jitter"})
    groups = a.get("groups", []) or []
    if not isinstance(groups, list) or not all(isinstance(x, str) for x in groups):
        r.errors.append(f"{where}: groups must be a list of strings")
        groups = []
    queue = r.text(f"{where}: queue", a.get("queue"), "root.default").lower()
    if not queue.startswith("root"):
        queue = f"root.{queue}"
    preemption = _preemption(r, where, a.get("preemption"))
    on_preempted = a.get("on_preempted", "resubmit")
    if on_preempted not in ("resubmit", "fail"):
        r.errors.append(f"{where}: on_preempted must be resubmit or fail, got {on_preempted!r}")
        on_preempted = "resubmit"
    priority = a.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool) or not -(2**31) <= priority < 2**31:
        r.errors.append(f"{where}: priority must be an int32, got {priority!r}")
        priority = 0
    return AppTemplate(
        name=name,
        count=int(r.number(f"{where}: count", a.get("count", 1), integer=True, minimum=1)),
        queue=queue,
        partition=_partition(r, f"{where}: partition", a.get("partition")),
        user=r.text(f"{where}: user", a.get("user"), "nobody"),
        groups=tuple(groups),
        namespace=r.text(f"{where}: namespace", a.get("namespace"), "default"),
        arrival_start=float(r.number(f"{where}: arrival.start", arrival.get("start", 0))),
        arrival_interval=float(r.number(f"{where}: arrival.interval", arrival.get("interval", 0))),
        arrival_jitter=float(r.number(f"{where}: arrival.jitter", arrival.get("jitter", 0))),
        tasks=tuple(int(x) for x in r.span(f"{where}: tasks", a.get("tasks", 1), integer=True, minimum=1)),
        resources=r.resources(f"{where}: resources", a.get("resources")),
        priority=priority,
        duration=tuple(float(x) for x in r.span(f"{where}: duration", a.get("duration", 1.0))),
        gang=_gang(r, where, a.get("gang")),
        preempt_self=preemption.get("self"),
        preempt_other=preemption.get("other"),
        on_preempted=on_preempted,
    )


def _gang(r: _Reader, where: str, raw: Any) -> GangSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        r.errors.append(f"{where}: gang must be a map with members, style, timeout, resources")
        return None
    r.keys(f"{where}: gang", raw, _GANG_KEYS)
    style = raw.get("style", "Soft")
    if style not in _GANG_STYLES:
        r.errors.append(f"{where}: gang.style must be Hard or Soft, got {style!r}")
        style = "Soft"
    members = raw.get("members")
    if members is not None:
        members = int(r.number(f"{where}: gang.members", members, integer=True, minimum=1))
    resources = raw.get("resources")
    return GangSpec(
        members=members, style=style,
        timeout=float(r.number(f"{where}: gang.timeout", raw.get("timeout", 0))),
        resources=None if resources is None else r.resources(f"{where}: gang.resources", resources))


def _preemption(r: _Reader, where: str, raw: Any) -> dict[str, bool]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        r.errors.append(f"{where}: preemption must be a map like {{self: true, other: false}}")
        return {}
    r.keys(f"{where}: preemption", raw, {"self", "other"})
    out = {}
    for key in ("self", "other"):
        value = raw.get(key, True)
        if not isinstance(value, bool):
            r.errors.append(f"{where}: preemption.{key} must be true or false, got {value!r}")
            value = True
        out[key] = value
    return out


def default_config_text(workload: Workload) -> str:
    """queues.yaml used when the workload has none: every partition of the workload,
    root open to all, placement rule ``provided`` with ``create: true`` so apps land
    in the queue they name."""
    names = sorted({g.partition for g in workload.nodes} | {a.partition for a in workload.apps},
                   key=lambda n: (n != "default", n))
    lines = ["partitions:"]
    for name in names:
        lines += [f"  - name: {name}", "    placementrules:", "      - name: provided", "        create: true",
                  "    queues:", "      - name: root", "        submitacl: '*'"]
    return "\n".join(lines) + "\n"


def plan(workload: Workload, seed: int | None = None) -> Plan:
    """Expand ``workload`` into nodes and apps; the same seed gives the same plan."""
    seed = workload.seed if seed is None else seed
    rng = random.Random(seed)
    nodes = []
    for g in workload.nodes:
        attrs = dict(g.attributes)
        if g.partition != DEFAULT_PARTITION:
            attrs[NODE_PARTITION] = g.partition
        for i in range(g.count):
            node_id = f"{g.name}-{i:04d}"
            nodes.append(NodePlan(node_id, g.partition, g.resources, {**attrs, HOST_NAME: node_id}, g.foreign))
    apps = []
    for t in workload.apps:
        for i in range(t.count):
            app_id = f"{t.name}-{i:04d}"
            at = t.arrival_start + i * t.arrival_interval + (rng.uniform(0, t.arrival_jitter) if t.arrival_jitter else 0)
            n_tasks = rng.randint(*t.tasks)
            tasks = tuple(TaskPlan(f"{app_id}-t{j:04d}", round(rng.uniform(*t.duration), 3)) for j in range(n_tasks))
            members = 0 if t.gang is None else (t.gang.members or n_tasks)
            apps.append(AppPlan(app_id, t, at, tasks, members))
    apps.sort(key=lambda a: (a.submit_at, a.app_id))
    return Plan(workload, seed, tuple(nodes), tuple(apps))
