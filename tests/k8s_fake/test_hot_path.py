"""The double's cheaper per-pod paths give what the plain ones gave: managedFields' fieldsV1,
uids, a status patch on an object the caller already read, and watches that wait on one future
(their deadline, a stop, a connection gone)."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import aiohttp
import pytest

from k8s_shim.fake.api import Api, _fields_v1, _uuid4
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.fake.patch import strategic_merge_patch

pytestmark = pytest.mark.timeout(60)


def test_fields_v1_names_maps_by_key_merge_lists_by_their_key_four_levels_deep():
    body = {"spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                                     "resources": {"requests": {"cpu": "1"}}}],
                     "tolerations": [{"key": "t"}], "nodeSelector": {}},
            "status": {"podIPs": [{"ip": "10.0.0.1"}]}}
    assert _fields_v1(body) == {
        "f:spec": {".": {}, "f:containers": {'k:{"name":"c"}': {
            ".": {}, "f:image": {}, "f:name": {}, "f:ports": {}, "f:resources": {}}},
            "f:tolerations": {}, "f:nodeSelector": {}},
        "f:status": {".": {}, "f:podIPs": {'k:{"ip":"10.0.0.1"}': {".": {}, "f:ip": {}}}}}
    ports = _fields_v1({"ports": [{"containerPort": 80}]}, "x", 3)
    assert ports == {".": {}, "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}}}


def test_uids_are_the_uuid_modules_version_4_strings():
    rng = random.Random(7)
    for _ in range(200):
        bits = rng.getrandbits(128)
        assert _uuid4(bits) == str(uuid.UUID(int=bits, version=4))


def test_a_status_patch_ignores_a_copy_the_store_has_moved_past():
    api = Api()
    pods = api.kind("v1", "pods")
    api.create(api.kind("v1", "namespaces"), "", {"metadata": {"name": "default"}})
    api.create(pods, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    stale = api.get(pods, "default", "p")
    api.patch(pods, "default", "p", "merge", {"metadata": {"labels": {"a": "1"}}})
    stale["metadata"]["labels"] = {"stale": "yes"}  # what the patch must not write back
    out = api.patch(pods, "default", "p", "strategic", {"status": {"phase": "Running"}}, "status", "kubelet",
                    stored=stale)
    assert out["metadata"]["labels"] == {"a": "1"} and out["status"]["phase"] == "Running"
    fresh = api.get(pods, "default", "p")
    out = api.patch(pods, "default", "p", "strategic", {"status": {"podIP": "10.0.0.9"}}, "status", "kubelet",
                    stored=fresh)
    assert api.get(pods, "default", "p")["status"] == {**fresh["status"], "podIP": "10.0.0.9"}


def test_a_strategic_list_merge_keeps_its_order_for_reordered_repeated_and_new_keys():
    # what main's list merge answered before its keys were indexed
    original = [{"type": "A", "v": 1}, {"type": "B", "v": 1}, {"type": "C", "v": 1}]
    merged = strategic_merge_patch({"conditions": original}, {"conditions": [
        {"type": "C", "v": 2}, {"type": "N", "v": 2}, {"type": "A", "v": 2}]})
    assert [(c["type"], c["v"]) for c in merged["conditions"]] == [("B", 1), ("C", 2), ("N", 2), ("A", 2)]
    merged = strategic_merge_patch({"conditions": original}, {"conditions": [
        {"type": "B", "v": 2}, {"type": "B", "v": 3}, {"type": "Z", "v": 2}]})
    assert [(c["type"], c["v"]) for c in merged["conditions"]] == [("A", 1), ("B", 3), ("Z", 2), ("C", 1)]


def test_watches_end_at_their_deadline_and_when_the_server_stops_without_events():
    async def scenario():
        cluster = FakeCluster(ClusterOptions(kubelet=False))
        await cluster.start()
        try:
            cluster.api.create(cluster.api.kind("v1", "pods"), "default",
                               {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
            async with aiohttp.ClientSession(cluster.url) as http:
                loop = asyncio.get_running_loop()
                started = loop.time()
                async with http.get(f"/api/v1/pods?watch=1&timeoutSeconds=1&resourceVersion={cluster.store.rv}") as resp:
                    assert await asyncio.wait_for(resp.read(), 10) == b""  # ended, nothing to say
                assert 0.9 <= loop.time() - started < 5
                async with http.get("/api/v1/pods?watch=1&resourceVersion=0") as resp:
                    first = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
                    assert first["type"] == "ADDED"
                    stopping = asyncio.create_task(cluster.stop())
                    rest = await asyncio.wait_for(resp.read(), 10)  # the stop ends the stream
                    await stopping
                    assert b"ERROR" not in rest
        finally:
            await cluster.stop()
    asyncio.run(scenario())
