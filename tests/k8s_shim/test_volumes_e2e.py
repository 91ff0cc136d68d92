"""Volumes end to end: ``korral up`` + ``korral k8s-fake`` (its persistent-volume binder and
external provisioner) + ``korral k8s-shim``, all real processes.

- a claim of a WaitForFirstConsumer class limited to one zone (allowedTopologies): the node in
  that zone is chosen, the volume made there, the pod bound;
- a static local volume: its node is chosen, the volume pre-bound (claimRef) and the pod bound;
- ReadWriteOncePod: the second pod of the claim waits, in kube-scheduler's words;
- a CSINode limit: a node attaches at most its count of the driver's volumes;
- the volume bind timeout: a provisioner that never provisions; the allocation is released and
  the pod asked for again without that node.
"""

from __future__ import annotations

import pytest

from k8s_shim.demo import namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, condition, pod_events

ZONE = "topology.kubernetes.io/zone"
DRIVER = "csi.example.com"


@pytest.fixture
def make_cluster(stack_factory, tmp_path):
    made = []

    def make(*fake_flags: str, **settings: str) -> ShimCluster:
        cluster = ShimCluster(stack_factory(workers=1), tmp_path)
        made.append(cluster)
        kube = cluster.start_fake_with_configs(*fake_flags, settings=settings)
        kube.create("/api/v1/namespaces", namespace("vol"))
        return cluster
    try:
        yield make
    finally:
        for cluster in made:
            cluster.stop()


def storage_class(name: str, provisioner: str = DRIVER, zones: list[str] | None = None) -> dict:
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
          "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return sc


def claim(name: str, cls: str, mode: str = "ReadWriteOnce", size: str = "1Gi") -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": [mode], "storageClassName": cls, "resources": {"requests": {"storage": size}}}}


def pod_with(name: str, *claims: str) -> dict:
    return pod(name, "vol", "100m", "64Mi", labels={"applicationId": f"app-{name}"},
               volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)])


def get_pod(kube, name: str) -> dict:
    return kube.get(f"/api/v1/namespaces/vol/pods/{name}")


def get_claim(kube, name: str) -> dict:
    return kube.get(f"/api/v1/namespaces/vol/persistentvolumeclaims/{name}")


def opened(c: ShimCluster, count: int) -> None:
    wait_until(lambda: len([n for n in c.korral_nodes().values() if n["schedulable"]]) == count, 60,
               f"the {count} nodes registered and opened", c.logs)


def test_zonal_provisioning_a_static_local_volume_rwop_and_a_csinode_limit(make_cluster):
    c = make_cluster()
    kube = c.kube
    for name, zone in (("node-a", "zone-a"), ("node-b", "zone-b"), ("node-c", "zone-c")):
        kube.create("/api/v1/nodes", node(name, "8", "16Gi", labels={ZONE: zone}))
    # node-b attaches at most two volumes of the driver; the others do not limit it
    kube.create("/apis/storage.k8s.io/v1/csinodes", {"metadata": {"name": "node-b"}, "spec": {"drivers": [
        {"name": DRIVER, "nodeID": "node-b", "topologyKeys": [ZONE], "allocatable": {"count": 2}}]}})
    kube.create("/apis/storage.k8s.io/v1/storageclasses", storage_class("zonal", zones=["zone-b"]))
    kube.create("/apis/storage.k8s.io/v1/storageclasses", storage_class("local", "kubernetes.io/no-provisioner"))
    kube.create("/api/v1/persistentvolumes", {"metadata": {"name": "local-c"}, "spec": {
        "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local",
        "local": {"path": "/mnt/disks/ssd1"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-c"]}]}]}}}})
    for name, cls, mode in (("zonal-1", "zonal", "ReadWriteOnce"), ("local-1", "local", "ReadWriteOnce"),
                            ("shared", "zonal", "ReadWriteOncePod"), ("zonal-2", "zonal", "ReadWriteOnce")):
        kube.create("/api/v1/namespaces/vol/persistentvolumeclaims", claim(name, cls, mode))
    c.start_shim()
    opened(c, 3)

    # the zonal claim: node-b chosen, its volume made there (zone-b), the pod bound
    kube.create("/api/v1/namespaces/vol/pods", pod_with("zonal", "zonal-1"))
    wait_until(lambda: get_pod(kube, "zonal")["spec"].get("nodeName"), 60, "the zonal pod bound", c.logs)
    assert get_pod(kube, "zonal")["spec"]["nodeName"] == "node-b"
    bound = get_claim(kube, "zonal-1")
    assert bound["status"]["phase"] == "Bound"
    assert bound["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "node-b"
    pv = kube.get(f"/api/v1/persistentvolumes/{bound['spec']['volumeName']}")
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]}]

    # the static local volume: node-c, the PV pre-bound to the claim, the pod bound
    kube.create("/api/v1/namespaces/vol/pods", pod_with("local", "local-1"))
    wait_until(lambda: get_pod(kube, "local")["spec"].get("nodeName"), 60, "the local pod bound", c.logs)
    assert get_pod(kube, "local")["spec"]["nodeName"] == "node-c"
    assert get_claim(kube, "local-1")["spec"]["volumeName"] == "local-c"
    assert kube.get("/api/v1/persistentvolumes/local-c")["spec"]["claimRef"]["name"] == "local-1"

    # ReadWriteOncePod: one of the two pods runs, the other waits in kube-scheduler's words
    for name in ("rwop-1", "rwop-2"):
        kube.create("/api/v1/namespaces/vol/pods", pod_with(name, "shared"))

    def one_bound_one_waiting():
        pods = [get_pod(kube, n) for n in ("rwop-1", "rwop-2")]
        placed = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [p for p in pods if not p["spec"].get("nodeName") and condition(p)]
        return len(placed) == 1 and len(waiting) == 1 and waiting[0]
    waiting = wait_until(one_bound_one_waiting, 60, "one RWOP pod bound, the other explained", c.logs)
    assert "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode" \
        in condition(waiting)["message"]

    # node-b holds two of the driver's volumes (zonal-1, shared): a third zone-b claim must wait
    kube.create("/api/v1/namespaces/vol/pods", pod_with("third", "zonal-2"))
    third = wait_until(lambda: (p := get_pod(kube, "third")) and condition(p) and p, 60,
                       "the third zonal pod explained", c.logs)
    assert not third["spec"].get("nodeName")
    assert f"Insufficient attachable-volumes-csi-{DRIVER}" in condition(third)["message"], condition(third)
    assert "selected-node" not in str(get_claim(kube, "zonal-2")["metadata"].get("annotations"))
    binds = c.bind_requests()
    assert all(v["requests"] == 1 and v["bound"] == 1 for v in binds.values()), binds
    # Korral, the shim and the API server agree on what runs where, the volumes counted included
    wait_until(lambda: not c.disagreements(), 30, "no disagreement", lambda: "\n".join(c.disagreements()))
    nodes = c.korral_nodes()
    assert nodes["node-b"]["allocated"].get(f"attachable-volumes-csi-{DRIVER}") == 2, nodes["node-b"]["allocated"]


def test_a_volume_never_provisioned_times_out_and_the_pod_is_asked_for_without_that_node(make_cluster):
    c = make_cluster("--volume-provisioners", "", **{"service.volumeBindTimeout": "3s"})
    kube = c.kube
    for name in ("node-1", "node-2"):
        kube.create("/api/v1/nodes", node(name, "8", "16Gi", labels={ZONE: "zone-a"}))
    kube.create("/apis/storage.k8s.io/v1/storageclasses", storage_class("slow"))
    kube.create("/api/v1/namespaces/vol/persistentvolumeclaims", claim("data", "slow"))
    c.start_shim()
    opened(c, 2)
    kube.create("/api/v1/namespaces/vol/pods", pod_with("p", "data"))
    first = wait_until(lambda: (get_claim(kube, "data")["metadata"].get("annotations") or {})
                       .get("volume.kubernetes.io/selected-node"), 60, "the first node selected", c.logs)
    other = {"node-1": "node-2", "node-2": "node-1"}[first]
    wait_until(lambda: (get_claim(kube, "data")["metadata"].get("annotations") or {})
               .get("volume.kubernetes.io/selected-node") == other, 60,
               "the claim given the other node after the timeout",
               lambda: c.logs() + f"\nclaim: {get_claim(kube, 'data')}\nevents: "
               + "\n".join(f"{e['reason']}: {e['note']}" for e in kube.events("vol")))
    events = [e for e in kube.events("vol") if e["reason"] == "FailedScheduling" and e["type"] == "Warning"]
    assert any("service.volumeBindTimeout" in e["note"] and f"without node {first}" in e["note"] for e in events), \
        [e["note"] for e in events]
    assert not get_pod(kube, "p")["spec"].get("nodeName")
    assert "Scheduled" in pod_events(kube).get("vol/p", [])
