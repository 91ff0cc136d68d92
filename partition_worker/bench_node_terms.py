"""``korral bench core --node-terms``: the scheduling benchmark on a Kubernetes-shaped cluster,
where the node checks of Kubernetes' filters have work to do.

Scenario (N nodes, default 5,000; the asks of ``--asks``, default 10,000; YuniKorn's sizing,
each node holds asks/N + 1 asks): every node has k8s labels (``pool``, ``zone`` a/b/c); 10 %
form a GPU pool tainted ``dedicated=gpu:NoSchedule`` and 3 are control-plane nodes tainted
``node-role.kubernetes.io/control-plane:NoSchedule``. Every ask carries the two NoExecute
tolerations Kubernetes adds to every pod; on top of that, 10 % are GPU pods (tolerating the GPU
taint, required node affinity ``pool In [gpu]``), 15 % have zone affinity (``zone In [a, b]``),
10 % a nodeSelector (``pool=general``) and 5 % a host port (9100). The rest are plain. Time
until all are allocated, against the same cluster and asks without any terms (``plain``) in the
same process, so the ratio says what the checks cost.
"""

from __future__ import annotations

import json
import time

from partition_worker.session import uuid_source

__all__ = ["node_terms_row"]

GPU_SHARE, CONTROL_PLANE = 10, 3  # % of nodes in the GPU pool; control-plane nodes
DEFAULT_TOLERATIONS = json.dumps([
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}])


def _ask_tags() -> list[dict[str, str]]:
    """The tags of 20 asks in a row: the scenario's mix."""
    from common.constants import (TAG_HOST_PORTS, TAG_NODE_AFFINITY, TAG_NODE_SELECTOR_PREFIX,
                                  TAG_TOLERATIONS)
    base = {TAG_TOLERATIONS: DEFAULT_TOLERATIONS, "kubernetes.io/meta/namespace": "default"}

    def affinity(key, *values):
        return json.dumps({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": "In", "values": list(values)}]}]})
    gpu = {**base, TAG_TOLERATIONS: json.dumps(json.loads(DEFAULT_TOLERATIONS) + [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
        TAG_NODE_AFFINITY: affinity("pool", "gpu")}
    zonal = {**base, TAG_NODE_AFFINITY: affinity("zone", "a", "b")}
    selector = {**base, TAG_NODE_SELECTOR_PREFIX + "pool": "general"}
    port = {**base, TAG_HOST_PORTS: json.dumps([{"hostPort": 9100, "protocol": "TCP"}])}
    return [gpu] * 2 + [zonal] * 3 + [selector] * 2 + [port] + [base] * 12


def two_app_partition(policy: str, now: int):
    """A partition of the bench scenario's config with the two applications every ask of these
    benches belongs to (``app-a`` in root.a, ``app-b`` in root.b)."""
    from common.bench_scenario import partition_config
    from partition_worker.core import AddApp, Partition
    p = Partition("default", partition_config(policy), rm_id="bench", new_uuid=uuid_source(), created_ns=now)
    for app_id, queue in (("app-a", "root.a"), ("app-b", "root.b")):
        p.handle(AddApp(app_id, queue, "bench"), now)
    return p


def _run(nodes: int, asks: int, policy: str, terms: bool):
    """(wall seconds, CPU seconds, cycles, the partition) of one run."""
    from common.bench_scenario import node_size
    from common.constants import NODE_LABELS, NODE_TAINTS
    from common.resources import Resource
    from partition_worker.core import AddAsk, AddNode
    now = time.time_ns()
    p = two_app_partition(policy, now)
    size = Resource(node_size(nodes, asks))
    gpu_nodes = nodes * GPU_SHARE // 100
    for i in range(nodes):
        attrs: dict[str, str] = {}
        if terms:
            gpu = i % (100 // GPU_SHARE) == 0 and i // (100 // GPU_SHARE) < gpu_nodes
            labels = {"pool": "gpu" if gpu else "general", "zone": "abc"[i % 3]}
            attrs[NODE_LABELS] = json.dumps(labels)
            if gpu:
                attrs[NODE_TAINTS] = json.dumps([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
            elif i < CONTROL_PLANE * 2 and i % 2:
                attrs[NODE_TAINTS] = json.dumps([{"key": "node-role.kubernetes.io/control-plane",
                                                  "effect": "NoSchedule"}])
        p.handle(AddNode(f"node-{i:06d}", size, attributes=attrs), now)
    p.step(now)
    p.outcomes.drain()
    mix = _ask_tags() if terms else [{}]
    one = Resource({"memory": 10, "vcore": 1})
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(asks):
        p.handle(AddAsk(f"ask-{i}", "app-a" if i % 2 == 0 else "app-b", one, tags=dict(mix[i % len(mix)])), now)
    allocated = cycles = 0
    while allocated < asks:
        n = p.step(time.time_ns())
        allocated += len(p.outcomes.drain().allocations)
        cycles += 1
        if n == 0 and allocated < asks:
            raise RuntimeError(f"bench stalled: {allocated} of {asks} allocated after {cycles} cycles "
                               f"({'with' if terms else 'without'} node terms)")
    return time.perf_counter() - t0, time.process_time() - c0, cycles, p


def node_terms_row(nodes: int, asks: int, policy: str = "fair") -> dict:
    """One row: the scenario with node terms and without, in this process."""
    secs, cpu, cycles, _ = _run(nodes, asks, policy, terms=True)
    _, plain_cpu, _, _ = _run(nodes, asks, policy, terms=False)
    row = with_and_without(nodes, asks, policy, cycles, secs, cpu, plain_cpu)
    row["cost_ratio"] = round(cpu / plain_cpu, 3) if plain_cpu > 0 else None
    return row


def with_and_without(nodes: int, asks: int, policy: str, cycles: int, secs: float, cpu: float,
                     plain_cpu: float) -> dict:
    """A row of a bench that runs its asks with some constraints (``secs``, ``cpu`` seconds, in
    ``cycles``) and the same asks without them (``plain_cpu``)."""
    return {"nodes": nodes, "asks": asks, "policy": policy, "cycles": cycles,
            "seconds": round(secs, 4), "allocations_per_second": round(asks / secs, 1),
            "allocations_per_cpu_second": round(asks / cpu, 1) if cpu > 0 else None,
            "plain_allocations_per_cpu_second": round(asks / plain_cpu, 1) if plain_cpu > 0 else None}
