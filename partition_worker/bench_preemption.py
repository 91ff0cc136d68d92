"""``korral bench core --preemption``: the cost of queue preemption on a big, full cluster.

Scenario: N nodes (default 5,000) of {memory: 100, vcore: 10}, filled by 10 allocations
each of ``root.low`` (guaranteed 10 % of the cluster); then ``root.high`` (guaranteed 2,000
slots, ``priority.offset`` 100, ``preemption.delay`` 0s) asks for 2,000 tasks, one ask each
as the k8s shim sends them. The core runs cycles on a simulated clock (0.1 s apart, the
worker's cycle interval) until every high task is placed. Reported: scheduler time per
cycle while preempting (median, p99, max), victims, cycles, wall time of all cycles, and the
checks that make the numbers mean something: every victim came from ``root.low`` and
``root.low`` kept its guarantee.
"""

from __future__ import annotations

import statistics
import time

from partition_worker.session import uuid_source

__all__ = ["preemption_row"]

PER_NODE = 10  # low allocations per node, each {memory: 10, vcore: 1}
HIGH_TASKS = 2_000
STEP_NS = 100_000_000  # the worker's cycle interval


def _config(nodes: int, preemptors: int):
    from common.config.model import PartitionConfig, PreemptionConfig, QueueConfig, ResourcesConfig
    high = QueueConfig(name="high", properties={"priority.offset": "100", "preemption.delay": "0s"},
                       resources=ResourcesConfig(guaranteed={"memory": preemptors * 10, "vcore": preemptors}))
    low = QueueConfig(name="low", resources=ResourcesConfig(
        guaranteed={"memory": nodes * PER_NODE, "vcore": nodes * PER_NODE // 10}))
    root = QueueConfig(name="root", submitacl="*", queues=(high, low))
    return PartitionConfig(name="default", queues=(root,), preemption=PreemptionConfig(enabled=True))


def preemption_row(nodes: int, preemptors: int = HIGH_TASKS) -> dict:
    """One run; meant for its own process (``korral bench core`` spawns it). ``preemptors``
    must fit in 90 % of the cluster (``root.low`` keeps its 10 %)."""
    if not 0 < preemptors <= nodes * PER_NODE * 9 // 10:
        raise ValueError(f"{preemptors} preemptors do not fit in 90% of {nodes} nodes of {PER_NODE} slots")
    from common.resources import Resource
    from partition_worker.core import AddApp, AddAsk, AddNode, Partition
    from partition_worker.core.outcomes import Termination

    now = time.time_ns()
    p = Partition("default", _config(nodes, preemptors), rm_id="bench", new_uuid=uuid_source(),
                  created_ns=now)
    for i in range(nodes):
        p.handle(AddNode(f"node-{i:06d}", Resource({"memory": 10 * PER_NODE, "vcore": PER_NODE})), now)
    p.handle(AddApp("low", "root.low", "bench"), now)
    one = Resource({"memory": 10, "vcore": 1})
    for i in range(nodes * PER_NODE):
        p.handle(AddAsk(f"low-{i}", "low", one), now)
    while p.step(now):
        now += 1
    p.outcomes.drain()
    p.handle(AddApp("high", "root.high", "bench"), now)
    for i in range(preemptors):
        p.handle(AddAsk(f"high-{i}", "high", one), now)
    cycles: list[float] = []
    victims = placed = 0
    victim_apps: set[str] = set()
    while placed < preemptors and len(cycles) < 10_000:
        now += STEP_NS
        t0 = time.perf_counter()
        p.step(now)
        cycles.append(time.perf_counter() - t0)
        out = p.outcomes.drain()
        placed += sum(1 for a in out.allocations if a.alloc.app_id == "high")
        for r in out.released:
            if r.termination is Termination.PREEMPTED_BY_SCHEDULER:
                victims += 1
                victim_apps.add(r.app_id)
    low = p.queues.find("root.low")
    ordered = sorted(cycles)
    return {
        "nodes": nodes, "low_allocations": nodes * PER_NODE, "preemptors": preemptors,
        "placed": placed, "victims": victims, "cycles": len(cycles),
        "cycle_ms_median": round(statistics.median(cycles) * 1000, 2),
        "cycle_ms_p99": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 2),
        "cycle_ms_max": round(ordered[-1] * 1000, 2),
        "scheduler_seconds": round(sum(cycles), 3),
        "simulated_seconds": round(len(cycles) * STEP_NS / 1e9, 1),
        "victims_only_from_low": victim_apps <= {"low"},
        "low_kept_its_guarantee": low.guaranteed.fits_in(low.allocated),
    }
