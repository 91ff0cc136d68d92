"""Benchmark (``-m bench``): REST reads and the full state dump at 5,000 nodes / 50,000 allocations.

Prints the time of each read through a real stack; asserts only that the answers are complete
(timings depend on the machine; the goals are in docs/rest.md).
"""

from __future__ import annotations

import gzip
import json
import time

import pytest

from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.rest.workload import http
from tests.si_builders import app, ask, node

NODES, APPS, ASKS_PER_APP = 5_000, 500, 100
CONFIG = """
partitions:
  - name: default
    placementrules:
      - name: provided
    queues:
      - name: root
        submitacl: '*'
        queues:
""" + "".join(f"""          - name: q{i}
            properties:
              application.sort.policy: fifo
""" for i in range(10))


@pytest.mark.bench
@pytest.mark.timeout(600)
def test_reads_and_dump_at_scale(stack_factory) -> None:
    stack = stack_factory(workers=1)
    base = f"http://{stack.rest_address}"
    rm = SIRM(stack.si_address, "rm-bench")
    rm.register(CONFIG)
    rm.open()
    rm.nodes(*[node(f"n{i}", memory=100_000, vcore=100_000) for i in range(NODES)])
    rm.wait_accepted("node", {f"n{i}" for i in range(NODES)}, 60)
    rm.apps(*[app(f"app{a}", f"root.q{a % 10}", user=f"u{a % 7}") for a in range(APPS)])
    rm.wait_accepted("application", {f"app{a}" for a in range(APPS)}, 60)
    rm.asks(*[ask(f"k{a}-{k}", f"app{a}", memory=10, vcore=10) for a in range(APPS) for k in range(ASKS_PER_APP)])

    # Count allocations through REST: one 50,000-allocation response exceeds the test RM's
    # default 4 MB gRPC receive limit, and the partition's own count is what matters here.
    def containers() -> int:
        parts = json.loads(http(base, "/ws/v1/clusters").body)  # [] while the worker is too busy to answer
        return int(parts[0].get("totalContainers", 0)) if parts else 0

    wait_until(lambda: containers() == APPS * ASKS_PER_APP, 300, "every allocation made",
               lambda: f"{containers()} of {APPS * ASKS_PER_APP} made", interval=1.0)
    timings = {}
    gz = {"Accept-Encoding": "gzip"}
    for name, path, headers in [
            ("partitions", "/ws/v1/partitions", {}), ("queues", "/ws/v1/partition/default/queues", {}),
            ("one app", "/ws/v1/partition/default/application/app7", {}),
            ("one node", "/ws/v1/partition/default/node/n7", {}),
            ("metrics", "/ws/v1/metrics", {}), ("health", "/ws/v1/scheduler/healthcheck", {}),
            ("node utils", "/ws/v1/scheduler/node-utilizations", {}),
            ("all nodes", "/ws/v1/partition/default/nodes", {}), ("all nodes gz", "/ws/v1/partition/default/nodes", gz),
            ("all apps", "/ws/v1/partition/default/applications", {}),
            ("fullstatedump", "/ws/v1/fullstatedump", {}), ("debug dump", "/debug/fullstatedump", {}),
            ("debug dump gz", "/debug/fullstatedump", gz)]:
        t = time.perf_counter()
        r = http(base, path, timeout=120, headers=headers)
        timings[name] = time.perf_counter() - t
        assert r.status == 200, (path, r.body[:300])
        assert (r.headers.get("Content-Encoding") == "gzip") == bool(headers), (path, r.headers)
        body = gzip.decompress(r.body) if headers else r.body
        if name == "fullstatedump":
            d = json.loads(body)
            assert sum(len(n["allocations"]) for g in d["Nodes"] for n in g["nodesInfo"]) == APPS * ASKS_PER_APP
            timings["dump MB"] = len(body) / 1e6
        if name == "debug dump gz":
            timings["dump gz MB"] = len(r.body) / 1e6
        if name.startswith("all nodes"):
            assert len(json.loads(body)) == NODES
        if name == "node utils":
            (part,) = json.loads(body)
            assert sum(b["numOfNodes"] for b in part["utilizations"][0]["utilization"]) == NODES
    rm.close()
    print("\n" + "\n".join(f"{k:14s} {v:8.3f}" for k, v in timings.items()))
