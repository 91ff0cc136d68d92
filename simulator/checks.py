"""What an RM checks about the scheduler's decisions, as a careful shim would.

Pure bookkeeping: no I/O, time passed in. Every allocation the scheduler sends
is checked against the RM's own truth:

* ``unknown-ask``: the allocationKey was never asked for (or its ask was released);
* ``beyond-max-allocations``: more allocations of one key than its ``maxAllocations``;
* ``unknown-node``: the node was never registered;
* ``node-overcommit``: the node's allocated resources exceed its capacity;
* ``queue-max-exceeded``: a queue's allocated resources exceed its configured
  ``max`` (YuniKorn's FitInMaxUndef: resources missing from max are unlimited).
  The app's queue is the one it asked for, so this check assumes the
  ``provided`` placement rule (the sim's default config).

* ``user-limit-exceeded`` / ``group-limit-exceeded``: the allocations of one user (group)
  in a queue (its subtree) exceed a ``limits`` entry of that queue: ``maxresources`` (types
  the entry defines) or ``maxapplications`` (apps with a running allocation). The entry of
  a user is the one naming it, else the ``*`` one; the group of an app is the first of its
  groups named in a group limit on its queue path, else its first group if a ``*`` group
  limit is on the path (YuniKorn v1.3). Apps without groups are not checked against group
  limits (the scheduler may resolve their groups from the OS). The RM's usage is never
  above the scheduler's (it releases before the scheduler hears of it), so a violation is
  real, never a race.

Gang scheduling and preemption, per response of the scheduler:

* ``replacement-not-atomic``: a placeholder released ``PLACEHOLDER_REPLACED`` without the
  real allocation it names (``replacing uuid: <uuid>``) in the same response, so the room
  was briefly free or counted twice;
* ``replacement-elsewhere``: the real allocation is not on its placeholder's node;
* ``preempted-opted-out``: a victim whose ask said ``allowPreemptSelf: false``;
* ``preempted-placeholder``: a placeholder taken as a victim (it is a gang's reservation);
* ``preemption-loop``: a task's re-submission preempted the task that had preempted it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.config.loader import load_config
from common.config.model import LimitConfig, QueueConfig

__all__ = ["Owner", "Validator", "Violation", "config_limits", "queue_limits", "ugm_limits", "LIMIT_KINDS"]

QueueRef = tuple[str, str]  # (partition, queue path)
WILDCARD = "*"
# the checks that depend on the config (it may change during a run: ``Validator.set_limits``)
LIMIT_KINDS = frozenset({"queue-max-exceeded", "user-limit-exceeded", "group-limit-exceeded"})


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose an allocation is: its app, user and groups (for the user/group limits)."""

    app_id: str
    user: str
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    message: str
    at: float


def config_limits(config_text: str) -> tuple[dict[QueueRef, dict[str, int]],
                                              dict[QueueRef, tuple[LimitConfig, ...]]]:
    """The config's limits, read in one walk: every queue with a ``max`` ((partition, path) ->
    max) and every queue with user/group ``limits`` ((partition, path) -> entries; a
    partition's own ``limits`` belong to its root, as in YuniKorn). Raises ConfigError."""
    maxes: dict[QueueRef, dict[str, int]] = {}
    ugm: dict[QueueRef, tuple[LimitConfig, ...]] = {}

    def walk(partition: str, queue: QueueConfig, prefix: str, extra: tuple[LimitConfig, ...]) -> None:
        path = f"{prefix}.{queue.name}" if prefix else queue.name
        if queue.resources.max:
            maxes[(partition, path)] = dict(queue.resources.max)
        if queue.limits or extra:
            ugm[(partition, path)] = tuple(queue.limits) + extra
        for child in queue.queues:
            walk(partition, child, path, ())

    for p in load_config(config_text).partitions:
        walk(p.name, p.root, "", tuple(p.limits))
    return maxes, ugm


def queue_limits(config_text: str) -> dict[QueueRef, dict[str, int]]:
    """Every queue with a ``max`` in the config: (partition, path) -> max."""
    return config_limits(config_text)[0]


def ugm_limits(config_text: str) -> dict[QueueRef, tuple[LimitConfig, ...]]:
    """Every queue with user/group ``limits``: (partition, path) -> entries."""
    return config_limits(config_text)[1]


def _entry(limits: tuple[LimitConfig, ...], kind: str, name: str) -> LimitConfig | None:
    named = wild = None
    for lim in limits:
        names = lim.users if kind == "user" else lim.groups
        if name in names and named is None:
            named = lim
        elif WILDCARD in names and wild is None:
            wild = lim
    return named or wild


def _add(target: dict[str, int], res: dict[str, int], sign: int) -> None:
    for k, v in res.items():
        target[k] = target.get(k, 0) + sign * v


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass(slots=True)
class Validator:
    node_capacity: dict[str, dict[str, int]]
    queue_max: dict[QueueRef, dict[str, int]] = field(default_factory=dict)
    node_used: dict[str, dict[str, int]] = field(default_factory=dict)
    queue_used: dict[QueueRef, dict[str, int]] = field(default_factory=dict)
    asks: dict[str, int] = field(default_factory=dict)  # key -> maxAllocations
    allocated: dict[str, int] = field(default_factory=dict)  # key -> allocations seen
    violations: list[Violation] = field(default_factory=list)
    preempted_by: dict[str, str] = field(default_factory=dict)  # victim task -> preemptor task (origins)
    ugm: dict[QueueRef, tuple[LimitConfig, ...]] = field(default_factory=dict)
    # (queue, "user"|"group", name) -> resources, running allocations per app, peak resources
    ugm_used: dict[tuple, dict[str, int]] = field(default_factory=dict)
    ugm_apps: dict[tuple, dict[str, int]] = field(default_factory=dict)
    ugm_peak: dict[tuple, dict[str, int]] = field(default_factory=dict)

    def ask_added(self, key: str, max_allocations: int = 1) -> None:
        self.asks[key] = max_allocations

    def ask_removed(self, key: str) -> None:
        self.asks.pop(key, None)

    def allocated_to(self, key: str, node_id: str, queue: QueueRef | None, res: dict[str, int],
                     now: float, owner: Owner | None = None) -> list[Violation]:
        """Check one new allocation and book it; returns the violations it caused."""
        found: list[Violation] = []
        if owner is not None and queue is not None and self.ugm:
            self._ugm_book(queue, res, owner, +1)
        if key not in self.asks:
            found.append(Violation("unknown-ask", f"allocation for unknown ask {key} on node {node_id}", now))
        else:
            self.allocated[key] = self.allocated.get(key, 0) + 1
            if self.allocated[key] > self.asks[key]:
                found.append(Violation("beyond-max-allocations",
                                       f"ask {key} allocated {self.allocated[key]} times, "
                                       f"maxAllocations {self.asks[key]}", now))
        capacity = self.node_capacity.get(node_id)
        if capacity is None:
            found.append(Violation("unknown-node", f"allocation {key} on unknown node {node_id}", now))
        else:
            used = self.node_used.setdefault(node_id, {})
            _add(used, res, +1)
            over = {k: (v, capacity.get(k, 0)) for k, v in used.items() if v > capacity.get(k, 0)}
            if over:
                detail = ", ".join(f"{k} {u} > {c}" for k, (u, c) in sorted(over.items()))
                found.append(Violation("node-overcommit", f"node {node_id} over-committed by {key}: {detail}", now))
        if queue is not None:
            partition, path = queue
            for ancestor in _ancestors(path):
                _add(self.queue_used.setdefault((partition, ancestor), {}), res, +1)
        found += self.limit_violations(key, queue, owner, now)
        self.violations.extend(found)
        return found

    def limit_violations(self, key: str, queue: QueueRef | None, owner: Owner | None,
                         now: float) -> list[Violation]:
        """The queue max and user/group limits the usage booked now exceeds on ``queue``'s path,
        as of allocation ``key`` (checked, not booked)."""
        if queue is None:
            return []
        found: list[Violation] = []
        partition, path = queue
        for ancestor in _ancestors(path):
            limit = self.queue_max.get((partition, ancestor))
            used = self.queue_used.get((partition, ancestor), {})
            over = {k: (used.get(k, 0), m) for k, m in (limit or {}).items() if used.get(k, 0) > m}
            if over:
                detail = ", ".join(f"{k} {u} > {m}" for k, (u, m) in sorted(over.items()))
                found.append(Violation("queue-max-exceeded",
                                       f"queue {ancestor} of partition {partition} over its max "
                                       f"after {key}: {detail}", now))
        if owner is not None and self.ugm:
            found += self._ugm_check(key, queue, owner, now)
        return found

    def set_limits(self, queue_max: dict[QueueRef, dict[str, int]], ugm: dict[QueueRef, tuple[LimitConfig, ...]],
                   running: list[tuple[QueueRef, dict[str, int], Owner]]) -> None:
        """New limits from now on (the config the scheduler serves changed): the user/group usage
        is booked again from the ``running`` allocations (queue, resources, owner), since the new
        limits may count other users, groups and queues; the peaks seen so far stay."""
        self.queue_max, self.ugm = queue_max, ugm
        self.ugm_used, self.ugm_apps = {}, {}
        for queue, res, owner in running:
            self._ugm_book(queue, res, owner, +1)

    def recheck(self, found: list[Violation], key: str, queue: QueueRef | None, owner: Owner | None,
                now: float) -> list[Violation]:
        """``found`` (the violations of allocation ``key``) with its limit violations checked again
        under the limits set since (``set_limits``)."""
        limits = [v for v in found if v.kind in LIMIT_KINDS]
        for v in limits:
            self.violations.remove(v)
        again = self.limit_violations(key, queue, owner, now)
        self.violations.extend(again)
        return [v for v in found if v.kind not in LIMIT_KINDS] + again

    def released(self, key: str, node_id: str, queue: QueueRef | None, res: dict[str, int],
                 owner: Owner | None = None) -> None:
        """Unbook an allocation the RM released or the scheduler took back."""
        if owner is not None and queue is not None and self.ugm:
            self._ugm_book(queue, res, owner, -1)
        if node_id in self.node_used:
            _add(self.node_used[node_id], res, -1)
        if queue is not None:
            partition, path = queue
            for ancestor in _ancestors(path):
                _add(self.queue_used.setdefault((partition, ancestor), {}), res, -1)

    def placeholder_replaced(self, ph_key: str, ph_node: str, real_uuid: str,
                             real: tuple[str, str] | None, now: float) -> list[Violation]:
        """Check one ``PLACEHOLDER_REPLACED`` release against the real allocation it names:
        ``real`` is (allocationKey, nodeID) of that allocation in the same response, or None."""
        found: list[Violation] = []
        if real is None:
            found.append(Violation("replacement-not-atomic",
                                   f"placeholder {ph_key} on node {ph_node} released PLACEHOLDER_REPLACED "
                                   f"but real allocation {real_uuid or '(no uuid)'} is not in the same response",
                                   now))
        elif real[1] != ph_node:
            found.append(Violation("replacement-elsewhere",
                                   f"{real[0]} replaced placeholder {ph_key} of node {ph_node} on node {real[1]}",
                                   now))
        self.violations.extend(found)
        return found

    def preempted(self, victim: str, victim_origin: str, preemptor_origin: str | None, *,
                  opted_out: bool, placeholder: bool, now: float) -> list[Violation]:
        """Check one ``PREEMPTED_BY_SCHEDULER`` release. Origins are the first key of a task
        (a re-submission keeps its origin); ``preemptor_origin`` is None when the release
        does not name its preemptor."""
        found: list[Violation] = []
        if opted_out:
            found.append(Violation("preempted-opted-out",
                                   f"{victim} was preempted but its ask has allowPreemptSelf: false", now))
        if placeholder:
            found.append(Violation("preempted-placeholder", f"placeholder {victim} was preempted", now))
        if preemptor_origin is not None:
            if self.preempted_by.get(preemptor_origin) == victim_origin:
                found.append(Violation("preemption-loop",
                                       f"{victim} (task {victim_origin}) preempted by task {preemptor_origin}, "
                                       f"which it had preempted before", now))
            self.preempted_by[victim_origin] = preemptor_origin
        self.violations.extend(found)
        return found

    # ------------------------------------------------------------------ user/group limits
    def _group(self, partition: str, path: str, groups: tuple[str, ...]) -> str | None:
        entries = [lim for a in _ancestors(path) for lim in self.ugm.get((partition, a), ())]
        named = {g for lim in entries for g in lim.groups if g != WILDCARD}
        for g in groups:
            if g in named:
                return g
        if groups and any(WILDCARD in lim.groups for lim in entries):
            return groups[0]
        return None

    def _ugm_entries(self, queue: QueueRef, owner: Owner):
        """(ref, limit entry) of every user/group limit on ``queue``'s path that applies to ``owner``."""
        partition, path = queue
        group = self._group(partition, path, owner.groups)
        for ancestor in _ancestors(path):
            limits = self.ugm.get((partition, ancestor))
            if not limits:
                continue
            for kind, name in (("user", owner.user), ("group", group)):
                lim = _entry(limits, kind, name) if name else None
                if lim is not None:
                    yield ((partition, ancestor), kind, name), lim

    def _ugm_book(self, queue: QueueRef, res: dict[str, int], owner: Owner, sign: int) -> None:
        for ref, _ in self._ugm_entries(queue, owner):
            used = self.ugm_used.setdefault(ref, {})
            _add(used, res, sign)
            apps = self.ugm_apps.setdefault(ref, {})
            apps[owner.app_id] = apps.get(owner.app_id, 0) + sign
            if apps[owner.app_id] <= 0:
                del apps[owner.app_id]
            if sign > 0:
                peak = self.ugm_peak.setdefault(ref, {})
                for k, v in used.items():
                    peak[k] = max(peak.get(k, 0), v)

    def _ugm_check(self, key: str, queue: QueueRef, owner: Owner, now: float) -> list[Violation]:
        found: list[Violation] = []
        for ((partition, ancestor), kind, name), lim in self._ugm_entries(queue, owner):
            used = self.ugm_used.get(((partition, ancestor), kind, name), {})
            apps = self.ugm_apps.get(((partition, ancestor), kind, name), {})
            over = {k: (used.get(k, 0), m) for k, m in lim.maxresources.items() if used.get(k, 0) > m}
            if over:
                detail = ", ".join(f"{k} {u} > {m}" for k, (u, m) in sorted(over.items()))
                found.append(Violation(f"{kind}-limit-exceeded",
                                       f"{kind} {name} over its limit in queue {ancestor} of partition "
                                       f"{partition} after {key}: {detail}", now))
            if lim.maxapplications and len(apps) > lim.maxapplications:
                found.append(Violation(f"{kind}-limit-exceeded",
                                       f"{kind} {name} runs {len(apps)} apps in queue {ancestor} of partition "
                                       f"{partition} (maxapplications {lim.maxapplications}) after {key}", now))
        return found

    def limit_peaks(self) -> dict[str, dict[str, int]]:
        """Peak usage of every limited user/group per queue: ``"<partition>:<queue> user <name>"``."""
        return {f"{q[0]}:{q[1]} {kind} {name}": dict(peak)
                for (q, kind, name), peak in sorted(self.ugm_peak.items())}
