"""``korral bench core --gangs``: topology-aware gang placement (issue 35) against the same gangs
placed topology-blind.

Scenario: N nodes (default 5,000) of 8 slots ({memory: 80, vcore: 8}) in 10 blocks x 10 racks
(labels ``example.com/block``, ``example.com/rack`` in ``si.io/nodelabels``, as the k8s shim
sends them), each with 0-7 slots occupied by other pods (a fixed seed); 1,000 gangs of 8-64 one-slot members (a fixed seed) arrive one after another, each
tagged ``korral.io/gang-topology: {"level": "rack", "mode": "preferred"}``; a gang ends when the
500th gang after it arrives, so the free slots run about 80 % used and fragment. Per gang: the
racks and blocks its members landed in, whether some rack could hold it when it arrived (its
nodes' free slots, counted by the bench), and the time of its domain decision
(``topology.choose``) and of the step that placed it. The blind run: the same gangs untagged.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from dataclasses import replace

__all__ = ["gangs_row", "GANGS"]

GANGS = 1000
BLOCKS, RACKS = 10, 10  # racks per block
SLOTS = 8  # members per node
LIFETIME = 600  # a gang ends when this many gangs after it have arrived
BLOCK, RACK = "example.com/block", "example.com/rack"


def _rack_of(i: int, nodes: int) -> tuple[str, str]:
    r = i * BLOCKS * RACKS // nodes
    return f"b{r // RACKS:02d}", f"r{r:03d}"


def _run(nodes: int, topology: bool, seed: int, lifetime: int, gangs: int = GANGS) -> dict:
    from common.config.model import TopologyConfig, TopologyLevelConfig
    from common.bench_scenario import partition_config
    from common.constants import NODE_LABELS, TAG_GANG_TOPOLOGY
    from common.resources import Resource
    from partition_worker.core import AddApp, AddAsk, AddNode, Partition
    from partition_worker.core import scheduler as sched_mod
    from partition_worker.core.commands import ReleaseAlloc
    from partition_worker.core.outcomes import Termination
    from partition_worker.session import uuid_source

    levels = TopologyConfig((TopologyLevelConfig("block", BLOCK), TopologyLevelConfig("rack", RACK)))
    now = time.time_ns()
    p = Partition("default", replace(partition_config("fair"), topology=levels), rm_id="bench",
                  new_uuid=uuid_source(), created_ns=now)
    size = Resource({"memory": 10 * SLOTS, "vcore": SLOTS})
    rng = random.Random(seed)
    rack_nodes: dict[str, list[str]] = {}
    for i in range(nodes):
        nid = f"node-{i:05d}"
        block, rack = _rack_of(i, nodes)
        rack_nodes.setdefault(rack, []).append(nid)
        used = rng.randint(0, SLOTS - 1)
        p.handle(AddNode(nid, size, Resource({"memory": 10 * used, "vcore": used}),
                         attributes={NODE_LABELS: json.dumps({BLOCK: block, RACK: rack})}), now)
    p.step(now)
    p.outcomes.drain()
    decisions: list[float] = []  # the choices that pinned a gang
    waits: list[float] = []  # the ones that found no domain (a skip, nothing having gained room, included)
    real_choose = sched_mod.choose

    def timed_choose(*a, **kw):
        t0 = time.perf_counter()
        pin, waiting = real_choose(*a, **kw)
        (decisions if pin is not None else waits).append(time.perf_counter() - t0)
        return pin, waiting
    sched_mod.choose = timed_choose
    sizes = [rng.randint(8, 64) for _ in range(gangs)]
    member = Resource({"memory": 10, "vcore": 1})
    tag = {TAG_GANG_TOPOLOGY: json.dumps({"level": "rack", "mode": "preferred"})} if topology else {}
    placed: dict[str, list] = {}  # gang -> its allocations
    fit_rack: dict[str, bool] = {}
    steps: list[float] = []
    try:
        for g, n in enumerate(sizes):
            if g >= lifetime:
                old = f"gang-{g - lifetime:04d}"
                for a in placed.get(old, []):
                    p.handle(ReleaseAlloc(old, a.uuid, Termination.STOPPED_BY_RM), now)
            app = f"gang-{g:04d}"
            fit_rack[app] = any(sum(max(0, p.nodes.get(nid).available.get("vcore")) for nid in ids) >= n
                                for ids in rack_nodes.values())
            p.handle(AddApp(app, "root.a", "bench", placeholder_ask=member.multiply(n), tags=tag), now)
            p.handle(AddAsk(f"{app}-ph", app, member, max_allocations=n, placeholder=True, task_group="tg"), now)
            now += 1_000_000
            t0 = time.perf_counter()
            p.step(now)
            steps.append(time.perf_counter() - t0)
            for a in p.outcomes.drain().allocations:
                placed.setdefault(a.alloc.app_id, []).append(a.alloc)
    finally:
        sched_mod.choose = real_choose
    full = {g: allocs for g, allocs in placed.items() if len(allocs) == sizes[int(g[5:])]}
    in_rack = {g for g, allocs in full.items() if len({_rack_of(int(a.node_id[5:]), nodes)[1] for a in allocs}) == 1}
    in_block = {g for g, allocs in full.items() if len({_rack_of(int(a.node_id[5:]), nodes)[0] for a in allocs}) == 1}
    fitting = [g for g in full if fit_rack[g]]
    ms = sorted(d * 1000 for d in decisions)
    wait_ms = sorted(d * 1000 for d in waits)
    step_ms = sorted(s * 1000 for s in steps)
    return {"gangs_placed": len(full), "in_one_rack": round(len(in_rack) / max(len(full), 1), 4),
            "in_one_block": round(len(in_block) / max(len(full), 1), 4),
            "fit_a_rack": len(fitting),
            "fit_a_rack_placed_in_one": round(sum(g in in_rack for g in fitting) / max(len(fitting), 1), 4),
            "decision_ms_median": round(statistics.median(ms), 3) if ms else None,
            "decision_ms_p99": round(ms[int(len(ms) * 0.99) - 1], 3) if ms else None,
            "decision_ms_max": round(ms[-1], 3) if ms else None,
            "no_domain_decisions": len(wait_ms),
            "no_domain_ms_median": round(statistics.median(wait_ms), 3) if wait_ms else None,
            "no_domain_ms_p99": round(wait_ms[max(int(len(wait_ms) * 0.99) - 1, 0)], 3) if wait_ms else None,
            "step_ms_median": round(statistics.median(step_ms), 3),
            "step_ms_p99": round(step_ms[int(len(step_ms) * 0.99) - 1], 3)}


def gangs_row(nodes: int, lifetime: int = LIFETIME, seed: int = 35, gangs: int = GANGS) -> dict:
    """One row: the scenario with the topology tag and without, in this process."""
    aware = _run(nodes, True, seed, lifetime, gangs)
    blind = _run(nodes, False, seed, lifetime, gangs)
    return {"nodes": nodes, "gangs": gangs, "lifetime": lifetime, "topology": aware, "blind": blind}
