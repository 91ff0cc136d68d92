"""Inter-pod constraints end to end (``korral up`` + ``korral k8s-fake`` + ``korral k8s-shim``,
real processes) on one cluster of four nodes in two zones (n1-n3 in zone a, n4 in zone b), fair
node ordering (the least used node first), three workloads in turn:

(a) four replicas with required pod anti-affinity on kubernetes.io/hostname land one per node; a
    fifth waits, its PodScheduled condition naming anti-affinity;
(b) a cache pod pinned to n4, made the busiest node, and three pods with required pod affinity to
    it on kubernetes.io/hostname: all on n4 (fair ordering alone would send them elsewhere);
(c) six pods with a topology spread constraint (maxSkew 1 on topology.kubernetes.io/zone,
    DoNotSchedule): three per zone, though zone a has three nodes and zone b one.
"""

from __future__ import annotations

from collections import Counter

import pytest

from k8s_shim.demo import namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, condition, placement_problems

HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
ZONES = {"n1": "a", "n2": "a", "n3": "a", "n4": "b"}


@pytest.fixture
def cluster(stack_factory, tmp_path):
    c = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        kube = c.start_fake_with_configs()
        for name, zone in ZONES.items():
            kube.create("/api/v1/nodes", node(name, "8", "16Gi", {ZONE: zone}))
        kube.create("/api/v1/namespaces", namespace("apps"))
        c.start_shim()
        wait_until(lambda: len([n for n in c.korral_nodes().values() if n["schedulable"]]) == 4, 60,
                   "the four nodes registered and opened", c.logs)
        yield c
    finally:
        c.stop()


def _where(kube, prefix: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in kube.pods()
            if p["metadata"]["namespace"] == "apps" and p["metadata"]["name"].startswith(prefix)}


def _bound(kube, prefix: str, count: int, c: ShimCluster) -> dict[str, str]:
    return wait_until(lambda: (w := _where(kube, prefix)) and len([n for n in w.values() if n]) >= count and w,
                      90, f"{count} {prefix} pods bound", c.logs)


def _create(kube, p: dict) -> None:
    kube.create("/api/v1/namespaces/apps/pods", p)


def test_anti_affinity_affinity_and_spread_are_evaluated(cluster):
    c, kube = cluster, cluster.kube
    # (a) one replica per node; the fifth waits, saying why
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}]}}
    for i in range(5):
        _create(kube, pod(f"web-{i}", "apps", "100m", "64Mi", labels={"app": "web", "applicationId": "web"},
                          affinity=anti))

    def fifth_waits() -> tuple[dict, str] | None:
        web = _where(kube, "web-")
        unbound = [name for name, n in web.items() if not n]
        if len(web) == 5 and len(unbound) == 1:
            cond = condition(kube.get(f"/api/v1/namespaces/apps/pods/{unbound[0]}")) or {}
            if cond.get("status") == "False" and cond.get("message"):
                return web, cond["message"]
        return None

    web, message = wait_until(fifth_waits, 60, "four replicas bound, the fifth unschedulable", c.logs)
    assert sorted(n for n in web.values() if n) == ["n1", "n2", "n3", "n4"], web
    assert "anti-affinity" in message, message

    # (b) the followers of a cache pod land on its node
    _create(kube, pod("cache", "apps", "3", "1Gi", labels={"role": "cache", "applicationId": "cache"},
                      nodeSelector={HOST: "n4"}))
    assert _bound(kube, "cache", 1, c)["cache"] == "n4"
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "cache"}}, "topologyKey": HOST}]}}
    for i in range(3):
        _create(kube, pod(f"follower-{i}", "apps", "100m", "64Mi", labels={"applicationId": "followers"},
                          affinity=near))
    followers = _bound(kube, "follower-", 3, c)
    assert set(followers.values()) == {"n4"}, followers

    # (c) six pods spread over the two zones: three in each
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "spread"}}}]
    for i in range(6):
        _create(kube, pod(f"spread-{i}", "apps", "100m", "64Mi", labels={"app": "spread", "applicationId": "spread"},
                          topologySpreadConstraints=spread))
    spreads = _bound(kube, "spread-", 6, c)
    assert Counter(ZONES[n] for n in spreads.values()) == {"a": 3, "b": 3}, spreads
    assert not placement_problems(kube), placement_problems(kube)
