"""What the worker loop records after each ``session.step``: cycle time, stage times and
outcome counts per session, for the metrics answer (``partition_worker.queries``).

An observer in the shell (STYLE #18): it reads the session and its outbox, never writes the
core. It also frees what an answer asked to keep until the answer has left
(``free_after_next_step``): the worker loop steps after it replies.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LATENCY_BUCKETS_MS", "STAGES", "WIRE_STAGES", "StepStats", "free_after_next_step", "observe_step",
           "observe_wire", "stats_of"]

STAGES = ("queue", "app", "node")  # timed stages of a scheduling cycle
# where a worker's time goes between a request's bytes and the response's bytes: decoding the
# SI protobuf, applying it (SI -> core commands -> the books), the scheduling cycle, building
# the SI response from the outcomes, and encoding + sending it (`korral bench e2e --breakdown`)
WIRE_STAGES = ("decode", "apply", "cycle", "respond", "send")
LATENCY_BUCKETS_MS = (0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


# --------------------------------------------------------------------------- observer

@dataclass(slots=True)
class StepStats:
    """Counters of one session, fed by the worker loop after each ``step`` (see module doc)."""

    steps: int = 0
    step_seconds_sum: float = 0.0
    step_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))
    last_step_seconds: float = 0.0
    allocated: int = 0
    rejected: int = 0
    released: int = 0
    released_asks: int = 0
    apps_accepted: int = 0
    apps_rejected: int = 0
    nodes_accepted: int = 0
    nodes_rejected: int = 0
    events: int = 0
    # per scheduling cycle, seconds spent sorting queues, sorting apps and selecting nodes
    # (the core times them with the worker's injected stage timer)
    stage_buckets: dict[str, list[int]] = field(
        default_factory=lambda: {s: [0] * (len(LATENCY_BUCKETS_MS) + 1) for s in STAGES})
    stage_seconds_sum: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    wire_seconds_sum: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WIRE_STAGES, 0.0))

    def to_data(self) -> dict:
        return {
            "steps": self.steps, "stepSecondsSum": self.step_seconds_sum,
            "stepBucketsMs": list(LATENCY_BUCKETS_MS), "stepBuckets": list(self.step_buckets),
            "lastStepSeconds": self.last_step_seconds,
            "allocationAttempts": {"allocated": self.allocated, "rejected": self.rejected,
                                   "released": self.released, "error": 0},
            "releasedAsks": self.released_asks,
            "appSubmissions": {"accepted": self.apps_accepted, "rejected": self.apps_rejected},
            "nodesAccepted": self.nodes_accepted, "nodesRejected": self.nodes_rejected,
            "events": self.events,
            "stageBuckets": {k: list(v) for k, v in self.stage_buckets.items()},
            "stageSecondsSum": dict(self.stage_seconds_sum),
            "wireSecondsSum": dict(self.wire_seconds_sum),
        }


# Per-session stats; weak keys so a released partition's stats go with its session, and two
# workers in one test process never share counters.
_STATS: "weakref.WeakKeyDictionary[Any, StepStats]" = weakref.WeakKeyDictionary()


def stats_of(session: Any) -> StepStats | None:
    return _STATS.get(session)


def _stats_for(session: Any) -> StepStats:
    st = _STATS.get(session)
    if st is None:
        st = _STATS[session] = StepStats()
    return st


def observe_wire(session: Any, **seconds: float) -> None:
    """Add seconds to the ``WIRE_STAGES`` named as keywords (``decode=..., apply=...``)."""
    wire = _stats_for(session).wire_seconds_sum
    for stage, spent in seconds.items():
        wire[stage] += spent


def _bucket(seconds: float) -> int:
    ms = seconds * 1000
    i = 0
    while i < len(LATENCY_BUCKETS_MS) and ms > LATENCY_BUCKETS_MS[i]:
        i += 1
    return i


def observe_step(session: Any, outbox: Any, seconds: float) -> None:
    """Record one ``session.step`` that took ``seconds`` and returned ``outbox`` (an Outbox).
    Also frees what ``free_after_next_step`` kept: the loop steps after replying."""
    _DEFERRED.clear()
    st = _stats_for(session)
    st.steps += 1
    st.step_seconds_sum += seconds
    st.last_step_seconds = seconds
    st.step_buckets[_bucket(seconds)] += 1
    core = getattr(session, "core", None)
    stages = getattr(core, "last_cycle_stages", None)
    if stages:  # a cycle ran in this step
        core.last_cycle_stages = None
        for stage, spent in stages.items():
            st.stage_buckets[stage][_bucket(spent)] += 1
            st.stage_seconds_sum[stage] += spent
    if outbox.new_allocations is not None:
        st.allocated += len(outbox.new_allocations.new)
    a = outbox.allocation_rest
    if a is not None:
        st.rejected += len(a.rejected)
        st.released += len(a.released)
        st.released_asks += len(a.releasedAsks)
    ap = outbox.application
    if ap is not None:
        st.apps_accepted += len(ap.accepted)
        st.apps_rejected += len(ap.rejected)
    n = outbox.node
    if n is not None:
        st.nodes_accepted += len(n.accepted)
        st.nodes_rejected += len(n.rejected)
    st.events += len(outbox.events)


# Objects whose deallocation would delay an answer; freed by the next ``observe_step``.
_DEFERRED: list = []


def free_after_next_step(*objects: Any) -> None:
    """Keep ``objects`` alive until the next step, so freeing them does not delay the reply."""
    _DEFERRED[:] = objects
