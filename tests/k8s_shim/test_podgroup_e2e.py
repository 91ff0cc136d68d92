"""Kubernetes 1.36's gang API end to end: ``korral up`` + ``korral k8s-fake --runtime-config
scheduling.k8s.io/v1alpha2=true`` + ``korral k8s-shim``, real processes. A Job-style set of pods
in one PodGroup with ``gang: {minCount: 4}`` is placed all or nothing (room for three: nothing
binds; room for a fourth: all four bind) and the PodGroup's ``PodGroupScheduled`` condition says
so; a pod naming a PodGroup that does not exist waits, saying why, and is scheduled once the
PodGroup is created."""

from __future__ import annotations

import time

import pytest

from k8s_shim.demo import namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, condition, placement_problems, pod_events
from tests.k8s_shim.test_gang_e2e import start

RUNTIME = ("--runtime-config", "scheduling.k8s.io/v1alpha2=true")
GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"
PLACEHOLDER = "internal.yunikorn.apache.org/placeholder"


@pytest.fixture
def pg_cluster(stack_factory, tmp_path):
    cluster = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        cluster.start_fake_with_configs(*RUNTIME)
        yield cluster
    finally:
        cluster.stop()


def pod_group(name: str, policy: dict) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"schedulingPolicy": policy}}


def member(name: str, ns: str, group: str, cpu: str = "1") -> dict:
    return pod(name, ns, cpu, "128Mi", labels={"job-name": "train"}, schedulingGroup={"podGroupName": group})


def scheduled(kube, ns: str, name: str) -> dict | None:
    body = kube.get(GROUPS.format(ns=ns) + f"/{name}")
    return next((c for c in (body.get("status") or {}).get("conditions") or []
                 if c.get("type") == "PodGroupScheduled"), None)


def test_a_podgroup_gang_binds_all_or_nothing_and_its_condition_says_so(pg_cluster):
    c, kube = pg_cluster, pg_cluster.kube
    start(c, node("n0", "3", "8Gi"))  # room for three 1-cpu members, not four
    kube.create("/api/v1/namespaces", namespace("ml"))
    kube.create(GROUPS.format(ns="ml"), pod_group("train-workers-0", {"gang": {"minCount": 4}}))
    names = [f"train-{i}" for i in range(4)]
    for n in names:
        kube.create("/api/v1/namespaces/ml/pods", member(n, "ml", "train-workers-0"))

    def pods() -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in kube.pods("ml")}

    def placeholders_bound() -> int:
        return sum(1 for p in pods().values() if (p["metadata"].get("annotations") or {}).get(PLACEHOLDER)
                   and p["spec"].get("nodeName"))
    wait_until(lambda: placeholders_bound() == 3, 60, "three of the gang's four placeholders bound", c.logs)
    wait_until(lambda: (s := scheduled(kube, "ml", "train-workers-0")) and s["status"] == "False", 30,
               "PodGroupScheduled=False on the PodGroup", c.logs)
    cond = scheduled(kube, "ml", "train-workers-0")
    assert cond["reason"] == "Unschedulable" and "4 pods" in cond["message"], cond
    time.sleep(2)  # (a pod bound by mistake would be bound by now)
    assert not [n for n in names if pods()[n]["spec"].get("nodeName")], "a member bound before the gang fit"

    kube.create("/api/v1/nodes", node("n1", "2", "8Gi"))  # room for the fourth
    wait_until(lambda: all(pods().get(n, {}).get("spec", {}).get("nodeName") for n in names), 90,
               "all four members bound", c.logs)
    wait_until(lambda: (s := scheduled(kube, "ml", "train-workers-0")) and s["status"] == "True", 30,
               "PodGroupScheduled=True on the PodGroup", c.logs)
    wait_until(lambda: all("Scheduled" in pod_events(kube).get(f"ml/{n}", ()) for n in names), 30,
               "a Scheduled event on each member", lambda: pod_events(kube))
    app = c.korral_app("ml.train-workers-0")
    assert [(d["taskGroupName"], d["count"]) for d in app["placeholderData"]] == [("train-workers-0", 4)], app
    assert not placement_problems(kube), placement_problems(kube)


def test_a_pod_waits_for_its_missing_podgroup_and_is_scheduled_once_it_exists(pg_cluster):
    c, kube = pg_cluster, pg_cluster.kube
    start(c, node("n0", "4", "8Gi"))
    kube.create("/api/v1/namespaces", namespace("late"))
    kube.create("/api/v1/namespaces/late/pods", member("w0", "late", "later", cpu="500m"))

    def w0() -> dict:
        return kube.get("/api/v1/namespaces/late/pods/w0")
    wait_until(lambda: (cond := condition(w0())) and cond["reason"] == "SchedulingGated", 30,
               "the waiting pod's PodScheduled condition", c.logs)
    assert 'PodGroup "late/later"' in condition(w0())["message"]
    wait_until(lambda: any('PodGroup "late/later"' in e["note"] for e in kube.events("late")), 30,
               "an event saying which PodGroup the pod waits for", lambda: kube.events("late"))
    assert not w0()["spec"].get("nodeName")

    kube.create(GROUPS.format(ns="late"), pod_group("later", {"basic": {}}))
    wait_until(lambda: w0()["spec"].get("nodeName"), 30, "the pod bound once its PodGroup exists", c.logs)
