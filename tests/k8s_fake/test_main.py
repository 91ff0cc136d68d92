"""``korral k8s-fake``'s flags: what they parse to, and the errors that name the bad value."""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
import pytest

from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.fake.main import parse_labels_flag, parse_taints_flag
from k8s_shim.fake.server import COMPACT_PATH, FAULTS_PATH
from tests.conftest import run_korral


def test_node_labels_and_taints_parse():
    assert parse_labels_flag("zone=a, pool=gpu") == {"zone": "a", "pool": "gpu"}
    assert parse_taints_flag("gpu=yes:NoSchedule,spot:PreferNoSchedule") == [
        {"key": "gpu", "effect": "NoSchedule", "value": "yes"}, {"key": "spot", "effect": "PreferNoSchedule"}]


@pytest.mark.parametrize("parse, text", [(parse_labels_flag, "novalue"), (parse_taints_flag, "gpu=yes"),
                                         (parse_taints_flag, "gpu:Sometimes"), (parse_taints_flag, ":NoSchedule")])
def test_a_bad_label_or_taint_is_named(parse, text):
    with pytest.raises(argparse.ArgumentTypeError, match=text.split(":")[0] or "NoSchedule"):
        parse(text)


@pytest.mark.parametrize("args, message", [
    (["--address", "nowhere"], "is not HOST:PORT"),
    (["--node-name-pattern", "n-{j}"], "may only use {i}"),
    (["--nodes", "-1"], "--nodes must be 0 or more"),
    (["--tls-cert", "x.crt"], "--tls-cert and --tls-key go together"),
])
def test_bad_flags_fail_with_a_message(args, message):
    result = run_korral("k8s-fake", *args, timeout=60)
    assert result.returncode != 0 and message in result.stderr


def test_the_compact_hook_expires_older_versions():
    async def scenario():
        cluster = FakeCluster(ClusterOptions(token="t", kubelet=False))
        url = await cluster.start()
        try:
            async with aiohttp.ClientSession(url, headers={"Authorization": "Bearer t"}) as http:
                old = cluster.store.rv - 1
                async with http.post(COMPACT_PATH) as resp:
                    assert resp.status == 200 and (await resp.json())["compactedTo"] == str(cluster.store.rv)
                async with http.get(f"/api/v1/namespaces?resourceVersion={old}&resourceVersionMatch=Exact") as r:
                    assert r.status == 410
                async with http.post(COMPACT_PATH + "?resource=widgets") as resp:
                    assert resp.status == 400 and "widgets" in (await resp.json())["message"]
        finally:
            await cluster.stop()
    asyncio.run(scenario())


def test_injected_faults_answer_the_matching_requests_then_stop():
    async def scenario():
        cluster = FakeCluster(ClusterOptions(token="t", kubelet=False))
        url = await cluster.start()
        try:
            async with aiohttp.ClientSession(url, headers={"Authorization": "Bearer t"}) as http:
                fault = {"method": "get", "pathPrefix": "/api/v1/namespaces/default", "status": 503, "count": 2}
                async with http.post(FAULTS_PATH, json=fault) as resp:
                    assert resp.status == 200
                for _ in range(2):
                    async with http.get("/api/v1/namespaces/default") as r:
                        assert r.status == 503 and (await r.json())["reason"] == "InternalError"
                async with http.get("/api/v1/namespaces/kube-system") as r:
                    assert r.status == 200  # another path
                async with http.get("/api/v1/namespaces/default") as r:
                    assert r.status == 200  # used up
                async with http.post(FAULTS_PATH, json={"status": 200}) as resp:
                    assert resp.status == 400 and "400-599" in (await resp.json())["message"]
                async with http.post(FAULTS_PATH, data=b"{not json") as resp:
                    assert resp.status == 400
        finally:
            await cluster.stop()
    asyncio.run(scenario())
