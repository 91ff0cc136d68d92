"""Run statistics of the sim: latencies, rates, per-queue share over time, the summary.

Pure: times are passed in. ``sample`` keeps one row per second for the
timeline (CSV/JSON output and the share columns of the summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Protocol

from common.series import percentile
from simulator.checks import Validator, Violation
from simulator.workload import Plan

__all__ = ["Stats", "Observed", "queue_label"]

SAMPLE_EVERY = 1.0
PLACEHOLDER_COUNTS = ("allocated", "replaced", "timedout", "released")


class Observed(Protocol):
    """What the statistics read of the simulated cluster (``SimCluster`` is one)."""

    plan: Plan
    validator: Validator
    nodes_accepted: Collection[str]
    nodes_rejected: Mapping[str, str]

    def counts(self) -> dict[str, int]: ...

    def running_by_queue(self) -> dict[tuple[str, str], dict[str, int]]: ...

    def app_outcomes(self) -> dict[str, int]: ...


def queue_label(partition: str, queue: str) -> str:
    return f"{partition}:{queue}"


@dataclass(slots=True)
class Stats:
    capacity: dict[str, dict[str, int]]  # partition -> total node capacity
    start: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds, ask -> allocation
    alloc_times: list[float] = field(default_factory=list)
    per_queue_allocations: dict[str, int] = field(default_factory=dict)
    per_queue_preempted: dict[str, int] = field(default_factory=dict)  # victims per queue
    placeholders: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PLACEHOLDER_COUNTS, 0))
    violations: list[Violation] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    end: float = 0.0
    _next_sample: float = 0.0

    def begin(self, now: float) -> None:
        self.start = now
        self._next_sample = now

    def allocated(self, now: float, latency: float, queue: str) -> None:
        self.latencies.append(latency)
        self.alloc_times.append(now)
        self.per_queue_allocations[queue] = self.per_queue_allocations.get(queue, 0) + 1

    def placeholder(self, what: str) -> None:
        """A gang placeholder was allocated, replaced, timed out or released."""
        self.placeholders[what] += 1

    def preempted(self, queue: str) -> None:
        self.per_queue_preempted[queue] = self.per_queue_preempted.get(queue, 0) + 1

    def violation(self, found: list[Violation]) -> None:
        self.violations.extend(found)

    def rate(self, now: float, window: float = 1.0) -> float:
        """Allocations per second over the last ``window`` seconds."""
        count = 0
        for t in reversed(self.alloc_times):
            if t < now - window:
                break
            count += 1
        return count / window

    def shares(self, cluster: Observed) -> dict[str, float]:
        """Dominant share of its partition's capacity that each queue's running tasks hold."""
        out = {}
        for (partition, queue), used in cluster.running_by_queue().items():
            cap = self.capacity.get(partition, {})
            out[queue_label(partition, queue)] = max(
                (v / cap[k] for k, v in used.items() if cap.get(k)), default=0.0)
        return out

    def sample(self, now: float, cluster: Observed) -> None:
        if now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_EVERY
        counts = cluster.counts()
        self.timeline.append({
            "t": round(now - self.start, 3),
            "running": counts["running"], "pending": counts["asked"], "done": counts["done"],
            "allocations_per_second": self.rate(now),
            "shares": {k: round(v, 4) for k, v in sorted(self.shares(cluster).items())},
        })

    def summary(self, cluster: Observed, now: float) -> dict:
        """Everything the end-of-run table and ``--json`` show."""
        self.end = now
        counts = cluster.counts()
        lat_ms = [x * 1000 for x in self.latencies]
        span = (self.alloc_times[-1] - self.start) if self.alloc_times else 0.0
        queues: dict[str, dict] = {}
        for row in self.timeline:
            for q, share in row["shares"].items():
                entry = queues.setdefault(q, {"share_sum": 0.0, "share_max": 0.0})
                entry["share_sum"] += share
                entry["share_max"] = max(entry["share_max"], share)
        n = max(1, len(self.timeline))
        return {
            "workload": cluster.plan.workload.name,
            "seed": cluster.plan.seed,
            "seconds": round(now - self.start, 3),
            "nodes": {"planned": len(cluster.plan.nodes), "accepted": len(cluster.nodes_accepted),
                      "rejected": len(cluster.nodes_rejected)},
            "apps": cluster.app_outcomes(),
            "tasks": counts,
            "allocations": len(self.latencies),
            "latency_p50_ms": _round(percentile(lat_ms, 50)),
            "latency_p99_ms": _round(percentile(lat_ms, 99)),
            "latency_max_ms": _round(max(lat_ms) if lat_ms else None),
            "allocations_per_second": round(len(self.latencies) / span, 1) if span > 0 else None,
            "queues": {q: {"allocations": self.per_queue_allocations.get(q, 0),
                           "preempted": self.per_queue_preempted.get(q, 0),
                           "mean_share": round(queues.get(q, {}).get("share_sum", 0.0) / n, 4),
                           "max_share": round(queues.get(q, {}).get("share_max", 0.0), 4)}
                       for q in sorted(set(queues) | set(self.per_queue_allocations))},
            "placeholders": dict(self.placeholders),
            "limit_peaks": cluster.validator.limit_peaks(),
            "preempted": sum(self.per_queue_preempted.values()),
            "violations": [{"kind": v.kind, "message": v.message, "t": round(v.at - self.start, 3)}
                           for v in self.violations],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
