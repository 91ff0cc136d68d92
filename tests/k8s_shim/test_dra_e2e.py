"""DRA end to end: ``korral up`` + ``korral k8s-fake`` + ``korral k8s-shim``, real processes.

- a ResourceClaim for one device that only one node's ResourceSlice publishes: the claim is
  allocated as kube-scheduler writes it (finalizer, then allocation and reservedFor) and the pod
  is bound to that node;
- one device, two pods with a claim each: the second waits (its node requirement names no node)
  and gets the device once the first pod has finished, because the shim frees the first claim
  (the double's resourceclaim controller does not act for pods that merely ended);
- a claim made from a ResourceClaimTemplate by the double's resourceclaim controller;
- a CEL selector that fails to evaluate: a Warning event naming the pod, the claim and the field,
  and the pod waits;
- a pod with a WaitForFirstConsumer volume and a claim: one node meets both requirements; the
  claim and the volume claim are written before the binding, which waits for the volume too.
"""

from __future__ import annotations

import pytest

from k8s_shim.demo import namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, pod_events

RES = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.example.com"
NS = "dra"


@pytest.fixture
def shim_cluster(stack_factory, tmp_path):
    cluster = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        kube = cluster.start_fake_with_configs()
        kube.create("/api/v1/namespaces", namespace(NS))
        for name in ("n1", "n2", "n3"):
            kube.create("/api/v1/nodes", node(name, "4", "8Gi"))
        yield cluster
    finally:
        cluster.stop()


def device_class(name: str, expression: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def one_gpu_slice(node_name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-gpu"},
            "spec": {"driver": DRIVER, "nodeName": node_name, "pool": {"name": node_name, "generation": 1,
                                                                      "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "A100"}},
                                  "capacity": {"memory": {"value": "40Gi"}}}]}}


def claim(name: str, device_class_name: str = "gpu") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class_name}}]}}}


def gpu_pod(name: str, run_seconds: float | None = None, *, claim_name: str = "", template: str = "") -> dict:
    p = pod(name, NS, "100m", "64Mi", run_seconds=run_seconds, restartPolicy="Never")
    source = {"resourceClaimName": claim_name} if claim_name else {"resourceClaimTemplateName": template}
    p["spec"]["resourceClaims"] = [{"name": "gpu", **source}]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return p


def setup_one_gpu(kube) -> None:
    kube.create(f"{RES}/deviceclasses", device_class(
        "gpu", f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "A100" && '
               f'device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0'))
    kube.create(f"{RES}/resourceslices", one_gpu_slice("n2"))


def get_pod(kube, name: str) -> dict:
    return kube.get(f"/api/v1/namespaces/{NS}/pods/{name}")


def get_claim(kube, name: str) -> dict:
    return kube.get(f"{RES}/namespaces/{NS}/resourceclaims/{name}")


def start(c: ShimCluster) -> None:
    c.start_shim()
    wait_until(lambda: len([n for n in c.korral_nodes().values() if n["schedulable"]]) == 3, 60,
               "the three nodes registered and opened", c.logs)


@pytest.mark.timeout(150)
def test_a_claim_for_the_device_one_node_publishes_is_allocated_and_the_pod_runs_there(shim_cluster):
    c, kube = shim_cluster, shim_cluster.kube
    setup_one_gpu(kube)
    kube.create(f"{RES}/namespaces/{NS}/resourceclaims", claim("c1"))
    start(c)
    created = kube.create(f"/api/v1/namespaces/{NS}/pods", gpu_pod("p1", claim_name="c1"))
    wait_until(lambda: get_pod(kube, "p1")["spec"].get("nodeName"), 60, "p1 bound", c.logs)
    assert get_pod(kube, "p1")["spec"]["nodeName"] == "n2"
    got = get_claim(kube, "c1")
    assert got["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert got["status"]["allocation"] == {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                 "values": ["n2"]}]}]}}
    assert got["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": created["metadata"]["uid"]}]


@pytest.mark.timeout(180)
def test_a_device_is_freed_when_its_pod_ends_and_the_next_pod_gets_it(shim_cluster):
    c, kube = shim_cluster, shim_cluster.kube
    setup_one_gpu(kube)
    for name in ("c1", "c2"):
        kube.create(f"{RES}/namespaces/{NS}/resourceclaims", claim(name))
    start(c)
    kube.create(f"/api/v1/namespaces/{NS}/pods", gpu_pod("first", 3, claim_name="c1"))
    wait_until(lambda: get_pod(kube, "first")["spec"].get("nodeName"), 60, "the first pod bound", c.logs)
    kube.create(f"/api/v1/namespaces/{NS}/pods", gpu_pod("second", claim_name="c2"))

    def waits_for_the_device():
        cond = next((x for x in get_pod(kube, "second")["status"].get("conditions") or []
                     if x["type"] == "PodScheduled"), None)
        return cond is not None and "cannot allocate all claims" in cond.get("message", "")
    wait_until(waits_for_the_device, 60, "the second pod unschedulable: cannot allocate all claims", c.logs)
    assert get_pod(kube, "first")["status"].get("phase") != "Succeeded" or not get_pod(kube, "second")["spec"].get(
        "nodeName")
    wait_until(lambda: get_pod(kube, "first")["status"].get("phase") == "Succeeded", 60, "the first pod done", c.logs)
    wait_until(lambda: get_pod(kube, "second")["spec"].get("nodeName") == "n2", 60,
               "the second pod bound to n2 once the device is free", c.logs)
    first = get_claim(kube, "c1")
    assert first["status"] == {} and "finalizers" not in first["metadata"]  # freed: no allocation, no finalizer
    second = get_claim(kube, "c2")
    assert second["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    assert [r["name"] for r in second["status"]["reservedFor"]] == ["second"]


@pytest.mark.timeout(150)
def test_a_claim_from_a_template_is_allocated_and_its_pod_bound(shim_cluster):
    c, kube = shim_cluster, shim_cluster.kube
    setup_one_gpu(kube)
    kube.create(f"{RES}/namespaces/{NS}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu-tmpl"},
        "spec": {"metadata": {"labels": {"from": "template"}},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}})
    start(c)
    created = kube.create(f"/api/v1/namespaces/{NS}/pods", gpu_pod("p1", template="gpu-tmpl"))
    wait_until(lambda: get_pod(kube, "p1")["spec"].get("nodeName"), 60, "p1 bound", c.logs)
    assert get_pod(kube, "p1")["spec"]["nodeName"] == "n2"
    statuses = get_pod(kube, "p1")["status"]["resourceClaimStatuses"]
    assert [s["name"] for s in statuses] == ["gpu"] and statuses[0]["resourceClaimName"].startswith("p1-gpu-")
    got = get_claim(kube, statuses[0]["resourceClaimName"])
    assert got["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert got["status"]["allocation"]["devices"]["results"][0]["pool"] == "n2"
    assert got["status"]["reservedFor"][0]["uid"] == created["metadata"]["uid"]


@pytest.mark.timeout(150)
def test_a_cel_selector_that_fails_gives_a_warning_naming_pod_claim_and_field_and_the_pod_waits(shim_cluster):
    c, kube = shim_cluster, shim_cluster.kube
    kube.create(f"{RES}/resourceslices", one_gpu_slice("n2"))
    # compiles (the API server accepts it) but fails on every device: no attribute "nope"
    kube.create(f"{RES}/deviceclasses", device_class("broken", f'device.attributes["{DRIVER}"].nope == "x"'))
    kube.create(f"{RES}/namespaces/{NS}/resourceclaims", claim("c1", "broken"))
    start(c)
    kube.create(f"/api/v1/namespaces/{NS}/pods", gpu_pod("p1", claim_name="c1"))

    def warned():
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NS}/events")["items"]
        return [e["note"] for e in events if e["type"] == "Warning" and e["regarding"]["name"] == "p1"
                and "cel.expression" in e.get("note", "")]
    notes = wait_until(warned, 60, "a Warning event about the CEL selector", c.logs)
    assert "dra/p1" in notes[0] and "resourceclaim dra/c1" in notes[0]
    assert "deviceclass broken spec.selectors[0].cel.expression" in notes[0] and "no such key: nope" in notes[0]
    assert not get_pod(kube, "p1")["spec"].get("nodeName")
    assert "FailedScheduling" in pod_events(kube).get(f"{NS}/p1", ())


@pytest.mark.timeout(180)
def test_a_pod_with_a_wffc_volume_and_a_claim_gets_both_written_before_its_binding(stack_factory, tmp_path):
    """One gate for both concerns: the devices are on n1 and n2, the volume's class allows n2 and
    n3, so only n2 meets both node requirements (one tag, joined). The claim is allocated and
    reserved and the volume claim gets n2 as its selected node, but with no provisioner running
    the pod is not bound: it waits for its volume too. A PV made for the claim (as a provisioner
    would) binds it, and only then is the pod bound, to n2."""
    cluster = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        kube = cluster.start_fake_with_configs("--volume-provisioners", "")
        kube.create("/api/v1/namespaces", namespace(NS))
        for name in ("n1", "n2", "n3"):
            kube.create("/api/v1/nodes", node(name, "4", "8Gi"))
        setup_one_gpu(kube)  # a device on n2
        kube.create(f"{RES}/resourceslices", one_gpu_slice("n1"))
        kube.create(f"{RES}/namespaces/{NS}/resourceclaims", claim("c1"))
        kube.create("/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "late"},
            "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "kubernetes.io/hostname",
                                                              "values": ["n2", "n3"]}]}]})
        kube.create(f"/api/v1/namespaces/{NS}/persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "late",
                     "resources": {"requests": {"storage": "1Gi"}}}})
        start(cluster)
        p = gpu_pod("both", claim_name="c1")
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        created = kube.create(f"/api/v1/namespaces/{NS}/pods", p)
        uid = created["metadata"]["uid"]

        def pvc() -> dict:
            return kube.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data")

        def both_written():
            reserved = (get_claim(kube, "c1").get("status") or {}).get("reservedFor") or []
            node_of = (pvc()["metadata"].get("annotations") or {}).get("volume.kubernetes.io/selected-node")
            return [r["uid"] for r in reserved] == [uid] and node_of
        assert wait_until(both_written, 60, "the claim reserved and the volume claim given its node",
                          cluster.logs) == "n2"
        got = get_claim(kube, "c1")
        assert got["status"]["allocation"]["devices"]["results"][0]["pool"] == "n2"
        assert got["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        # the claim is written, the volume not bound: the pod waits for it (its binding is not made)
        assert pvc()["status"].get("phase") == "Pending"
        assert not get_pod(kube, "both")["spec"].get("nodeName")
        assert cluster.bind_requests().get(f"{NS}/both", {}).get("requests", 0) == 0
        kube.create("/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "late",
                     "csi": {"driver": "csi.example.com", "volumeHandle": "data"},
                     "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": NS,
                                  "name": "data", "uid": pvc()["metadata"]["uid"]},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}})
        wait_until(lambda: get_pod(kube, "both")["spec"].get("nodeName"), 60, "the pod bound once its volume is",
                   cluster.logs)
        assert get_pod(kube, "both")["spec"]["nodeName"] == "n2"
        assert pvc()["status"]["phase"] == "Bound"
        assert [r["uid"] for r in get_claim(kube, "c1")["status"]["reservedFor"]] == [uid]
    finally:
        cluster.stop()
