"""The double's volumes against the v1.36 recordings: the persistent-volume binder and the
external provisioner (files 10, 11), the 422s of immutable fields (10, 11, 13), CSINode (13).

Each test sends the recorded requests (their bodies as recorded) to a double started for real and
compares what matters with the recorded answers: status codes, 422 messages, the binder's
annotations, phases and events, the provisioned volume."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from tests.conftest import wait_until_async
from tests.k8s_fake.wire import WIRE

pytestmark = pytest.mark.timeout(60)

V136 = WIRE / "v1.36"
needs_recordings = pytest.mark.skipif(not V136.is_dir(), reason=f"no recordings: {V136} is absent")


def exchanges(name: str) -> list[dict[str, Any]]:
    return json.loads(next(V136.glob(f"{name}-*.json")).read_text())["exchanges"]


@asynccontextmanager
async def running(**options: Any):
    cluster = FakeCluster(ClusterOptions(kubelet=False, **options))
    await cluster.start()
    nodes = cluster.api.kind("v1", "nodes")
    cluster.api.create(nodes, "", {"metadata": {"name": "n1", "labels": {
        "kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "zone-a"}}})
    for ns in ("vol", "pvs"):
        cluster.api.create(cluster.api.kind("v1", "namespaces"), "", {"metadata": {"name": ns}})
    try:
        async with aiohttp.ClientSession(cluster.url) as http:
            yield cluster, http
    finally:
        await cluster.stop()


async def send(http: aiohttp.ClientSession, exchange: dict[str, Any]) -> tuple[int, Any]:
    req = exchange["request"]
    body = req.get("body")
    ctype = "application/json"
    if req["method"] == "PATCH":
        ctype = "application/json-patch+json" if isinstance(body, list) else "application/merge-patch+json"
    async with http.request(req["method"], req["path"], data=json.dumps(body) if body is not None else None,
                            headers={"Content-Type": ctype}) as resp:
        return resp.status, await resp.json()


async def get(http: aiohttp.ClientSession, path: str) -> dict[str, Any]:
    async with http.get(path) as resp:
        assert resp.status == 200, path
        return await resp.json()


@needs_recordings
def test_a_wait_for_first_consumer_claim_is_provisioned_on_its_selected_node_and_bound_as_recorded():
    async def scenario():
        ex = exchanges("10")
        async with running() as (cluster, http):
            status, sc = await send(http, ex[0])
            assert status == 201 and sc["reclaimPolicy"] == "Delete" and sc["allowedTopologies"] == \
                ex[0]["response"]["body"]["allowedTopologies"]
            status, claim = await send(http, ex[7])
            assert status == 201 and claim["status"] == {"phase": "Pending"}
            assert claim["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
            path = "/api/v1/namespaces/vol/persistentvolumeclaims/data-1"
            # the binder leaves it alone until its node is chosen: an event only
            await wait_until_async(lambda: cluster.controllers[-1].idle(), 5, "the binder")
            assert (await get(http, path))["metadata"]["resourceVersion"] == claim["metadata"]["resourceVersion"]
            status, _ = await send(http, ex[9])  # the scheduler's selected node
            assert status == 200
            claims = cluster.api.kind("v1", "persistentvolumeclaims")
            await wait_until_async(lambda: (cluster.api.get(claims, "vol", "data-1").get("status") or {})
                                   .get("phase") == "Bound", 5, "the provisioned volume's bind")
            claim = await get(http, path)
            recorded = ex[12]["response"]["body"]
            assert claim["metadata"]["annotations"].keys() == recorded["metadata"]["annotations"].keys()
            assert claim["spec"]["volumeName"] == f"pvc-{claim['metadata']['uid']}"
            assert claim["status"] == {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                       "capacity": {"storage": "1Gi"}}
            pv = await get(http, f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
            assert pv["status"]["phase"] == "Bound" and pv["spec"]["csi"]["driver"] == "csi.example.com"
            assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
            assert pv["spec"]["nodeAffinity"] == {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}}
            events = (await get(http, "/api/v1/namespaces/vol/events"))["items"]
            recorded_events = ex[15]["response"]["body"]["items"]
            assert [(e["reason"], e["message"], e["source"]) for e in events] == \
                [(e["reason"], e["message"], e["source"]) for e in recorded_events]
            status, body = await send(http, ex[14])  # volumeBindingMode is immutable
            assert status == 422 and body["message"] == ex[14]["response"]["body"]["message"]
            assert body["details"] == ex[14]["response"]["body"]["details"]
    asyncio.run(scenario())


@needs_recordings
def test_a_static_volume_pre_bound_by_the_scheduler_is_bound_by_the_binder_as_recorded():
    async def scenario():
        ex = exchanges("11")
        async with running() as (cluster, http):
            await send(http, {"request": {"method": "POST", "path": "/apis/storage.k8s.io/v1/storageclasses",
                                          "body": {"metadata": {"name": "local-wffc"},
                                                   "provisioner": "kubernetes.io/no-provisioner",
                                                   "volumeBindingMode": "WaitForFirstConsumer"}}})
            create = next(e for e in ex if e["request"]["method"] == "POST"
                          and e["request"]["path"] == "/api/v1/persistentvolumes")
            status, pv = await send(http, create)
            assert status == 201 and pv["status"]["phase"] == "Pending"
            pv_path = "/api/v1/persistentvolumes/local-n1"
            await wait_until_async(lambda: cluster.api.get(cluster.api.kind("v1", "persistentvolumes"), "",
                                                           "local-n1")["status"]["phase"] == "Available",
                                   5, "the binder's Available")
            status, claim = await send(http, ex[5])
            assert status == 201
            prebind = ex[8]
            prebind["request"]["body"]["spec"]["claimRef"]["uid"] = claim["metadata"]["uid"]
            status, pv = await send(http, prebind)
            assert status == 200 and pv["metadata"]["annotations"] == {"pv.kubernetes.io/bound-by-controller": "yes"}
            claims = cluster.api.kind("v1", "persistentvolumeclaims")
            await wait_until_async(lambda: (cluster.api.get(claims, "pvs", "data-2").get("status") or {})
                                   .get("phase") == "Bound", 5, "the bind")
            claim = await get(http, "/api/v1/namespaces/pvs/persistentvolumeclaims/data-2")
            recorded = ex[10]["response"]["body"]
            assert claim["metadata"]["annotations"] == recorded["metadata"]["annotations"]
            assert claim["spec"]["volumeName"] == "local-n1" and claim["status"] == recorded["status"]
            assert (await get(http, pv_path))["status"]["phase"] == "Bound"
            status, body = await send(http, ex[12])  # nodeAffinity is immutable
            assert status == 422 and body == ex[12]["response"]["body"] | {"details": body["details"]}
            assert body["details"] == ex[12]["response"]["body"]["details"]
            status, _ = await send(http, ex[11])  # claimRef is not protected: re-pointed, the PV is Released
            assert status == 200
            await wait_until_async(lambda: cluster.api.get(cluster.api.kind("v1", "persistentvolumes"), "",
                                                           "local-n1")["status"]["phase"] == "Released",
                                   5, "Released")
    asyncio.run(scenario())


@needs_recordings
def test_a_csinode_is_stored_as_sent_with_the_recorded_422s():
    async def scenario():
        ex = exchanges("13")
        async with running() as (cluster, http):
            status, node = await send(http, ex[0])
            assert status == 201 and node["spec"] == ex[0]["response"]["body"]["spec"]
            status, node = await send(http, ex[3])  # count is mutable
            assert status == 200 and node["spec"]["drivers"][0]["allocatable"] == {"count": 8}
            for i in (4, 5):  # nodeID immutable; a negative count
                status, body = await send(http, ex[i])
                assert status == 422 and body == ex[i]["response"]["body"], i
    asyncio.run(scenario())


@needs_recordings
def test_a_bound_claims_spec_is_immutable_with_the_recorded_diff():
    async def scenario():
        ex = exchanges("02")
        async with running(provisioners=frozenset()) as (cluster, http):  # the recording's PV, not ours
            status, _ = await send(http, ex[0])
            status, claim = await send(http, ex[1])
            assert status == 201
            status, _ = await send(http, ex[3])  # the scheduler's selected node
            ex[4]["request"]["body"]["spec"]["claimRef"]["uid"] = claim["metadata"]["uid"]
            status, _ = await send(http, ex[4])  # the provisioner's PV pre-bound to the claim
            assert status == 201
            claims = cluster.api.kind("v1", "persistentvolumeclaims")
            await wait_until_async(lambda: (cluster.api.get(claims, "vol", "data").get("status") or {})
                                   .get("phase") == "Bound", 5, "the bind")
            status, body = await send(http, ex[7])
            assert status == 422 and body == ex[7]["response"]["body"]
            status, _ = await send(http, {"request": {  # a bound claim's request may change
                "method": "PATCH", "path": ex[7]["request"]["path"],
                "body": {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}}})
            assert status == 200
    asyncio.run(scenario())


def test_an_immediate_claim_takes_the_smallest_available_volume_that_fits_it():
    async def scenario():
        async with running() as (cluster, http):
            api = cluster.api
            pvs, claims = api.kind("v1", "persistentvolumes"), api.kind("v1", "persistentvolumeclaims")
            api.create(api.kind("storage.k8s.io/v1", "storageclasses"), "", {
                "metadata": {"name": "manual"}, "provisioner": "kubernetes.io/no-provisioner"})
            for name, size in (("big", "10Gi"), ("small", "1Gi"), ("right", "2Gi")):
                api.create(pvs, "", {"metadata": {"name": name}, "spec": {
                    "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                    "hostPath": {"path": f"/data/{name}"}}})
            await wait_until_async(lambda: all(api.get(pvs, "", n)["status"]["phase"] == "Available"
                                               for n in ("big", "small", "right")), 5, "Available")
            api.create(claims, "vol", {"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                "resources": {"requests": {"storage": "1500Mi"}}}})
            await wait_until_async(lambda: (api.get(claims, "vol", "data").get("status") or {})
                                   .get("phase") == "Bound", 5, "the bind")
            assert api.get(claims, "vol", "data")["spec"]["volumeName"] == "right"
            assert api.get(pvs, "", "right")["status"]["phase"] == "Bound"
            assert api.get(pvs, "", "small")["status"]["phase"] == "Available"
    asyncio.run(scenario())
