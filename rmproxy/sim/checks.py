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
from common.config.model import QueueConfig

__all__ = ["Validator", "Violation", "queue_limits"]

QueueRef = tuple[str, str]  # (partition, queue path)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    message: str
    at: float


def queue_limits(config_text: str) -> dict[QueueRef, dict[str, int]]:
    """Every queue with a ``max`` in the config: (partition, path) -> max. Raises ConfigError."""
    limits: dict[QueueRef, dict[str, int]] = {}

    def walk(partition: str, queue: QueueConfig, prefix: str) -> None:
        path = f"{prefix}.{queue.name}" if prefix else queue.name
        if queue.resources.max:
            limits[(partition, path)] = dict(queue.resources.max)
        for child in queue.queues:
            walk(partition, child, path)

    for p in load_config(config_text).partitions:
        walk(p.name, p.root, "")
    return limits


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

    def ask_added(self, key: str, max_allocations: int = 1) -> None:
        self.asks[key] = max_allocations

    def ask_removed(self, key: str) -> None:
        self.asks.pop(key, None)

    def allocated_to(self, key: str, node_id: str, queue: QueueRef | None, res: dict[str, int],
                     now: float) -> list[Violation]:
        """Check one new allocation and book it; returns the violations it caused."""
        found: list[Violation] = []
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
                ref = (partition, ancestor)
                used = self.queue_used.setdefault(ref, {})
                _add(used, res, +1)
                limit = self.queue_max.get(ref)
                if limit:
                    over = {k: (used.get(k, 0), m) for k, m in limit.items() if used.get(k, 0) > m}
                    if over:
                        detail = ", ".join(f"{k} {u} > {m}" for k, (u, m) in sorted(over.items()))
                        found.append(Violation("queue-max-exceeded",
                                               f"queue {ancestor} of partition {partition} over its max "
                                               f"after {key}: {detail}", now))
        self.violations.extend(found)
        return found

    def released(self, key: str, node_id: str, queue: QueueRef | None, res: dict[str, int]) -> None:
        """Unbook an allocation the RM released or the scheduler took back."""
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
