"""The v1.36 recording of Kubernetes' gang API (``v1.36/05``, Workload and PodGroup) replayed
against a double started with ``scheduling.k8s.io/v1alpha2=true``, compared as ``test_replay``
compares; and what the group does when it is off, and the PodGroup protection controller."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest

from k8s_shim.fake.api import Api
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.fake.store import Store
from k8s_shim.fake.workloads import PROTECTION, RUNTIME_CONFIG
from tests.conftest import wait_until_async
from tests.k8s_fake.test_replay import TOKEN, _compare_response, _headers, ensure_namespace
from tests.k8s_fake.wire import WIRE, Translator, load

V136 = WIRE / "v1.36"
# accepted differences: a 1.36 server gives every pod metadata.generation 1 (see
# test_replay_constraints); the forbidden pod update's message carries a Go diff of the spec
# in 1.36's words (README: such messages match in kind; reason, field and code are compared)
ACCEPTED = ("metadata.generation: missing (recorded 1)",)
MESSAGE_ONLY = {8: re.compile(r"(^|\.)message: ")}


async def replay() -> list[str]:
    path = next(V136.glob("05-*.json"))
    cluster = FakeCluster(ClusterOptions(token=TOKEN, kubelet=False, runtime_config=frozenset({RUNTIME_CONFIG})))
    url = await cluster.start()
    tr, problems = Translator(), []
    try:
        async with aiohttp.ClientSession(skip_auto_headers=("User-Agent", "Accept")) as session:
            for index, ex in enumerate(load(path)["exchanges"]):
                req = ex["request"]
                body = req.get("body")
                data = json.dumps(body).encode() if body is not None else None
                async with session.request(req["method"], url + req["path"], headers=_headers("05", index,
                                           req.get("headers") or {}), data=data) as resp:
                    found: list[str] = []
                    _compare_response("v1.36/05", index, ex, resp.status, resp.headers.get("Content-Type", ""),
                                      await resp.read(), tr, found)
                    if index in MESSAGE_ONLY:
                        found = [p for p in found if not MESSAGE_ONLY[index].search(p.split(": ", 1)[1])]
                    problems += found
    finally:
        await cluster.stop()
    return [p for p in problems + tr.problems if not any(a in p for a in ACCEPTED)]


@pytest.mark.skipif(not V136.is_dir(), reason=f"no recordings: {V136} is absent")
@pytest.mark.timeout(60)
def test_the_double_serves_workloads_and_podgroups_as_the_recorded_server():
    problems = asyncio.run(replay())
    assert not problems, f"v1.36/05: {len(problems)} differences\n  " + "\n  ".join(problems)


def test_without_the_runtime_config_the_group_is_not_served_and_pods_lose_the_field():
    api = Api(Store())
    ensure_namespace(api, "default")
    assert not any(k.version == "v1alpha2" for k in api.kinds)
    pod = api.create(api.kind("v1", "pods"), "default", {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}],
                                            "schedulingGroup": {"podGroupName": "g"}}})
    assert "schedulingGroup" not in pod["spec"]


@pytest.mark.timeout(30)
def test_discovery_lists_the_alpha_version_only_when_it_is_on():
    async def main():
        out = {}
        for config in (frozenset(), frozenset({RUNTIME_CONFIG})):
            cluster = FakeCluster(ClusterOptions(kubelet=False, runtime_config=config))
            url = await cluster.start()
            try:
                async with aiohttp.ClientSession() as session:
                    async with session.get(url + "/apis") as resp:
                        groups = {g["name"]: g for g in (await resp.json())["groups"]}
                    async with session.get(url + "/apis/scheduling.k8s.io/v1alpha2") as resp:
                        out[bool(config)] = (groups["scheduling.k8s.io"], resp.status)
            finally:
                await cluster.stop()
        return out
    out = asyncio.run(main())
    off, on = out[False], out[True]
    assert [v["version"] for v in off[0]["versions"]] == ["v1"] and off[1] == 404
    assert [v["version"] for v in on[0]["versions"]] == ["v1", "v1alpha2"] and on[1] == 200
    assert on[0]["preferredVersion"]["version"] == "v1"


@pytest.mark.timeout(30)
def test_a_deleted_podgroup_goes_once_no_running_pod_names_it():
    async def main():
        cluster = FakeCluster(ClusterOptions(kubelet=False, runtime_config=frozenset({RUNTIME_CONFIG})))
        await cluster.start()
        api = cluster.api
        groups, pods = api.kind("scheduling.k8s.io/v1alpha2", "podgroups"), api.kind("v1", "pods")
        try:
            api.create(groups, "default", {"metadata": {"name": "g"},
                                           "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}})
            api.create(pods, "default", {"metadata": {"name": "p"}, "spec": {
                "containers": [{"name": "c", "image": "i:1"}], "schedulingGroup": {"podGroupName": "g"}}})
            body, _ = api.delete(groups, "default", "g")
            assert body["metadata"]["deletionTimestamp"] and body["metadata"]["finalizers"] == [PROTECTION]
            await asyncio.sleep(0.05)
            assert api.lookup("scheduling.k8s.io/v1alpha2", "podgroups", "default", "g") is not None  # in use
            api.patch(pods, "default", "p", "merge", {"status": {"phase": "Succeeded"}}, "status")
            await wait_until_async(lambda: api.lookup("scheduling.k8s.io/v1alpha2", "podgroups", "default", "g")
                                   is None, 5, "the PodGroup gone")
        finally:
            await cluster.stop()
    asyncio.run(main())
