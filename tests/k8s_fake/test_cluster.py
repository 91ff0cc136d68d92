"""The double's behaviour beyond the recordings: history and 410s, exact lists of older states,
paging, slow watchers, bookmarks, the fake kubelet, the garbage collector, and the other
resources (events.k8s.io view, storage, leases, eviction, namespace finalize)."""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from k8s_shim.fake.api import DeleteOptions
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster, NodeTemplate
from k8s_shim.fake.errors import ApiError
from tests.conftest import wait_until_async

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def running(**options: Any):
    cluster = FakeCluster(ClusterOptions(**options))
    await cluster.start()
    try:
        async with aiohttp.ClientSession(cluster.url) as http:
            yield cluster, http
    finally:
        await cluster.stop()


def pod(name: str, **meta: Any) -> dict[str, Any]:
    spec = meta.pop("spec", {})
    return {"metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec}}


async def watch_lines(http: aiohttp.ClientSession, path: str, count: int, timeout: float = 10) -> list[dict]:
    lines: list[dict] = []
    async with http.get(path) as resp:
        assert resp.status == 200
        while len(lines) < count:
            raw = await asyncio.wait_for(resp.content.readline(), timeout)
            if not raw:
                break
            lines.append(json.loads(raw))
    return lines


# -- history, lists and watches ----------------------------------------------------------------

def test_an_exact_list_shows_an_older_state_and_410s_once_compacted():
    async def scenario():
        async with running(kubelet=False) as (cluster, http):
            pods = cluster.api.kind("v1", "pods")
            cluster.api.create(pods, "default", pod("a", labels={"v": "1"}))
            before = cluster.store.rv
            cluster.api.patch(pods, "default", "a", "merge", {"metadata": {"labels": {"v": "2"}}})
            cluster.api.create(pods, "default", pod("b"))
            async with http.get(f"/api/v1/namespaces/default/pods?resourceVersion={before}"
                                "&resourceVersionMatch=Exact") as resp:
                body = await resp.json()
            assert [(i["metadata"]["name"], i["metadata"]["labels"]) for i in body["items"]] == [("a", {"v": "1"})]
            assert body["metadata"]["resourceVersion"] == str(before)
            cluster.store.compact()
            async with http.get(f"/api/v1/namespaces/default/pods?resourceVersion={before}"
                                "&resourceVersionMatch=Exact") as resp:
                assert resp.status == 410 and (await resp.json())["reason"] == "Expired"
            lines = await watch_lines(http, f"/api/v1/pods?watch=1&resourceVersion={before}", 1)
            assert lines[0]["type"] == "ERROR" and lines[0]["object"]["code"] == 410
    asyncio.run(scenario())


def test_history_is_bounded_so_an_old_version_expires_by_itself():
    async def scenario():
        async with running(kubelet=False, history=20) as (cluster, http):
            pods = cluster.api.kind("v1", "pods")
            cluster.api.create(pods, "default", pod("a"))
            start = cluster.store.rv
            for i in range(60):
                cluster.api.patch(pods, "default", "a", "merge", {"metadata": {"annotations": {"i": str(i)}}})
            lines = await watch_lines(http, f"/api/v1/pods?watch=1&resourceVersion={start}", 1)
            assert lines[0]["type"] == "ERROR"
            recent = cluster.store.rv - 5
            lines = await watch_lines(http, f"/api/v1/pods?watch=1&resourceVersion={recent}", 5)
            assert [l["type"] for l in lines] == ["MODIFIED"] * 5
    asyncio.run(scenario())


def test_pages_keep_the_first_pages_version_while_the_store_moves_on():
    async def scenario():
        async with running(kubelet=False) as (cluster, http):
            pods = cluster.api.kind("v1", "pods")
            for i in range(5):
                cluster.api.create(pods, "default", pod(f"p{i}"))
            async with http.get("/api/v1/namespaces/default/pods?limit=2") as resp:
                first = await resp.json()
            cluster.api.create(pods, "default", pod("p9"))  # after the snapshot: not in its pages
            names, token = [i["metadata"]["name"] for i in first["items"]], first["metadata"]["continue"]
            while token:
                async with http.get(f"/api/v1/namespaces/default/pods?limit=2&continue={token}") as resp:
                    page = await resp.json()
                assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
                names += [i["metadata"]["name"] for i in page["items"]]
                token = page["metadata"].get("continue")
            assert names == ["p0", "p1", "p2", "p3", "p4"]
    asyncio.run(scenario())


def test_a_watch_that_falls_too_far_behind_is_ended_with_410():
    async def scenario():
        async with running(kubelet=False) as (cluster, http):
            pods = cluster.api.kind("v1", "pods")
            cluster.api.create(pods, "default", pod("a"))
            bucket = cluster.store.buckets["pods"]
            async with http.get("/api/v1/pods?watch=1&resourceVersion=0") as resp:
                assert json.loads(await resp.content.readline())["type"] == "ADDED"
                [queue] = bucket.watchers
                queue.limit = 10
                for i in range(20):  # written without yielding: the watcher cannot keep up
                    cluster.api.patch(pods, "default", "a", "merge", {"metadata": {"annotations": {"i": str(i)}}})
                line = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
            assert line["type"] == "ERROR" and line["object"]["reason"] == "Expired"
            await wait_until_async(lambda: not bucket.watchers, 10, "the watcher to be dropped")
    asyncio.run(scenario())


def test_bookmarks_come_at_the_interval_once_the_resource_moved_past_the_watch():
    async def scenario():
        async with running(kubelet=False, bookmark_interval=0.3) as (cluster, http):
            pods = cluster.api.kind("v1", "pods")
            start = cluster.store.rv
            cluster.api.create(pods, "kube-system", pod("elsewhere"))
            lines = await watch_lines(http, f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={start}"
                                            "&allowWatchBookmarks=true", 2)
            assert [l["type"] for l in lines] == ["BOOKMARK", "BOOKMARK"]
            assert lines[0]["object"]["metadata"]["resourceVersion"] == str(cluster.store.buckets["pods"].last_rv)
    asyncio.run(scenario())


def test_events_read_through_events_k8s_io_are_the_core_events_renamed():
    async def scenario():
        async with running(kubelet=False) as (cluster, http):
            cluster.api.create(cluster.api.kind("v1", "events"), "default", {
                "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                "reason": "Scheduled", "message": "bound", "type": "Normal"})
            async with http.get("/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector="
                                "regarding.name%3Dp") as resp:
                body = await resp.json()
            [item] = body["items"]
            assert body["kind"] == "EventList" and body["apiVersion"] == "events.k8s.io/v1"
            assert item["note"] == "bound" and item["regarding"]["name"] == "p" and "message" not in item
    asyncio.run(scenario())


def test_storage_objects_and_leases_round_trip():
    async def scenario():
        async with running(kubelet=False) as (cluster, http):
            api = cluster.api
            api.create(api.kind("storage.k8s.io/v1", "storageclasses"), "",
                       {"metadata": {"name": "wffc"}, "provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer"})
            claim = api.create(api.kind("v1", "persistentvolumeclaims"), "default",
                               {"metadata": {"name": "data"}, "spec": {"storageClassName": "wffc",
                                                                       "accessModes": ["ReadWriteOnce"]}})
            assert claim["status"] == {"phase": "Pending"}
            assert claim["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
            body, _ = api.delete(api.kind("v1", "persistentvolumeclaims"), "default", "data")
            assert body["metadata"]["deletionTimestamp"]  # kept by its finalizer
            lease = {"metadata": {"name": "korral-shim"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
            async with http.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", json=lease) as resp:
                assert resp.status == 201
                created = await resp.json()
            created["spec"]["holderIdentity"] = "b"
            async with http.put("/apis/coordination.k8s.io/v1/namespaces/default/leases/korral-shim",
                                json=created) as resp:
                assert resp.status == 200
            async with http.put("/apis/coordination.k8s.io/v1/namespaces/default/leases/korral-shim",
                                json=created) as resp:  # the same resourceVersion again: stale
                assert resp.status == 409
    asyncio.run(scenario())


# -- the fake kubelet ----------------------------------------------------------------------------

async def _bound(cluster: FakeCluster, name: str, node: str, **meta: Any) -> None:
    api = cluster.api
    api.create(api.kind("v1", "pods"), "default", pod(name, **meta))
    api.bind("default", name, {"target": {"name": node}})


def _pod(cluster: FakeCluster, name: str) -> dict[str, Any] | None:
    entry = cluster.store.get("pods", f"default/{name}")
    return None if entry is None else entry.decode()


def test_the_kubelet_readies_its_nodes_and_runs_bound_pods():
    async def scenario():
        async with running(nodes=NodeTemplate(count=2, taints=[{"key": "gpu", "effect": "NoSchedule"}])) as (c, _):
            await wait_until_async(lambda: all(
                any(x["type"] == "Ready" and x["status"] == "True" for x in e.decode()["status"].get("conditions", []))
                for e in c.store.entries("nodes")), 10, "the nodes to be Ready")
            node = c.api.get(c.api.kind("v1", "nodes"), "", "fake-node-0")
            assert node["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]  # not-ready taint gone
            await _bound(c, "p", "fake-node-0")
            await wait_until_async(lambda: _pod(c, "p")["status"]["phase"] == "Running", 10, "p to run")
            status = _pod(c, "p")["status"]
            assert status["podIP"].startswith("10.64.0.") and status["hostIP"] == "172.16.0.1"
            assert {x["type"] for x in status["conditions"]} == {"Initialized", "Ready", "ContainersReady",
                                                                 "PodScheduled"}
            assert status["containerStatuses"][0]["state"]["running"]["startedAt"]
            await _bound(c, "elsewhere", "not-a-fake-node")
            await asyncio.sleep(0)  # (nothing will happen: no kubelet serves that node)
            assert _pod(c, "elsewhere")["status"]["phase"] == "Pending"
    asyncio.run(scenario())


def test_bindings_are_counted_per_pod_a_second_one_refused():
    async def scenario():
        async with running(nodes=NodeTemplate(count=1)) as (c, http):
            await _bound(c, "p", "fake-node-0")
            with pytest.raises(ApiError) as refused:
                c.api.bind("default", "p", {"target": {"name": "fake-node-0"}})
            assert refused.value.code == 409
            async with http.get("/korral-fake/bindings") as resp:
                assert resp.status == 200 and await resp.json() == {"default/p": {"requests": 2, "bound": 1}}
    asyncio.run(scenario())


@pytest.mark.parametrize("policy, code, phase, restarts", [
    ("Never", "0", "Succeeded", 0),
    ("Never", "3", "Failed", 0),
    ("OnFailure", "0", "Succeeded", 0),
])
def test_a_pod_with_a_run_time_finishes_as_its_restart_policy_says(policy, code, phase, restarts):
    async def scenario():
        async with running(nodes=NodeTemplate(count=1)) as (c, _):
            await _bound(c, "job", "fake-node-0", spec={"restartPolicy": policy},
                         annotations={"korral.io/fake-run-seconds": "0.1", "korral.io/fake-exit-code": code})
            await wait_until_async(lambda: _pod(c, "job")["status"]["phase"] == phase, 10, f"job to be {phase}")
            cs = _pod(c, "job")["status"]["containerStatuses"][0]
            assert cs["state"]["terminated"]["exitCode"] == int(code) and cs["restartCount"] == restarts
    asyncio.run(scenario())


def test_a_pod_that_always_restarts_counts_its_restarts():
    async def scenario():
        async with running(nodes=NodeTemplate(count=1)) as (c, _):
            await _bound(c, "svc", "fake-node-0", annotations={"korral.io/fake-run-seconds": "0.05"})
            await wait_until_async(lambda: _pod(c, "svc")["status"].get("containerStatuses", [{}])[0]
                                   .get("restartCount", 0) >= 2, 10, "two restarts")
            assert _pod(c, "svc")["status"]["phase"] == "Running"
    asyncio.run(scenario())


def test_the_kubelet_finishes_a_graceful_deletion():
    async def scenario():
        async with running(nodes=NodeTemplate(count=1)) as (c, _):
            await _bound(c, "p", "fake-node-0", annotations={"korral.io/fake-terminate-seconds": "0.2"})
            await wait_until_async(lambda: _pod(c, "p")["status"]["phase"] == "Running", 10, "p to run")
            body, _ = c.api.delete(c.api.kind("v1", "pods"), "default", "p")
            assert body["metadata"]["deletionGracePeriodSeconds"] == 30  # Terminating first
            assert _pod(c, "p") is not None
            await wait_until_async(lambda: _pod(c, "p") is None, 10, "the kubelet to finish the deletion")
    asyncio.run(scenario())


# -- the garbage collector -----------------------------------------------------------------------

def _ref(owner: dict[str, Any], block: bool = True) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": block}


def test_placeholders_bound_to_a_fake_node_go_with_their_owner():
    async def scenario():
        async with running(nodes=NodeTemplate(count=1)) as (c, _):
            pods = c.api.kind("v1", "pods")
            owner = c.api.create(pods, "default", pod("owner"))
            c.api.create(pods, "default", pod("ph-1", ownerReferences=[_ref(owner)]))
            c.api.bind("default", "ph-1", {"target": {"name": "fake-node-0"}})
            c.api.create(pods, "default", pod("ph-2", ownerReferences=[_ref(owner, False)]))
            c.api.delete(pods, "default", "owner")
            await wait_until_async(lambda: _pod(c, "ph-1") is None and _pod(c, "ph-2") is None, 10,
                                   "the collector and the kubelet to remove both placeholders")
    asyncio.run(scenario())


def test_orphan_propagation_keeps_the_dependents_without_the_reference():
    async def scenario():
        async with running(kubelet=False) as (c, _):
            pods = c.api.kind("v1", "pods")
            owner = c.api.create(pods, "default", pod("owner"))
            c.api.create(pods, "default", pod("dep", ownerReferences=[_ref(owner)]))
            c.api.delete(pods, "default", "owner", DeleteOptions(propagation="Orphan"))
            await wait_until_async(lambda: _pod(c, "owner") is None, 10, "the owner to go")
            await asyncio.sleep(0.05)
            assert "ownerReferences" not in _pod(c, "dep")["metadata"]
    asyncio.run(scenario())


def test_a_dependent_whose_owner_does_not_exist_is_collected():
    async def scenario():
        async with running(kubelet=False) as (c, _):
            pods = c.api.kind("v1", "pods")
            ghost = {"metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}}
            c.api.create(pods, "default", pod("dep", ownerReferences=[_ref(ghost)]))
            await wait_until_async(lambda: _pod(c, "dep") is None, 10, "the orphan to be collected")
    asyncio.run(scenario())


# -- the remaining verbs -------------------------------------------------------------------------

def test_eviction_deletes_gracefully_and_namespaces_finalize():
    async def scenario():
        async with running(kubelet=False) as (c, http):
            await _bound(c, "p", "n1")
            async with http.post("/api/v1/namespaces/default/pods/p/eviction",
                                 json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}) as r:
                assert r.status == 201
            assert _pod(c, "p")["metadata"]["deletionGracePeriodSeconds"] == 30
            c.api.create(c.api.kind("v1", "namespaces"), "", {"metadata": {"name": "gone"}})
            c.api.delete(c.api.kind("v1", "namespaces"), "", "gone")
            async with http.put("/api/v1/namespaces/gone/finalize",
                                json={"metadata": {"name": "gone"}, "spec": {"finalizers": []}}) as r:
                assert r.status == 200
            assert c.store.get("namespaces", "gone") is None
    asyncio.run(scenario())


def test_a_yaml_body_and_a_yaml_answer():
    async def scenario():
        async with running(kubelet=False) as (c, http):
            text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  queues.yaml: |\n    x: 1\n"
            async with http.post("/api/v1/namespaces/default/configmaps", data=text,
                                 headers={"Content-Type": "application/yaml", "Accept": "application/yaml"}) as r:
                assert r.status == 201 and r.content_type == "application/yaml"
                assert "queues.yaml: |\n    x: 1\n" in await r.text()
    asyncio.run(scenario())


def test_an_update_that_changes_nothing_writes_nothing():
    async def scenario():
        async with running(kubelet=False) as (c, _):
            pods = c.api.kind("v1", "pods")
            c.api.create(pods, "default", pod("a", labels={"x": "1"}))
            rv = c.store.rv
            c.api.patch(pods, "default", "a", "merge", {"metadata": {"labels": {"x": "1"}}})
            assert c.store.rv == rv
            with pytest.raises(ApiError) as err:
                c.api.patch(pods, "default", "a", "merge", {"spec": {"schedulerName": "other"}})
            assert err.value.code == 422
    asyncio.run(scenario())


def test_a_bad_run_time_annotation_is_ignored_with_a_warning_naming_the_pod(caplog):
    async def scenario():
        async with running(nodes=NodeTemplate(count=1)) as (c, _):
            await _bound(c, "odd", "fake-node-0", annotations={"korral.io/fake-run-seconds": "soon"})
            await wait_until_async(lambda: _pod(c, "odd")["status"]["phase"] == "Running", 10, "odd to run")
    asyncio.run(scenario())
    assert "pod default/odd: annotation korral.io/fake-run-seconds='soon' is not a number" in caplog.text
