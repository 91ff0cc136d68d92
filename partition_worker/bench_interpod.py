"""``korral bench core --interpod``: the scheduling benchmark with kube-scheduler's inter-pod
constraints (required pod anti-affinity, topology spread), against the same pods without them.

Scenario (N nodes, default 5,000; the asks of ``--asks``, default 10,000; YuniKorn's sizing,
each node holds asks/N + 1 asks): every node has the labels ``kubernetes.io/hostname`` and
``topology.kubernetes.io/zone`` (three zones). The asks are deployments of 20 replicas, each
pod labelled ``app=<deployment>`` in namespace ``default`` as the k8s shim sends them; half the
deployments have required pod anti-affinity to their own pods on the hostname (one replica per
node), half a topology spread constraint over the zones (maxSkew 1, DoNotSchedule). Time until
all are allocated, against the same pods without the constraints (labels and namespace only:
``plain``) in the same process; ``rate_ratio`` = constrained rate / plain rate (goal >= 0.5).
"""

from __future__ import annotations

import json
import time

from partition_worker.bench_node_terms import two_app_partition, with_and_without

__all__ = ["interpod_row", "REPLICAS"]

REPLICAS = 20  # pods per deployment
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def _tags(i: int, constrained: bool) -> dict[str, str]:
    from common.constants import TAG_NAMESPACE, TAG_POD_AFFINITY, TAG_POD_LABELS, TAG_TOPOLOGY_SPREAD
    deployment = i // REPLICAS
    app = f"d{deployment}"
    tags = {TAG_NAMESPACE: "default", TAG_POD_LABELS: json.dumps({"app": app})}
    if constrained:
        selector = {"matchLabels": {"app": app}}
        if deployment % 2 == 0:
            tags[TAG_POD_AFFINITY] = json.dumps({"requiredAnti": [
                {"selector": selector, "topologyKey": HOST, "namespaces": ["default"]}]})
        else:
            tags[TAG_TOPOLOGY_SPREAD] = json.dumps([{"maxSkew": 1, "topologyKey": ZONE,
                                                     "whenUnsatisfiable": "DoNotSchedule", "selector": selector}])
    return tags


def _run(nodes: int, asks: int, policy: str, constrained: bool):
    """(wall seconds, CPU seconds, cycles, the partition) of one run."""
    from common.bench_scenario import node_size
    from common.constants import NODE_LABELS
    from common.resources import Resource
    from partition_worker.core import AddAsk, AddNode
    now = time.time_ns()
    p = two_app_partition(policy, now)
    size = Resource(node_size(nodes, asks))
    for i in range(nodes):
        nid = f"node-{i:06d}"
        p.handle(AddNode(nid, size, attributes={NODE_LABELS: json.dumps({HOST: nid, ZONE: "abc"[i % 3]})}), now)
    p.step(now)
    p.outcomes.drain()
    one = Resource({"memory": 10, "vcore": 1})
    tags = [_tags(i, constrained) for i in range(asks)]
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(asks):
        p.handle(AddAsk(f"ask-{i}", "app-a" if (i // REPLICAS) % 2 == 0 else "app-b", one, tags=tags[i]), now)
    allocated = cycles = 0
    while allocated < asks:
        n = p.step(time.time_ns())
        allocated += len(p.outcomes.drain().allocations)
        cycles += 1
        if n == 0 and allocated < asks and not p.changed:
            raise RuntimeError(f"bench stalled: {allocated} of {asks} allocated after {cycles} cycles "
                               f"({'with' if constrained else 'without'} inter-pod constraints)")
    return time.perf_counter() - t0, time.process_time() - c0, cycles, p


def _violations(p) -> int:
    """Pods that break their own constraint where they landed (should be 0)."""
    from collections import Counter
    per_node: Counter = Counter()
    per_zone: dict[str, Counter] = {}
    for a in p.ledger.allocations.values():
        d = int(a.key.split("-")[1]) // REPLICAS
        node = p.nodes.get(a.node_id)
        if d % 2 == 0:
            per_node[(d, a.node_id)] += 1
        else:
            per_zone.setdefault(d, Counter())[node.label_map()[ZONE]] += 1
    bad = sum(n - 1 for n in per_node.values() if n > 1)
    for zones in per_zone.values():
        counts = [zones.get(z, 0) for z in "abc"]
        bad += max(0, max(counts) - min(counts) - 1)
    return bad


def interpod_row(nodes: int, asks: int, policy: str = "fair") -> dict:
    """One row: the scenario with inter-pod constraints and without, in this process."""
    secs, cpu, cycles, p = _run(nodes, asks, policy, constrained=True)
    _, plain_cpu, _, _ = _run(nodes, asks, policy, constrained=False)
    row = with_and_without(nodes, asks, policy, cycles, secs, cpu, plain_cpu)
    row["rate_ratio"] = round(plain_cpu / cpu, 3) if cpu > 0 else None
    row["violations"] = _violations(p)
    return row
