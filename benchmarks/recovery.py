"""``korral bench recovery``: how fast a partition comes back after its worker is killed, and
whether partitions on separate workers scale.

Part 1: one partition with N nodes (default 5,000) and 10,000 running allocations; kill -9 the
worker that owns it; time until the partition is owned again (new epoch) and until the full state
is back (the RM re-registered, replayed every node with its existing allocations and every node
was accepted), then check that the scheduler holds exactly the RM's allocations. Target: ≤ 5 s.

Part 2: the core benchmark's 10,000 asks against one partition on one worker, then against two
partitions on two workers at once, in ``ROUNDS`` interleaved rounds; the ratio of the median
total allocation rates. Target: ≥ 1.7.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import threading
import time

import yaml

from common.constants import NODE_PARTITION
from common.cli.stack.throwaway import LocalStack
from benchmarks.cluster_rm import ClusterRM, scheduler_view

__all__ = ["ROUNDS", "TWO_PARTITIONS", "provided_partitions", "start_two_partitions", "configure", "recovery",
           "scaling", "run"]

ROUNDS = 3  # interleaved one- and two-partition rounds of the scaling part


def provided_partitions(*names: str) -> str:
    """A queues.yaml of the partitions ``names``, each with a root open to all and the provided
    rule creating the queue an application names."""
    return yaml.safe_dump({"partitions": [
        {"name": name, "placementrules": [{"name": "provided", "create": True}],
         "queues": [{"name": "root", "submitacl": "*"}]} for name in names]}, sort_keys=False)


TWO_PARTITIONS = provided_partitions("default", "second")


def start_two_partitions(rm: ClusterRM, si_address: str, nodes_each: int, apps: tuple[str, str] = ("a", "b"),
                         timeout: float = 120.0) -> None:
    """Register ``rm`` with ``TWO_PARTITIONS``; ``nodes_each`` nodes in each partition, and one app in
    each (``apps[0]`` in root.a of default, ``apps[1]`` in root.b of second); wait until every node
    is accepted."""
    rm.connect(si_address, TWO_PARTITIONS)
    rm.add_nodes(nodes_each, "default")
    rm.add_nodes(nodes_each, "second")
    rm.add_app(apps[0], "root.a", "default")
    rm.add_app(apps[1], "root.b", "second")
    rm.wait(lambda r: len(r.accepted_nodes) == 2 * nodes_each, timeout=timeout)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=5000, help="nodes in the partition [5000]")
    parser.add_argument("--allocations", type=int, default=10_000, help="running allocations [10000]")
    parser.add_argument("--skip-scaling", action="store_true", help="only the recovery part")
    parser.add_argument("--json", action="store_true", help="one JSON object per part")


def _owner(stack: LocalStack, rm_id: str, partition: str) -> dict | None:
    import urllib.request

    with urllib.request.urlopen(f"http://{stack.rest_address}/ws/v1/korral/stack", timeout=5) as r:
        workers = json.load(r)["cluster"].get("workers", [])
    return next((w for w in workers if w["partition"] == f"{rm_id}/{partition}"), None)


def _fill(rm: ClusterRM, partition: str, app: str, nodes: int, asks: int) -> float:
    """Add nodes and an app, then asks; return seconds from the asks' send to the last allocation."""
    rm.add_nodes(nodes, partition)
    rm.add_app(app, f"root.{app}", partition)
    rm.wait(lambda r: sum(1 for n in r.accepted_nodes if r.nodes[n].attributes[NODE_PARTITION] == partition)
            == nodes, timeout=120)
    start = time.monotonic()
    rm.submit(app, [f"{app}-{i}" for i in range(asks)])
    rm.wait(lambda r: sum(1 for k in r.running if k.startswith(app + "-")) == asks, timeout=120)
    return time.monotonic() - start


def recovery(nodes: int, allocations: int) -> dict:
    with LocalStack(workers=2) as stack:
        rm = ClusterRM("rm-bench-recovery", node_memory=1_000_000, node_vcore=100_000)
        restored = threading.Event()
        rm.connection_restored = restored.set  # type: ignore[method-assign]
        rm.connect(stack.si_address)
        try:
            _fill(rm, "default", "app", nodes, allocations)
            time.sleep(1.0)  # let the broker's status catch up
            before = _owner(stack, rm.rm_id, "default")
            killed = time.monotonic()
            os.kill(before["pid"], signal.SIGKILL)
            owned_at = None
            while time.monotonic() - killed < 60:
                w = _owner(stack, rm.rm_id, "default")
                if w and w["epoch"] > before["epoch"]:
                    owned_at = time.monotonic()
                    break
                time.sleep(0.02)
            if not restored.wait(60):
                raise RuntimeError("the RM did not finish its replay within 60 s")
            restored_at = time.monotonic()
            in_sync = scheduler_view(stack.rest_address) == rm.rm_view()
            return {"part": "recovery", "nodes": nodes, "allocations": len(rm.running),
                    "owned_seconds": round(owned_at - killed, 3) if owned_at else None,
                    "restored_seconds": round(restored_at - killed, 3), "in_sync": in_sync,
                    "violations": len(rm.violations)}
        finally:
            rm.close()


def _allocate(rm: ClusterRM, batches: dict[str, int], round_no: int) -> float:
    """Send `count` asks for each app at once; seconds until all are allocated; then finish them."""
    requests = [rm.asks_for(app, [f"{app}-r{round_no}-{i}" for i in range(n)]) for app, n in batches.items()]
    start = time.monotonic()
    for request in requests:
        rm.send_asks(request)
    total = sum(batches.values())  # nothing else runs: every round starts and ends empty
    rm.wait(lambda r: len(r.running) >= total, timeout=120)
    seconds = time.monotonic() - start
    rm.release(len(rm.running))
    rm.wait(lambda r: not r.running, timeout=60)
    return seconds


def scaling(nodes: int, asks: int) -> dict:
    with LocalStack(workers=2) as stack:
        rm = ClusterRM("rm-bench-scaling", node_memory=1_000_000, node_vcore=100_000)
        try:
            start_two_partitions(rm, stack.si_address, nodes)
            _allocate(rm, {"a": 1000, "b": 1000}, 0)  # warm both workers up
            # interleaved rounds, medians: one round swings by half on a shared 2-core machine
            ones, twos = [], []
            for r in range(ROUNDS):
                ones.append(_allocate(rm, {"a": asks}, 2 * r + 1))
                twos.append(_allocate(rm, {"a": asks, "b": asks}, 2 * r + 2))
            one, two = statistics.median(ones), statistics.median(twos)
            return {"part": "scaling", "nodes": nodes, "asks": asks, "rounds": ROUNDS,
                    "one_partition_allocations_per_second": round(asks / one),
                    "two_partitions_allocations_per_second": round(2 * asks / two),
                    "one_partition_rounds": [round(asks / x) for x in ones],
                    "two_partitions_rounds": [round(2 * asks / x) for x in twos],
                    "ratio": round((2 * asks / two) / (asks / one), 2)}
        finally:
            rm.close()


def run(args: argparse.Namespace) -> int:
    rows = [recovery(args.nodes, args.allocations)]
    if not args.skip_scaling:
        rows.append(scaling(args.nodes, 10_000))
    for row in rows:
        if args.json:
            print(json.dumps(row))
        elif row["part"] == "recovery":
            print(f"recovery: {row['nodes']} nodes, {row['allocations']} allocations; owned again "
                  f"{row['owned_seconds']} s after kill -9, full state back {row['restored_seconds']} s; "
                  f"scheduler == RM: {row['in_sync']}; violations {row['violations']}")
        else:
            print(f"scaling: 1 partition {row['one_partition_allocations_per_second']} allocs/s, "
                  f"2 partitions {row['two_partitions_allocations_per_second']} allocs/s, "
                  f"ratio {row['ratio']}")
    return 0
