"""DRA in the shim: CEL selectors (``k8s_shim.translate.cel``), where a pod's claims can be had
and which devices they get (``k8s_shim.translate.devices``), and the claim writes before the bind
and after the pod (``k8s_shim.writes.claims``) against the API double, 409s included."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.kube.kubeclient import ApiError, KubeClient
from k8s_shim.kube.kubeconfig import KubeConfig
from k8s_shim.translate.cel import CelError, device_context, matches
from k8s_shim.translate.devices import (CANNOT_ALLOCATE, NOT_AVAILABLE, Devices, PodClaim, allocation_status,
                                        read_claim, read_class, read_pod_claims, read_slice)
from k8s_shim.writes.claims import ClaimTaken, reserve, unreserve

DRIVER = "gpu.example.com"
GPU = {"name": "gpu-0", "attributes": {"model": {"string": "A100"}, "index": {"int": 0}, "mig": {"bool": False},
                                       "other.example.com/rack": {"string": "r1"}},
       "capacity": {"memory": {"value": "40Gi"}}}


# ---------------------------------------------------------------------- CEL
@pytest.mark.parametrize("expression, expected", [
    (f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "A100"', True),
    (f'device.attributes["{DRIVER}"].index == 1', False),
    (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1Gi")) >= 0', True),
    (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("64Gi"))', False),
    ('device.attributes["other.example.com"].rack == "r1"', True),
    (f'"mig" in device.attributes["{DRIVER}"] && !device.attributes["{DRIVER}"].mig', True),
    ("device.allowMultipleAllocations", False),
])
def test_cel_sees_a_device_as_kube_scheduler_shows_it(expression, expected):
    assert matches(expression, device_context(DRIVER, GPU)) is expected


@pytest.mark.parametrize("expression, says", [
    ("device.driver == ", "compilation failed: ERROR: <input>:1:18: Syntax error"),
    (f'device.attributes["{DRIVER}"].nope == 1', "runtime error: no such key: nope"),
    ("device.driver", "must evaluate to bool"),
])
def test_a_bad_cel_expression_says_why(expression, says):
    with pytest.raises(CelError, match=says.replace("(", r"\(").replace("[", r"\[")):
        matches(expression, device_context(DRIVER, GPU))


# ---------------------------------------------------------------------- planning
def slice_(name: str, devices: list[dict], *, node: str = "", pool: str = "", generation: int = 1,
           all_nodes: bool = False, selector: dict | None = None) -> dict:
    spec: dict = {"driver": DRIVER, "pool": {"name": pool or node or name, "generation": generation,
                                             "resourceSliceCount": 1}, "devices": devices}
    if node:
        spec["nodeName"] = node
    if all_nodes:
        spec["allNodes"] = True
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


def gpus(n: int, model: str = "A100") -> list[dict]:
    return [{"name": f"gpu-{i}", "attributes": {"model": {"string": model}}} for i in range(n)]


def claim_(name: str, count: int = 1, *, mode: str = "ExactCount", cls: str = "gpu", selectors=(), status=None,
           owner: str = "", pod_claim: str = "") -> dict:
    exactly = {"deviceClassName": cls, "allocationMode": mode, **({"count": count} if mode == "ExactCount" else {})}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}]
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": pod_claim}
    return {"metadata": meta, "spec": {"devices": {"requests": [{"name": "req", "exactly": exactly}]}},
            "status": status or {}}


def book(*slices: dict, claims=(), classes=None) -> Devices:
    devices = Devices()
    for cls, expr in (classes or {"gpu": f'device.driver == "{DRIVER}"'}).items():
        devices.class_changed(None, read_class({"metadata": {"name": cls},
                                                "spec": {"selectors": [{"cel": {"expression": expr}}]}}))
    for s in slices:
        devices.slice_changed(None, read_slice(s))
    for c in claims:
        devices.claim_changed(None, read_claim(c))
    return devices


NODES = {"n1": {"zone": "a"}, "n2": {"zone": "b"}, "n3": {"zone": "b"}}


def fits(plan) -> list[str]:
    [req] = [r for r in plan.requirements if r["reason"] == CANNOT_ALLOCATE]
    terms = req["nodeSelector"]["nodeSelectorTerms"]
    return terms[0]["matchFields"][0]["values"] if terms else []


def test_a_claim_fits_only_where_its_devices_are_and_free():
    devices = book(slice_("s2", gpus(1), node="n2"), claims=[claim_("c1")])
    plan = devices.plan("pod-1", "ns", (PodClaim("gpu", "c1"),), NODES)
    assert not plan.waits and fits(plan) == ["n2"] and plan.requirements[0]["retry"] is True
    # the device taken by another claim's allocation: no node fits (an empty selector: no node)
    taken = claim_("c0", status={"allocation": {"devices": {"results": [
        {"request": "req", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]}}})
    devices.claim_changed(None, read_claim(taken))
    plan = devices.plan("pod-1", "ns", (PodClaim("gpu", "c1"),), NODES)
    assert fits(plan) == [] and plan.requirements[0]["nodeSelector"] == {"nodeSelectorTerms": []}
    # devices being written for a placement count as taken too
    devices.claim_changed(read_claim(taken), None)
    devices.pending["ns/cx"] = ((DRIVER, "n2", "gpu-0"),)
    assert fits(devices.plan("pod-1", "ns", (PodClaim("gpu", "c1"),), NODES)) == []


def test_counts_all_mode_selectors_and_several_claims_of_one_pod():
    devices = book(slice_("s1", gpus(2), node="n1"), slice_("s2", gpus(1, "H100"), node="n2"),
                   claims=[claim_("two", 2), claim_("all", mode="All"),
                           claim_("h100", selectors=[f'device.attributes["{DRIVER}"].model == "H100"']),
                           claim_("one")])
    assert fits(devices.plan("p", "ns", (PodClaim("a", "two"),), NODES)) == ["n1"]
    assert fits(devices.plan("p", "ns", (PodClaim("a", "all"),), NODES)) == ["n1", "n2"]
    assert fits(devices.plan("p", "ns", (PodClaim("a", "h100"),), NODES)) == ["n2"]
    # two claims of one pod cannot share a device: n2's one H100 cannot serve both, n1 has no H100
    assert fits(devices.plan("p", "ns", (PodClaim("a", "one"), PodClaim("b", "h100")), NODES)) == []
    assert fits(devices.plan("p", "ns", (PodClaim("a", "two"), PodClaim("b", "one")), NODES)) == []
    choice = devices.allocate("p", "ns", (PodClaim("a", "two"),), "n1", {})
    [(claim, picks)] = choice
    assert claim.name == "two" and [d.name for _, d in picks] == ["gpu-0", "gpu-1"]
    assert allocation_status(picks, "n1") == {
        "devices": {"results": [{"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-0"},
                                {"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-1"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                 "values": ["n1"]}]}]}}


def test_a_request_that_took_a_device_another_needs_gives_it_up():
    # the any-GPU claim comes first and would take the H100 (listed first); the H100 claim needs it
    devices = book(slice_("s", gpus(1, "H100") + [{"name": "gpu-a", "attributes": {"model": {"string": "A100"}}}],
                          node="n1"),
                   claims=[claim_("any"), claim_("h100", selectors=[f'device.attributes["{DRIVER}"].model == "H100"'])])
    pod_claims = (PodClaim("a", "any"), PodClaim("b", "h100"))
    assert fits(devices.plan("p", "ns", pod_claims, NODES)) == ["n1"]
    choice = devices.allocate("p", "ns", pod_claims, "n1", {})
    assert {c.name: [d.name for _, d in picks] for c, picks in choice} == {"any": ["gpu-a"], "h100": ["gpu-0"]}


def test_the_allocation_carries_the_class_config_then_the_claims_and_constraints_wait():
    devices = book(slice_("s", gpus(1), node="n1"))
    opaque = {"opaque": {"driver": DRIVER, "parameters": {"sharing": "timeSlicing"}}}
    devices.class_changed(None, read_class({"metadata": {"name": "gpu"}, "spec": {
        "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}], "config": [opaque]}}))
    raw = claim_("c")
    raw["spec"]["devices"]["config"] = [{"requests": ["req"], "opaque": {"driver": DRIVER, "parameters": {"x": 1}}}]
    devices.claim_changed(None, read_claim(raw))
    [(claim, picks)] = devices.allocate("p", "ns", (PodClaim("a", "c"),), "n1", {})
    assert allocation_status(picks, "n1", claim, devices.classes)["devices"]["config"] == [
        {"source": "FromClass", "requests": ["req"], **opaque},
        {"source": "FromClaim", "requests": ["req"], "opaque": {"driver": DRIVER, "parameters": {"x": 1}}}]
    raw["spec"]["devices"]["constraints"] = [{"requests": ["req"], "matchAttribute": f"{DRIVER}/model"}]
    devices.claim_changed(read_claim(claim_("c")), read_claim(raw))
    assert devices.plan("p", "ns", (PodClaim("a", "c"),), NODES).waits == [
        'resourceclaim "c": Korral does not allocate constraints (matchAttribute)']


def test_shared_pools_for_all_nodes_or_a_node_selector_and_only_a_pools_newest_generation():
    zone_b = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}
    devices = book(slice_("net", gpus(1), pool="net", all_nodes=True), claims=[claim_("c")])
    assert fits(devices.plan("p", "ns", (PodClaim("a", "c"),), NODES)) == ["n1", "n2", "n3"]
    choice = devices.allocate("p", "ns", (PodClaim("a", "c"),), "n3", {"zone": "b"})
    assert "nodeSelector" not in allocation_status(choice[0][1], "n3")  # usable from every node
    devices = book(slice_("zb", gpus(1), pool="zb", selector=zone_b), claims=[claim_("c")])
    assert fits(devices.plan("p", "ns", (PodClaim("a", "c"),), NODES)) == ["n2", "n3"]
    choice = devices.allocate("p", "ns", (PodClaim("a", "c"),), "n2", {"zone": "b"})
    assert allocation_status(choice[0][1], "n2")["nodeSelector"] == zone_b
    # a driver republishing its pool: generation 1's slice no longer counts once generation 2 is there
    devices = book(slice_("old", gpus(2), node="n1", pool="p1"), slice_("new", gpus(1), node="n1", pool="p1",
                                                                         generation=2), claims=[claim_("c", 2)])
    assert fits(devices.plan("p", "ns", (PodClaim("a", "c"),), NODES)) == []
    # a pool of two slices with one published yet: ExactCount uses what is there, All waits for the rest
    half = slice_("half", gpus(1), node="n1", pool="p2")
    half["spec"]["pool"]["resourceSliceCount"] = 2
    devices = book(half, claims=[claim_("one"), claim_("all", mode="All")])
    assert fits(devices.plan("p", "ns", (PodClaim("a", "one"),), NODES)) == ["n1"]
    assert fits(devices.plan("p", "ns", (PodClaim("a", "all"),), NODES)) == []


def test_an_allocated_claim_restricts_to_its_node_selector_and_waits_are_named():
    on_n1 = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    devices = book(claims=[claim_("c", status={"allocation": {"devices": {"results": [
        {"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}, "nodeSelector": on_n1}})])
    plan = devices.plan("p", "ns", (PodClaim("a", "c"),), NODES)
    assert plan.requirements == [{"reason": NOT_AVAILABLE, "nodeSelector": on_n1, "retry": False}]
    plan = devices.plan("p", "ns", (PodClaim("a", "missing"), PodClaim("b", template="t")), NODES)
    assert plan.waits == ['resourceclaim "missing" not found',
                          'waiting for the resourceclaim of "b" (template "t") to be created']
    devices = book(claims=[claim_("c", cls="nope")])
    assert devices.plan("p", "ns", (PodClaim("a", "c"),), NODES).waits == [
        'resourceclaim "c" request "req": device class "nope" does not exist']


def test_a_claim_from_a_template_is_found_by_its_owner_and_pod_claim_name():
    devices = book(slice_("s", gpus(1), node="n1"), claims=[claim_("p-gpu-abcde", owner="pod-uid", pod_claim="gpu")])
    assert read_pod_claims({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}) == (
        PodClaim("gpu", "", "t"),)
    assert fits(devices.plan("pod-uid", "ns", (PodClaim("gpu", template="t"),), NODES)) == ["n1"]
    assert devices.plan("other-pod", "ns", (PodClaim("gpu", template="t"),), NODES).waits


def test_a_cel_error_is_reported_with_the_claim_and_field():
    devices = book(slice_("s", gpus(1), node="n1"), claims=[claim_("c", selectors=["device.nope == 1"])])
    plan = devices.plan("p", "ns", (PodClaim("a", "c"),), NODES)
    assert not plan.requirements and len(plan.errors) == 1
    assert plan.errors[0].startswith('resourceclaim ns/c request "req": spec.devices.requests[0].exactly.selectors[0]'
                                     '.cel.expression: "device.nope == 1": runtime error')


# ---------------------------------------------------------------------- writes, on the double
def with_double(body):
    async def main():
        cluster = FakeCluster(ClusterOptions(kubelet=False))
        await cluster.start()
        api = cluster.api
        api.create(api.kind("v1", "namespaces"), "", {"metadata": {"name": "ns"}})
        client = KubeClient(KubeConfig(server=cluster.url))
        await client.start()
        try:
            return await body(cluster, client)
        finally:
            await client.close()
            await cluster.stop()
    return asyncio.run(main())


ALLOCATION = {"devices": {"results": [{"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]},
              "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                       "values": ["n1"]}]}]}}


def _claim_body(name: str) -> dict:
    body = claim_(name)
    return {"metadata": {"name": name}, "spec": body["spec"]}


def test_reserve_writes_the_finalizer_then_the_allocation_and_rereads_after_a_409_and_unreserve_frees():
    async def body(cluster, client):
        api = cluster.api
        claims = api.kind("resource.k8s.io/v1", "resourceclaims")
        pods = api.kind("v1", "pods")
        pod = api.create(pods, "ns", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
        api.create(claims, "ns", _claim_body("c1"))
        real_get, reads = client.get_claim, []

        async def racing_get(namespace, name):  # someone writes the claim between our read and our PUT
            got = await real_get(namespace, name)
            reads.append(got)
            if len(reads) == 1:
                current = api.get(claims, namespace, name)
                current["metadata"]["labels"] = {"touched": "yes"}
                api.update(claims, namespace, name, current)
            return got
        client.get_claim = racing_get
        await reserve(client, "ns", "c1", ALLOCATION, "p", pod["metadata"]["uid"])
        client.get_claim = real_get
        stored = api.get(claims, "ns", "c1")
        assert len(reads) == 2  # the 409 made it read again
        assert stored["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert stored["metadata"]["labels"] == {"touched": "yes"}
        assert stored["status"] == {"allocation": ALLOCATION, "reservedFor": [
            {"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]}
        # the claim allocated otherwise meanwhile: taken
        other = copy.deepcopy(ALLOCATION)
        other["devices"]["results"][0]["device"] = "gpu-1"
        with pytest.raises(ClaimTaken):
            await reserve(client, "ns", "c1", other, "p2", "uid-2")
        await unreserve(client, "ns", "c1", {pod["metadata"]["uid"]})
        freed = api.get(claims, "ns", "c1")
        assert freed["status"] == {} and "finalizers" not in freed["metadata"]
    with_double(body)


# ---------------------------------------------------------------------- the shim's DRA path
from common.constants import TAG_NODE_REQUIREMENTS  # noqa: E402
from tests.conftest import wait_until_async  # noqa: E402
from tests.k8s_shim.test_shim import FakeKube, World, raw_pod, registered_node, sent, turn  # noqa: E402


class ClaimKube(FakeKube):
    """``FakeKube`` with resource claims: read and written as the shim's claim writes do."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: dict[str, dict] = {}
        self.writes: list[tuple[str, str]] = []

    async def get_claim(self, namespace, name):
        return copy.deepcopy(self.claims[name])

    async def update_claim(self, namespace, name, claim):
        self.writes.append(("claim", name))
        self.claims[name] = copy.deepcopy(claim)
        return claim

    async def update_claim_status(self, namespace, name, claim):
        self.writes.append(("status", name))
        self.claims[name] = copy.deepcopy(claim)
        return claim


def requirements(ask) -> list[dict]:
    return json.loads(ask.allocationTags[TAG_NODE_REQUIREMENTS])


def dra_world(**settings) -> World:
    w = World(kube=ClaimKube(), **settings)
    w.shim.device_class_changed(None, read_class({"metadata": {"name": "gpu"}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}))
    w.shim.resource_slice_changed(None, read_slice(slice_("s1", gpus(1), node="n1")))
    c1 = claim_("c1")
    w.kube.claims["c1"] = copy.deepcopy(c1)
    w.shim.resource_claim_changed(None, read_claim(c1))
    return w


def test_the_ask_names_where_the_claim_fits_and_the_claim_is_written_before_the_bind():
    async def main():
        w = dra_world()
        await registered_node(w, "n1")
        await registered_node(w, "n2")
        w.pod(raw_pod("p1", resourceClaims=[{"name": "gpu", "resourceClaimName": "c1"}]))
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert requirements(ask) == [{"reason": CANNOT_ALLOCATE, "nodeSelector": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}, "retry": True}]
        await w.allocate("uid-p1", "n1")
        await wait_until_async(lambda: w.kube.binds == [("p1", "n1")], 5, "the bind")
        assert w.kube.writes == [("claim", "c1"), ("status", "c1")]  # before the bind: finalizer, then status
        status = w.kube.claims["c1"]["status"]
        assert status["allocation"]["devices"]["results"] == [
            {"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
        assert status["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
        w.shim.resource_claim_changed(read_claim(claim_("c1")), read_claim(w.kube.claims["c1"]))
        w.pod_gone("uid-p1")  # the pod ends: its claim is freed
        await wait_until_async(lambda: w.kube.claims["c1"]["status"] == {}, 5, "the claim freed")
        assert "finalizers" not in w.kube.claims["c1"]["metadata"]
    run_async(main())


def test_devices_gone_between_placement_and_bind_release_the_placement_and_ask_again():
    async def main():
        w = dra_world()
        await registered_node(w, "n1")
        w.pod(raw_pod("p1", resourceClaims=[{"name": "gpu", "resourceClaimName": "c1"}]))
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        # another claim got the only device; the core's placement (made before) arrives after
        w.shim.devices.pending["ns/other"] = ((DRIVER, "n1", "gpu-0"),)
        await w.allocate("uid-p1", "n1")
        await wait_until_async(lambda: sent(w.api.sent, "releases"), 5, "the placement released")
        [rel] = sent(w.api.take(), "releases")
        assert rel.allocationKey == "uid-p1" and "no longer free" in rel.message
        assert not w.kube.binds and not w.kube.writes
        warnings = [n for n in w.notes("FailedScheduling") if "cannot be allocated on node n1" in n[2]]
        assert warnings
        await wait_until_async(lambda: sent(w.api.sent, "allocations"), 5, "asked again")
        [ask] = sent(w.api.take(), "allocations")
        assert requirements(ask)[0]["nodeSelector"] == {"nodeSelectorTerms": []}  # no node has a free device now
    run_async(main())


def run_async(coro):
    asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize("answer, serves", [(None, True), (404, False), (403, False)],
                         ids=["served", "not served (before 1.34)", "refused"])
def test_the_shim_reads_dra_only_where_resource_k8s_io_v1_is_served(answer, serves):
    from types import SimpleNamespace

    from k8s_shim.kube.kubeclient import ApiError
    from k8s_shim.main import _Runner

    class Client:
        async def get(self, path):
            assert path == "/apis/resource.k8s.io/v1"
            if answer is not None:
                raise ApiError("GET", path, answer, "NotFound" if answer == 404 else "Forbidden", "no")
            return {"kind": "APIResourceList"}
    assert asyncio.run(_Runner._serves(SimpleNamespace(client=Client()), "/apis/resource.k8s.io/v1", "")) is serves


def test_at_start_up_reservations_of_pods_that_ended_meanwhile_are_freed():
    async def main():
        w = dra_world()
        pods = {"done": {"metadata": {"uid": "uid-done"}, "status": {"phase": "Succeeded"}},
                "running": {"metadata": {"uid": "uid-running"}, "status": {"phase": "Running"}},
                "recreated": {"metadata": {"uid": "a-new-uid"}, "status": {"phase": "Pending"}}}

        async def get_pod(namespace, name):
            if name not in pods:
                raise ApiError("GET", name, 404, "NotFound", "not found")
            return pods[name]
        w.kube.get_pod = get_pod
        allocated = {"allocation": {"devices": {"results": [
            {"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}}
        for name, owner in (("c-done", "done"), ("c-running", "running"), ("c-gone", "gone"),
                            ("c-recreated", "recreated")):
            raw = claim_(name, status={**allocated, "reservedFor": [
                {"resource": "pods", "name": owner, "uid": f"uid-{owner}"}]})
            raw["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
            w.kube.claims[name] = copy.deepcopy(raw)
            w.shim.resource_claim_changed(None, read_claim(raw))
        await w.shim.sweep_reservations()
        assert {n: c["status"] for n, c in w.kube.claims.items() if n != "c1"} == {
            "c-done": {}, "c-gone": {}, "c-recreated": {},
            "c-running": {**allocated, "reservedFor": [{"resource": "pods", "name": "running", "uid": "uid-running"}]}}
    run_async(main())


def test_a_claim_shared_by_two_pods_is_reserved_for_both_and_freed_after_the_last():
    async def main():
        w = dra_world()
        await registered_node(w, "n1")
        await registered_node(w, "n2")
        shared = [{"name": "gpu", "resourceClaimName": "c1"}]
        w.pod(raw_pod("p1", resourceClaims=shared))
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        await w.allocate("uid-p1", "n1")
        await wait_until_async(lambda: w.kube.binds == [("p1", "n1")], 5, "p1 bound")
        w.shim.resource_claim_changed(read_claim(claim_("c1")), read_claim(w.kube.claims["c1"]))
        w.pod(raw_pod("p2", resourceClaims=shared))
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        [req] = requirements(ask)
        assert req["reason"] == NOT_AVAILABLE and req["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
            "values"] == ["n1"]  # the allocation's node
        await w.allocate("uid-p2", "n1")
        await wait_until_async(lambda: ("p2", "n1") in w.kube.binds, 5, "p2 bound")
        assert [r["name"] for r in w.kube.claims["c1"]["status"]["reservedFor"]] == ["p1", "p2"]
        before = read_claim(w.kube.claims["c1"])
        w.shim.resource_claim_changed(None, before)
        w.pod_gone("uid-p1")
        await wait_until_async(lambda: [r["name"] for r in w.kube.claims["c1"]["status"]["reservedFor"]] == ["p2"],
                               5, "p1's reservation gone")
        assert w.kube.claims["c1"]["status"]["allocation"]  # p2 still uses it
        w.pod_gone("uid-p2")
        await wait_until_async(lambda: w.kube.claims["c1"]["status"] == {}, 5, "freed after the last")
    run_async(main())


def test_a_pod_with_volumes_and_claims_waits_for_both_and_a_volume_failure_gives_the_claims_back():
    """One gate for both concerns: the claim is written and the volume claim given its node before
    the bind, which waits for the volume too; the volume not bound in time releases the allocation,
    gives the claim back (no reservation, no allocation) and asks for the pod again."""
    from k8s_shim.translate.volumes import read_claim as read_volume_claim, read_storage_class

    async def main():
        w = dra_world(volume_bind_timeout=0.3)
        w.shim.storage_class_changed(None, read_storage_class({"metadata": {"name": "csi"}, "provisioner": "csi.x",
                                                               "volumeBindingMode": "WaitForFirstConsumer"}))
        w.shim.claim_changed(None, read_volume_claim({"metadata": {"name": "data", "namespace": "ns", "uid": "pvc-u"},
                                                      "spec": {"storageClassName": "csi",
                                                               "accessModes": ["ReadWriteOnce"],
                                                               "resources": {"requests": {"storage": "1Gi"}}},
                                                      "status": {"phase": "Pending"}}))
        await registered_node(w, "n1")
        w.pod(raw_pod("p1", resourceClaims=[{"name": "gpu", "resourceClaimName": "c1"}],
                      volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]))
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        await w.allocate("uid-p1", "n1")
        await wait_until_async(lambda: w.kube.selected == [("data", "n1")] and len(w.kube.writes) == 2, 5,
                               "the volume claim's node and the claim written")
        assert w.kube.claims["c1"]["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": "uid-p1"}]
        assert not w.kube.binds  # the volume is not bound yet
        await wait_until_async(lambda: sent(w.api.sent, "releases"), 5, "the timeout releases the placement")
        [rel] = sent(w.api.take(), "releases")
        assert "service.volumeBindTimeout" in rel.message
        await wait_until_async(lambda: w.kube.claims["c1"]["status"] == {}, 5, "the claim given back")
        assert "finalizers" not in w.kube.claims["c1"]["metadata"] and not w.shim.devices.pending
        assert not w.kube.binds
    run_async(main())


def test_a_wait_names_what_it_waits_for_and_no_flag_that_would_not_lift_it():
    """A pod that waits for a resource claim (not found) is told so; one with required
    anti-affinity is not held back by the shim at all (the core evaluates it)."""
    async def main():
        w = dra_world()
        await registered_node(w, "n1")
        w.pod(raw_pod("p1", resourceClaims=[{"name": "gpu", "resourceClaimName": "missing"}]))
        w.pod(raw_pod("p2", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}]}}))
        await w.accept_apps("app-1")
        await turn()
        notes = {n[0]: n[2] for n in w.notes("FailedScheduling")}
        assert "missing" in notes["p1"] and "--best-effort-constraints" not in notes["p1"], notes
        assert "p2" not in notes, notes
    run_async(main())
