"""The shim end to end: ``korral up`` + ``korral k8s-fake`` + ``korral k8s-shim``, all real
processes. Deployment-, Job- and DaemonSet-owned pods (created as their controllers would: owner
references), a GPU pod on a tainted node, host ports, a pod of another scheduler, a namespace
quota, a pod that fits nowhere; every pod bound exactly once within allocatable; a configmap
reload and a bad one; cordon; a shim restart that binds nothing twice; an in-place resize."""

from __future__ import annotations

import json
import re
import signal

import pytest

from k8s_shim import demo
from k8s_shim.demo import QUEUES, namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, condition, placement_problems, pod_events


@pytest.fixture
def shim_cluster(stack_factory, tmp_path):
    cluster = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        cluster.start_fake_with_configs()
        yield cluster
    finally:
        cluster.stop()


def ours(kube) -> list[dict]:
    return [p for p in kube.pods() if p["spec"].get("schedulerName") == "yunikorn"]


def name(p: dict) -> str:
    return f"{p['metadata']['namespace']}/{p['metadata']['name']}"


WAITING = {"analytics/too-big", "team/notebook-2"}  # too big for any node; over the namespace quota


def test_a_mixed_workload_is_bound_once_within_allocatable_and_what_waits_says_why(shim_cluster):
    c, kube = shim_cluster, shim_cluster.kube
    for n in demo.NODES:
        kube.create("/api/v1/nodes", n)
    c.start_shim()
    wait_until(lambda: len([n for n in c.korral_nodes().values() if n["schedulable"]]) == 4, 60,
               "the four nodes registered and opened", c.logs)
    for ns in demo.WORKLOAD_NAMESPACES:
        kube.create("/api/v1/namespaces", ns)
    pods = demo.workload(kube)
    for p in pods:
        kube.create(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
    expected = {name(p) for p in pods if p["spec"]["schedulerName"] == "yunikorn"}

    def settled():
        now = {name(p): p for p in ours(kube)}
        bound = {n for n, p in now.items() if p["spec"].get("nodeName")}
        waiting = {n for n, p in now.items() if not p["spec"].get("nodeName") and condition(p)}
        return bound == expected - WAITING and waiting == WAITING
    wait_until(settled, 60, "every pod bound but the two that must wait, and those explained", c.logs)

    by_name = {name(p): p for p in ours(kube)}
    big = condition(by_name["analytics/too-big"])
    assert (big["status"], big["reason"]) == ("False", "Unschedulable")
    assert big["message"].startswith("0/4 nodes are available: ")  # then why, check by check
    assert "nsufficient" in big["message"]
    quota = condition(by_name["team/notebook-2"])
    assert quota["reason"] == "SchedulingSkipped" and "root.team" in quota["message"]
    # events are posted by the shim's recorder after what they tell: waited for
    events = wait_until(lambda: (ev := pod_events(kube)) and all("Scheduled" in ev.get(n, ()) for n in expected - WAITING)
                        and "PodUnschedulable" in ev.get("analytics/too-big", ()) and ev, 30,
                        "a Scheduled event on every bound pod and PodUnschedulable on the one too big", c.logs)
    for n in expected - WAITING:
        # PodBindSuccessful is folded into Scheduled when the binding is written within the settle window
        assert events[n].count("Scheduled") == 1 and events[n].count("PodBindSuccessful") <= 1, (n, events[n])
        assert "PodBindFailure" not in events[n]
    assert "PodUnschedulable" in events["analytics/too-big"]
    # Korral holds each running pod once, on the node it runs on; the other scheduler's pod occupies its node
    korral = c.korral_nodes()
    placed = {a["allocationKey"]: nid for nid, n in korral.items() for a in n.get("allocations") or []}
    running = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in ours(kube)
               if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")}
    wait_until(lambda: {a["allocationKey"]: nid for nid, n in c.korral_nodes().items()
                        for a in n.get("allocations") or []} == running, 30,
               "Korral's allocations equal the running pods (the Job's finished pods released)", c.logs)
    assert len(placed) >= len(running)
    assert [f["allocationKey"] for f in korral["node-small"]["foreignAllocations"]] == \
        [p["metadata"]["uid"] for p in kube.pods("kube-system") if p["metadata"]["name"] == "coredns"]
    problems = placement_problems(kube)  # every Kubernetes filter passes, nothing over allocatable
    assert not problems, problems

    # a configmap reload adds a queue; a pod asking for it is placed there
    extra = QUEUES.replace("          - name: batch\n", "          - name: extra\n            resources:\n"
                           "              max: {vcore: 1000}\n          - name: batch\n")
    kube.request("PATCH", "/api/v1/namespaces/yunikorn/configmaps/yunikorn-configs",
                 {"data": {"queues.yaml": extra}}, "application/merge-patch+json")
    kube.create("/api/v1/namespaces/shop/pods", pod("extra-1", "shop", "200m", "64Mi",
                                                   labels={"applicationId": "extra-1", "queue": "root.extra"}))
    wait_until(lambda: kube.get("/api/v1/namespaces/shop/pods/extra-1")["spec"].get("nodeName"), 30,
               "the pod of the reloaded queue bound", c.logs)
    assert "extra" in json.dumps(c.korral_queues())
    # a bad one is refused: an event says why, and the queue stays
    kube.request("PATCH", "/api/v1/namespaces/yunikorn/configmaps/yunikorn-configs",
                 {"data": {"queues.yaml": "partitions: [this is: not valid"}}, "application/merge-patch+json")
    wait_until(lambda: [e for e in kube.events("yunikorn") if e["reason"] == "ConfigRejected"], 30,
               "a ConfigRejected event", c.logs)
    assert "extra" in json.dumps(c.korral_queues())

    # cordon drains the node in Korral, uncordon opens it
    kube.request("PATCH", "/api/v1/nodes/node-b", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    wait_until(lambda: not c.korral_nodes()["node-b"]["schedulable"], 30, "node-b drained", c.logs)
    kube.request("PATCH", "/api/v1/nodes/node-b", {"spec": {"unschedulable": False}}, "application/merge-patch+json")
    wait_until(lambda: c.korral_nodes()["node-b"]["schedulable"], 30, "node-b open again", c.logs)

    # SIGUSR1: the shim's counters (events posted, dropped, ...; API requests) in one line of its log
    c.shim.send_signal(signal.SIGUSR1)
    wait_until(lambda: re.search(r"k8s-shim counters: events posted=\d+ dropped=\d+ refused=\d+",
                                 c.shim_log.read_text()), 30, "the shim's counters logged", c.logs)

    # a shim killed and restarted with that bad configmap waits (saying why) until it is fixed, then
    # reports what runs and binds only the new pod
    c.stop_shim(kill=True)
    kube.create("/api/v1/namespaces/shop/pods", pod("after-restart", "shop", "100m", "64Mi",
                                                   labels={"applicationId": "late"}))
    c.start_shim()
    wait_until(lambda: [e for e in kube.events("yunikorn") if "refused the registration" in e.get("note", "")], 30,
               "the restarted shim's ConfigRejected event", c.logs)
    assert not kube.get("/api/v1/namespaces/shop/pods/after-restart")["spec"].get("nodeName")
    kube.request("PATCH", "/api/v1/namespaces/yunikorn/configmaps/yunikorn-configs",
                 {"data": {"queues.yaml": extra}}, "application/merge-patch+json")
    wait_until(lambda: kube.get("/api/v1/namespaces/shop/pods/after-restart")["spec"].get("nodeName"), 60,
               "the pod created while the shim was down bound", c.logs)
    # events are posted by the shim's recorder after what they tell: waited for
    events = wait_until(lambda: (ev := pod_events(kube)) and all("Scheduled" in ev.get(n, ()) for n in expected - WAITING)
                        and "PodUnschedulable" in ev.get("analytics/too-big", ()) and ev, 30,
                        "a Scheduled event on every bound pod and PodUnschedulable on the one too big", c.logs)
    for n in expected - WAITING:
        assert events[n].count("Scheduled") == 1, (n, events[n])  # nothing bound again after the restart
    running = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in ours(kube)
               if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")}
    wait_until(lambda: {a["allocationKey"]: nid for nid, n in c.korral_nodes().items()
                        for a in n.get("allocations") or []} == running, 30,
               "Korral's allocations after the restart equal the running pods", c.logs)


def test_pods_land_only_where_kubernetes_filters_allow(shim_cluster):
    """Selectors, required affinity, taints and host ports: the core's node checks."""
    c, kube = shim_cluster, shim_cluster.kube
    nodes = [node("zone-a", "4", "8Gi", {"topology.kubernetes.io/zone": "a"}),
             node("zone-b", "4", "8Gi", {"topology.kubernetes.io/zone": "b", "disk": "ssd"}),
             node("tainted", "8", "8Gi", {"topology.kubernetes.io/zone": "a"},
                  [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])]
    for n in nodes:
        kube.create("/api/v1/nodes", n)
    c.start_shim()
    for ns in ("web", "batch"):
        kube.create("/api/v1/namespaces", namespace(ns))
    zone_b = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}]}}}
    pods = [pod(f"ssd-{i}", "web", "100m", "64Mi", labels={"applicationId": "ssd"}, nodeSelector={"disk": "ssd"})
            for i in range(3)]
    pods += [pod(f"port-{i}", "web", "100m", "64Mi", labels={"applicationId": "ports"}, host_port=9000)
             for i in range(3)]  # two nodes without the taint: the third waits
    pods += [pod(f"zone-b-{i}", "batch", "100m", "64Mi", labels={"applicationId": "zb"}, affinity=zone_b)
             for i in range(2)]
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "spread"}}}]
    pods.append(pod("spread", "batch", "100m", "64Mi", labels={"applicationId": "spread", "app": "spread"},
                    topologySpreadConstraints=spread))  # evaluated: alone, it spreads anywhere
    pods.append(pod("gpu", "batch", "1", "64Mi", labels={"applicationId": "gpu"},
                    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                    nodeSelector={"topology.kubernetes.io/zone": "a"}))
    for p in pods:
        kube.create(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
    wait_until(lambda: len([p for p in ours(kube) if p["spec"].get("nodeName")]) >= len(pods) - 1, 60,
               "every pod but one of the host-port ones bound", c.logs)
    assert not placement_problems(kube), placement_problems(kube)
    waiting = [p for p in ours(kube) if not p["spec"].get("nodeName")]
    assert [p["metadata"]["name"].startswith("port-") for p in waiting] == [True]
    wait_until(lambda: condition(kube.get(f"/api/v1/namespaces/web/pods/{waiting[0]['metadata']['name']}")), 30,
               "the waiting pod's condition", c.logs)


def test_an_in_place_resize_is_followed_and_one_without_room_refused(shim_cluster):
    """A running pod resized through ``pods/NAME/resize``: up within the node's room, Korral's node
    usage and the shim's books follow; beyond it, Korral refuses (the kubelet finds it infeasible
    too), the usage stays and the pod has a warning event saying why."""
    c, kube = shim_cluster, shim_cluster.kube
    kube.create("/api/v1/nodes", node("node-r", "4", "8Gi"))
    c.start_shim()
    wait_until(lambda: (c.korral_nodes().get("node-r") or {}).get("schedulable"), 60, "node-r open", c.logs)
    kube.create("/api/v1/namespaces", namespace("web"))
    kube.create("/api/v1/namespaces/web/pods", pod("app", "web", "1", "1Gi"))
    path = "/api/v1/namespaces/web/pods/app"

    def vcore() -> int:
        return ((c.korral_nodes().get("node-r") or {}).get("allocated") or {}).get("vcore", 0)
    wait_until(lambda: kube.get(path)["status"].get("phase") == "Running" and vcore() == 1000, 60,
               "app running, Korral counting 1 cpu", c.logs)

    def resize(cpu: str) -> dict:
        return kube.request("PATCH", path + "/resize", {"spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}},
            "application/strategic-merge-patch+json")
    resize("2500m")
    wait_until(lambda: vcore() == 2500, 60, "Korral counting the resized 2.5 cpu", c.logs)
    wait_until(lambda: kube.get(path)["status"]["containerStatuses"][0].get("allocatedResources", {}).get("cpu")
               == "2500m", 30, "the kubelet actuating it", c.logs)
    wait_until(lambda: not c.disagreements(), 30, "the shim's books and Korral's agreeing", c.logs)

    resize("6")  # more than the node has: Korral refuses it, so does the kubelet
    wait_until(lambda: "AllocationResizeRefused" in pod_events(kube).get("web/app", []), 60,
               "the refusal told on the pod", c.logs)
    wait_until(lambda: any(x["type"] == "PodResizePending" and x.get("reason") == "Infeasible"
                           for x in kube.get(path)["status"].get("conditions") or []), 30, "the kubelet's verdict")
    note = next(e for e in kube.events() if e["reason"] == "AllocationResizeRefused")
    assert note["type"] == "Warning" and "no room to grow" in note["note"], note
    assert vcore() == 2500 and kube.get(path)["status"]["phase"] == "Running"
    seen: list = []
    wait_until(lambda: not seen.append(c.disagreements()) and not seen[-1], 30,
               "the shim's books and Korral's still agreeing", lambda: f"{seen[-1:]}\n{c.logs()}")
