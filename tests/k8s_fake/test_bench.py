"""How fast ``korral k8s-fake`` serves what ``korral bench k8s`` will ask of it: 5,000 nodes,
50,000 pods created and bound over HTTP by concurrent clients while three watchers follow the
pods (cluster-wide, by scheduler name, assigned-only), then full lists of every pod.

``pytest -m bench tests/k8s_fake/test_bench.py -s`` prints the numbers; the assertions only
check that nothing was lost (every watcher saw every write it selects)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import aiohttp
import pytest

from common.netutil import free_ports
from tests.conftest import korral_env, stop_process, wait_until

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]

NODES, PODS, CLIENTS = 5000, 50_000, 16


def _pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i}", "labels": {"applicationId": f"app-{i % 300}", "queue": f"root.q{i % 10}"}},
            "spec": {"schedulerName": "yunikorn",
                     "containers": [{"name": "c", "image": "busybox:1.36",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


async def _watch(session: aiohttp.ClientSession, url: str, counts: dict[str, int], stop: asyncio.Event) -> None:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        while not stop.is_set():
            raw = await resp.content.readline()
            if not raw:
                return
            kind = json.loads(raw)["type"]
            counts[kind] = counts.get(kind, 0) + 1


async def _load(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(limit=CLIENTS + 8)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url + "/api/v1/pods") as resp:
            start_rv = (await resp.json())["metadata"]["resourceVersion"]
        stop = asyncio.Event()
        selectors = {"all": "", "yunikorn": "&fieldSelector=spec.schedulerName%3Dyunikorn",
                     "assigned": "&fieldSelector=spec.nodeName!%3D"}
        counts: dict[str, dict[str, int]] = {name: {} for name in selectors}
        watchers = [asyncio.create_task(_watch(session, f"{url}/api/v1/pods?watch=1&resourceVersion={start_rv}{sel}",
                                               counts[name], stop)) for name, sel in selectors.items()]

        async def run(phase: str, request) -> None:
            queue = list(range(PODS))
            latencies: list[float] = []

            async def worker() -> None:
                while queue:
                    i = queue.pop()
                    t = time.perf_counter()
                    status = await request(i)
                    latencies.append(time.perf_counter() - t)
                    assert status in (200, 201), (phase, i, status)
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(CLIENTS)))
            elapsed = time.perf_counter() - t0
            latencies.sort()
            out[phase] = {"per_second": round(PODS / elapsed), "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
                          "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2)}

        async def create(i: int) -> int:
            async with session.post(url + "/api/v1/namespaces/default/pods", json=_pod(i)) as resp:
                await resp.read()
                return resp.status

        async def bind(i: int) -> int:
            async with session.post(f"{url}/api/v1/namespaces/default/pods/p-{i}/binding",
                                    json={"target": {"kind": "Node", "name": f"fake-node-{i % NODES}"}}) as resp:
                await resp.read()
                return resp.status

        await run("create", create)
        await run("bind", bind)
        # every pod: ADDED, MODIFIED (bound), MODIFIED (Running by the kubelet)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and counts["all"].get("MODIFIED", 0) < 2 * PODS:
            await asyncio.sleep(0.2)
        out["watch_events"] = {name: dict(c) for name, c in counts.items()}
        for label, query in (("list_all", ""), ("list_rv0", "?resourceVersion=0")):
            t = time.perf_counter()
            async with session.get(url + "/api/v1/pods" + query) as resp:
                body = await resp.read()
            out[label] = {"seconds": round(time.perf_counter() - t, 3), "megabytes": round(len(body) / 1e6, 1),
                          "items": len(json.loads(body)["items"])}
        stop.set()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    return out


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    import os
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_fake_serves_5000_nodes_and_50000_pods_to_three_watchers(tmp_path):
    [port] = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "common.cli", "k8s-fake", "--address", f"127.0.0.1:{port}",
                             "--nodes", str(NODES), "--no-tls", "--token", "none", "--history", "20000",
                             "--log-level", "WARNING"], env=korral_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        started = time.perf_counter()
        wait_until(lambda: proc.stdout.readline().startswith("fake Kubernetes API"), 120, "the fake to serve")
        boot = time.perf_counter() - started
        cpu0 = _cpu_seconds(proc.pid)
        result = asyncio.run(_load(url))
        result["server_cpu_seconds_per_1000_pods"] = round((_cpu_seconds(proc.pid) - cpu0) / (PODS / 1000), 3)
        result["startup_seconds_5000_nodes"] = round(boot, 1)
        result["server_rss_mb"] = round(_rss_mb(proc.pid))
        print(json.dumps(result, indent=1))
        events = result["watch_events"]
        assert events["all"]["ADDED"] == PODS and events["all"]["MODIFIED"] >= 2 * PODS
        assert events["yunikorn"]["ADDED"] == PODS
        assert events["assigned"]["ADDED"] == PODS  # each pod enters the assigned-only watch when bound
        assert result["list_all"]["items"] == PODS and result["list_rv0"]["items"] == PODS
    finally:
        stop_process(proc)
