"""Volumes in the shim: what a pod's claims require of a node (``translate.volumes``), and the
writes and the wait before its binding (``writes.prebind``, ``writes.volume_binding``): a claim
deleted or a pod deleted while waiting, two pods sharing a claim, the bind timeout, ReadWriteOncePod,
CSINode limits."""

from __future__ import annotations

import json

from common.constants import TAG_NODE_REQUIREMENTS
from k8s_shim.translate.volumes import (AFFINITY_CONFLICT, NO_PROVISIONER, NO_PV, NO_VOLUME, NO_ZONE, RWOP_CONFLICT,
                                        Claim, Volumes, matches_terms, read_claim, read_csinode, read_storage_class,
                                        read_volume)
from tests.conftest import wait_until_async
from tests.k8s_shim.test_shim import World, raw_node, raw_pod, registered_node, run, sent, turn

GI = 1 << 30
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def host_terms(*nodes: str) -> list[dict]:
    return [{"matchExpressions": [{"key": HOST, "operator": "In", "values": list(nodes)}]}]


def pv(name: str, cls: str = "local", size: str = "5Gi", node: str | None = "n1", claim: str = "", phase="Available",
       modes=("ReadWriteOnce",), labels=None) -> dict:
    spec = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls}
    if node:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": host_terms(node)}}
    if claim:
        spec["claimRef"] = {"namespace": "ns", "name": claim, "uid": f"uid-{claim}"}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": {"phase": phase}}


def pvc(name: str, cls: str = "local", size: str = "1Gi", volume: str = "", modes=("ReadWriteOnce",),
        selected: str = "") -> dict:
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if selected:
        meta["annotations"] = {"volume.kubernetes.io/selected-node": selected}
    spec = {"accessModes": list(modes), "storageClassName": cls, "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": meta, "spec": spec, "status": {"phase": "Bound" if volume else "Pending"}}


def sc(name: str, provisioner: str = NO_PROVISIONER, zones=None) -> dict:
    raw = {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}
    if zones:
        raw["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return raw


def books(*objects: dict) -> Volumes:
    v = Volumes()
    for raw in objects:
        if "provisioner" in raw:
            v.storage_class_changed(None, read_storage_class(raw))
        elif "claimRef" in raw["spec"] or "capacity" in raw["spec"]:
            v.volume_changed(None, read_volume(raw))
        else:
            v.claim_changed(None, read_claim(raw))
    return v


# ---------------------------------------------------------------------------- translate
def test_a_bound_claims_volume_requires_its_node_affinity_and_its_zone():
    v = books(sc("local"), pv("pv-1", claim="data", phase="Bound", labels={ZONE: "zone-a__zone-b"}),
              pvc("data", volume="pv-1"))
    affinity, zone = v.requirements("ns", ("data",))
    assert affinity == {"reason": AFFINITY_CONFLICT, "nodeSelector": {"nodeSelectorTerms": host_terms("n1")},
                        "retry": False}
    assert zone["reason"] == NO_ZONE and zone["nodeSelector"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a", "zone-b"]}]}]


def test_a_claim_bound_to_a_volume_that_does_not_exist_allows_no_node_until_it_does():
    v = books(sc("local"), pvc("data", volume="pv-1"))
    [need] = v.requirements("ns", ("data",))
    assert need["reason"] == NO_PV and need["retry"]
    v.volume_changed(None, read_volume(pv("pv-1", node=None, claim="data", phase="Bound")))
    assert v.requirements("ns", ("data",)) == []


def test_an_unbound_claim_may_use_the_nodes_of_the_volumes_that_fit_it():
    v = books(sc("local"), pvc("data", size="2Gi"),
              pv("small", size="1Gi", node="n1"),  # too small
              pv("other-class", cls="fast", node="n2"),
              pv("taken", node="n3", claim="someone-else"),
              pv("rwx-only", node="n4", modes=("ReadWriteMany",)),
              pv("fits", size="3Gi", node="n5"), pv("fits-too", size="2Gi", node="n6"))
    [need] = v.requirements("ns", ("data",))
    assert need["reason"] == NO_VOLUME and need["retry"]
    assert need["nodeSelector"]["nodeSelectorTerms"] == host_terms("n5", "n6")  # one term naming both
    assert v.plan("ns", ("data",), "n4", {HOST: "n4"}) is None
    [step] = v.plan("ns", ("data",), "n6", {HOST: "n6"})
    assert (step.claim, step.volume) == ("ns/data", "fits-too")


def test_the_volumes_a_claim_may_bind_follow_the_volumes_changes():
    v = books(sc("local"), pvc("a"), pvc("b"), pv("pv-1", node="n1"), pv("pv-2", node="n2"))
    [need] = v.requirements("ns", ("a",))
    assert need["nodeSelector"]["nodeSelectorTerms"] == host_terms("n1", "n2")
    old = read_volume(pv("pv-1", node="n1"))
    v.volume_changed(old, read_volume(pv("pv-1", node="n1", claim="b", phase="Bound")))  # taken by b
    [need] = v.requirements("ns", ("a",))
    assert need["nodeSelector"]["nodeSelectorTerms"] == host_terms("n2")
    assert v.plan("ns", ("b",), "n1", {HOST: "n1"}) == [] and v.assumed == {}  # b has pv-1 already
    [step] = v.plan("ns", ("a",), "n2", {HOST: "n2"})  # a takes pv-2: no volume left for another claim
    [need] = v.requirements("ns", ("a",))
    assert need["nodeSelector"]["nodeSelectorTerms"] == host_terms("n2")
    v.claim_changed(None, read_claim(pvc("c")))
    [need] = v.requirements("ns", ("c",))
    assert not matches_terms(need["nodeSelector"]["nodeSelectorTerms"], {HOST: "n2"}, "n2")


def test_a_plan_that_cannot_be_kept_for_every_claim_assumes_nothing():
    v = books(sc("local"), pvc("a"), pvc("b"), pv("for-a", node="n1"))
    assert v.plan("ns", ("a", "b"), "n1", {HOST: "n1"}) is None  # b has no volume on n1
    assert v.assumed == {} and v.selecting == {}
    [step] = v.plan("ns", ("a",), "n1", {HOST: "n1"})
    assert step.volume == "for-a" and v.assumed == {"for-a": "ns/a"}
    [need] = v.requirements("ns", ("a",))  # another pod of claim a: only the PV being pre-bound
    assert need["nodeSelector"]["nodeSelectorTerms"] == host_terms("n1")


def test_a_provisioning_class_allows_its_topologies_and_no_volume_nowhere():
    v = books(sc("zonal", "csi.example.com", zones=["zone-b"]), pvc("data", cls="zonal"))
    [need] = v.requirements("ns", ("data",))
    assert need["nodeSelector"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]}]
    assert v.plan("ns", ("data",), "n1", {ZONE: "zone-a"}) is None
    [step] = v.plan("ns", ("data",), "n2", {ZONE: "zone-b"})
    assert step.volume == "" and v.selecting == {"ns/data": "n2"}
    anywhere = books(sc("any", "csi.example.com"), pvc("data", cls="any"))
    assert anywhere.requirements("ns", ("data",)) == []
    nothing = books(sc("local"), pvc("data"))
    [need] = nothing.requirements("ns", ("data",))
    assert not matches_terms(need["nodeSelector"]["nodeSelectorTerms"], {HOST: "n1"}, "n1")


def test_csinode_limits_count_only_limited_drivers():
    v = books(sc("csi", "csi.example.com"), pvc("a", cls="csi"), pvc("b", cls="csi"))
    assert v.attach_counts("ns", ("a", "b", "a")) == {}  # no node limits the driver
    v.csinode_changed(None, read_csinode({"metadata": {"name": "n1"}, "spec": {"drivers": [
        {"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": 3}}, {"name": "other", "nodeID": "n1"}]}}))
    assert v.attach_counts("ns", ("a", "b", "a")) == {"attachable-volumes-csi-csi.example.com": 2}
    assert v.node_limits("n1") == {"attachable-volumes-csi-csi.example.com": 3}
    assert v.node_limits("n2") == {"attachable-volumes-csi-csi.example.com": 1 << 31}  # not limited there


# ---------------------------------------------------------------------------- the shim
def wffc_world(**settings) -> World:
    w = World(**settings)
    w.shim.storage_class_changed(None, read_storage_class(sc("csi", "csi.example.com")))
    return w


def claim_of(name: str, **kw) -> tuple[str, Claim]:
    return read_claim(pvc(name, cls="csi", **kw))


def with_claim(name: str, *claims: str) -> dict:
    return raw_pod(name, app=f"app-{name}",
                   volumes=[{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)])


async def asked(w: World, app: str) -> object:
    await w.accept_apps(app)
    await turn()
    return sent(w.api.take(), "allocations")


def releases(w: World) -> list:
    return sent(w.api.take(), "releases")


def test_a_claim_deleted_while_the_pod_waits_for_it_releases_the_allocation():
    async def main():
        w = wffc_world()
        await registered_node(w)
        w.shim.claim_changed(None, claim_of("data"))
        w.pod(with_claim("p", "data"))
        await asked(w, "app-p")
        await w.allocate("uid-p", "n1", app="app-p")
        await wait_until_async(lambda: w.kube.selected == [("data", "n1")], 5, "the selected node")
        w.shim.claim_changed(claim_of("data"), None)
        await turn()
        [release] = releases(w)
        assert release.allocationKey == "uid-p" and "persistentvolumeclaim data was deleted" in release.message
        assert not w.kube.binds and not w.shim.tasks["uid-p"].excluded  # the node is not at fault
    run(main())


def test_a_pod_deleted_while_it_waits_for_its_volumes_is_never_bound():
    async def main():
        w = wffc_world()
        await registered_node(w)
        w.shim.claim_changed(None, claim_of("data"))
        w.pod(with_claim("p", "data"))
        await asked(w, "app-p")
        await w.allocate("uid-p", "n1", app="app-p")
        await wait_until_async(lambda: w.shim.prebinder.gates, 5, "the gate")
        w.pod_gone("uid-p")
        assert not w.shim.prebinder.gates
        w.shim.claim_changed(None, claim_of("data", volume="pvc-1"))
        await turn()
        assert not w.kube.binds
    run(main())


def test_two_pods_sharing_a_claim_go_where_its_volume_is_made():
    async def main():
        w = wffc_world()
        await registered_node(w, "n1")
        await registered_node(w, "n2")
        w.shim.claim_changed(None, claim_of("data"))
        w.pod(with_claim("a", "data"))
        w.pod(with_claim("b", "data"))
        await asked(w, "app-a")
        await asked(w, "app-b")
        await w.allocate("uid-a", "n1", app="app-a")
        await w.allocate("uid-b", "n2", app="app-b")  # placed before the core knew: n2 cannot have it
        await turn()
        [release] = releases(w)
        assert release.allocationKey == "uid-b" and "n2" in w.shim.tasks["uid-b"].excluded
        w.shim.claim_changed(claim_of("data"), claim_of("data", selected="n1"))
        await wait_until_async(lambda: w.shim.tasks["uid-b"].hold.value == "", 5, "b asked for again")
        await turn()
        [ask] = [a for a in sent(w.api.take(), "allocations") if a.allocationKey == "uid-b"]
        volume_need, excluded = json.loads(ask.allocationTags[TAG_NODE_REQUIREMENTS])
        assert volume_need["nodeSelector"]["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
        assert excluded["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n2"]
        w.shim.claim_changed(None, claim_of("data", volume="pvc-1", selected="n1"))
        await wait_until_async(lambda: w.kube.binds == [("a", "n1")], 5, "a bound once the claim is")
    run(main())


def test_volumes_not_bound_in_time_release_the_allocation_and_exclude_the_node():
    async def main():
        w = wffc_world(volume_bind_timeout=0.2)
        await registered_node(w)
        w.shim.claim_changed(None, claim_of("data"))
        w.pod(with_claim("p", "data"))
        await asked(w, "app-p")
        await w.allocate("uid-p", "n1", app="app-p")
        await wait_until_async(lambda: w.shim.tasks["uid-p"].excluded, 5, "the timeout")
        await turn()
        [release] = releases(w)
        assert "service.volumeBindTimeout" in release.message
        [(_, _, note)] = w.notes("FailedScheduling")
        assert "without node n1 for 60s" in note
        await wait_until_async(lambda: w.shim.tasks["uid-p"].where.value == "asked", 5, "asked again")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        [excluded] = json.loads(ask.allocationTags[TAG_NODE_REQUIREMENTS])
        assert excluded["retry"] and excluded["nodeSelector"]["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]
        assert not w.kube.binds
    run(main())


def test_a_read_write_once_pod_claim_in_use_keeps_the_other_pod_waiting():
    async def main():
        w = wffc_world()
        await registered_node(w)
        w.shim.volume_changed(None, read_volume(pv("pv-1", cls="csi", node=None, claim="data", phase="Bound",
                                                   modes=("ReadWriteOncePod",))))
        w.shim.claim_changed(None, claim_of("data", volume="pv-1", modes=("ReadWriteOncePod",)))
        w.pod(with_claim("a", "data"))
        [ask_a] = await asked(w, "app-a")
        assert TAG_NODE_REQUIREMENTS not in ask_a.allocationTags
        await w.allocate("uid-a", "n1", app="app-a")
        w.pod(with_claim("b", "data"))
        [ask_b] = await asked(w, "app-b")
        [need] = json.loads(ask_b.allocationTags[TAG_NODE_REQUIREMENTS])
        assert need["reason"] == RWOP_CONFLICT and need["retry"]
        w.pod_gone("uid-a")
        await turn()
        [ask_b] = [a for a in sent(w.api.take(), "allocations") if a.allocationKey == "uid-b"]
        assert TAG_NODE_REQUIREMENTS not in ask_b.allocationTags
    run(main())


def test_a_read_write_once_pod_claim_of_a_running_pod_seen_later_keeps_the_waiting_pod_waiting():
    async def main():
        w = wffc_world()
        await registered_node(w)
        w.shim.volume_changed(None, read_volume(pv("pv-1", cls="csi", node=None, claim="data", phase="Bound",
                                                   modes=("ReadWriteOncePod",))))
        w.shim.claim_changed(None, claim_of("data", volume="pv-1", modes=("ReadWriteOncePod",)))
        w.pod(with_claim("b", "data"))
        [ask_b] = await asked(w, "app-b")
        assert TAG_NODE_REQUIREMENTS not in ask_b.allocationTags
        running = with_claim("a", "data")
        running["spec"]["nodeName"], running["status"]["phase"] = "n1", "Running"
        w.pod(running)  # the informer shows the running pod after the waiting one (a restart)
        await turn()
        [ask_b] = [a for a in sent(w.api.take(), "allocations") if a.allocationKey == "uid-b"]
        assert json.loads(ask_b.allocationTags[TAG_NODE_REQUIREMENTS])[0]["reason"] == RWOP_CONFLICT
    run(main())


def test_a_csinode_limit_is_a_node_resource_and_the_pods_csi_volumes_its_ask():
    async def main():
        w = wffc_world()
        await registered_node(w)
        w.shim.csinode_changed(None, read_csinode({"metadata": {"name": "n1"}, "spec": {"drivers": [
            {"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": 2}}]}}))
        await turn()
        [update] = sent(w.api.take(), "nodes")
        assert update.schedulableResource.resources["attachable-volumes-csi-csi.example.com"].value == 2
        w.shim.claim_changed(None, claim_of("data"))
        w.pod(with_claim("p", "data"))
        [ask] = await asked(w, "app-p")
        assert ask.resourcePerAlloc.resources["attachable-volumes-csi-csi.example.com"].value == 1
        w.node(raw_node("n1", cpu="8"))  # a node update keeps its limits
        await turn()
        [update] = sent(w.api.take(), "nodes")
        assert update.schedulableResource.resources["attachable-volumes-csi-csi.example.com"].value == 2
    run(main())


def test_a_static_volume_is_pre_bound_to_the_claim_on_the_chosen_node_then_the_pod_bound():
    async def main():
        w = World()
        await registered_node(w, "n1")
        await registered_node(w, "n2")
        w.shim.storage_class_changed(None, read_storage_class(sc("local")))
        for raw in (pv("on-n1", node="n1"), pv("on-n2", node="n2")):
            w.shim.volume_changed(None, read_volume(raw))
        w.shim.claim_changed(None, read_claim(pvc("data")))
        w.pod(with_claim("p", "data"))
        [ask] = await asked(w, "app-p")
        [need] = json.loads(ask.allocationTags[TAG_NODE_REQUIREMENTS])
        assert need["nodeSelector"]["nodeSelectorTerms"] == host_terms("n1", "n2")
        await w.allocate("uid-p", "n2", app="app-p")
        await wait_until_async(lambda: w.kube.prebound == [("on-n2", "data")], 5, "the pre-bind")
        assert not w.kube.binds and not w.kube.selected
        w.shim.claim_changed(None, read_claim(pvc("data", volume="on-n2")))
        await wait_until_async(lambda: w.kube.binds == [("p", "n2")], 5, "the bind")
    run(main())


def test_gates_of_several_concerns_combine_into_one():
    from k8s_shim.writes.binding import BindJob
    from k8s_shim.writes.prebind import FAIL, READY, WAIT, Gate, combine

    done, states = [], {"volumes": (WAIT, "a claim"), "devices": (READY, "")}

    def gate(name, timeout):
        async def write():
            done.append(name)
        return Gate(BindJob("u", "ns", "p", "n1", 1), [write], lambda: states[name], timeout,
                    undo=lambda: done.append(f"undo {name}"))
    both = combine([gate("volumes", 5), gate("devices", 9)])
    assert both.timeout == 9 and len(both.writes) == 2
    assert both.check() == (WAIT, "a claim")
    states["volumes"] = (READY, "")
    assert both.check() == (READY, "")
    states["devices"] = (FAIL, "claim deleted")
    assert both.check() == (FAIL, "claim deleted")
    both.undo()
    assert done == ["undo volumes", "undo devices"]
    assert combine([]) is None
