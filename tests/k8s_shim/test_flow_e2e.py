"""Flow control end to end: ``korral up`` + ``korral k8s-fake`` + ``korral k8s-shim``, real
processes. A 429 storm (half the bindings and events answered 429 Too Many Requests
with Retry-After, as API Priority and Fairness answers them) and a low ``kubernetes.qps`` slow the
shim down, and lose nothing: every pod is bound exactly once, none is refused, and the shim's
state dump counts the 429s and the waits for the rate limit's tokens."""

from __future__ import annotations

import pytest

from k8s_shim.demo import namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, pod_events

pytestmark = pytest.mark.timeout(240)

PODS = 40
NS = "storm"


@pytest.fixture
def storm_cluster(stack_factory, tmp_path):
    cluster = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        # YuniKorn's keys, read at start: 20 writes a second, 5 at once
        cluster.start_fake_with_configs(settings={"kubernetes.qps": "20", "kubernetes.burst": "5"})
        yield cluster
    finally:
        cluster.stop()


def test_a_429_storm_slows_the_shim_without_losing_a_pod(storm_cluster):
    c, kube = storm_cluster, storm_cluster.kube
    for i in range(2):
        kube.create("/api/v1/nodes", node(f"node-{i}", "16", "32Gi"))
    c.start_shim()
    wait_until(lambda: len([n for n in c.korral_nodes().values() if n["schedulable"]]) == 2, 60,
               "the two nodes registered and opened", c.logs)
    kube.create("/api/v1/namespaces", namespace(NS))
    # the storm: every other binding and event answered 429 (Retry-After 1 s)
    for method, prefix, count in (("POST", f"/api/v1/namespaces/{NS}/pods/", PODS),
                                  ("POST", "/apis/events.k8s.io/", 2 * PODS)):
        kube.create("/korral-fake/faults", {"method": method, "pathPrefix": prefix, "status": 429, "retryAfter": 1,
                                            "share": 0.5, "count": count})
    names = {f"{NS}/w-{i}" for i in range(PODS)}
    for i in range(PODS):
        kube.create(f"/api/v1/namespaces/{NS}/pods",
                    pod(f"w-{i}", NS, "100m", "64Mi", labels={"applicationId": f"storm-{i % 4}"}))

    def bound() -> set[str]:
        return {f"{NS}/{p['metadata']['name']}" for p in kube.pods()
                if p["metadata"]["namespace"] == NS and p["spec"].get("nodeName")}
    wait_until(lambda: bound() == names, 120, "every pod bound through the storm", c.logs)

    binds = c.bind_requests()
    assert {n: binds[n]["bound"] for n in names} == {n: 1 for n in names}  # each bound once
    left = {(f["method"], f["pathPrefix"]): f["count"] for f in kube.get("/korral-fake/faults")["faults"]}
    # bindings and events were answered 429 (before the API counts them) and sent again
    assert left.get(("POST", f"/api/v1/namespaces/{NS}/pods/"), 0) < PODS
    assert left.get(("POST", "/apis/events.k8s.io/"), 0) < 2 * PODS
    flow = wait_until(lambda: (c.shim_books() or {}).get("apiFlow"), 30, "the shim's state dump", c.logs)
    assert flow["throttled"] > 0 and flow["retried"] > 0 and flow["waitedForToken"] > 0, flow
    events = wait_until(lambda: (ev := pod_events(kube)) and all("Scheduled" in ev.get(n, ()) for n in names) and ev,
                        60, "a Scheduled event on every pod, through the storm", c.logs)
    assert not any("PodBindFailure" in events.get(n, ()) for n in names)
