"""The core's performance targets (run by `make bench`; excluded from the default test run).

Each row runs in a fresh spawned process, as `korral bench core` does, so peak RSS is the row's.
"""

import itertools
import multiprocessing

import pytest

from partition_worker import bench

pytestmark = pytest.mark.bench


def run_row(fn, *args) -> dict:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def test_allocations_per_second_at_5000_nodes_and_flat_in_the_node_count() -> None:
    small = run_row(bench.scheduling_row, 500, 10_000, "fair")
    big = run_row(bench.scheduling_row, 5000, 10_000, "fair")
    assert big["allocations_per_second"] >= 20_000, big
    assert small["allocations_per_second"] / big["allocations_per_second"] <= 1.5, (small, big)


def test_nodes_are_added_at_20000_per_second() -> None:
    row = run_row(bench.scheduling_row, 20_000, 10_000, "fair")
    assert row["nodes_per_second"] >= 20_000, row


def test_20000_nodes_and_200000_pending_asks_fit_in_1_gib() -> None:
    row = run_row(bench.memory_row, 20_000, 200_000, "fair")
    assert row["pending"] == 200_000
    assert row["peak_rss_bytes"] <= 2**30, row


@pytest.mark.parametrize("app_policy", ["fifo", "fair", "stateaware"])
@pytest.mark.parametrize("apps", [2, 1000])
def test_app_sort_policies_keep_the_throughput(app_policy, apps) -> None:
    row = run_row(bench.scheduling_row, 1000, 10_000, "fair", apps, app_policy)
    assert row["allocations_per_second"] >= 10_000, row


def _shaped_rate(leaves: int, apps_per_leaf: int, depth: int, policy: str, prio: bool) -> float:
    import random
    import time

    from common.config.model import PartitionConfig, QueueConfig
    from common.resources import Resource
    from partition_worker.core import AddApp, AddAsk, AddNode, Partition

    def chain(i: int, d: int) -> QueueConfig:
        if d == 1:
            return QueueConfig(name=f"l{i}", properties={"application.sort.policy": policy})
        return QueueConfig(name=f"p{i}", queues=(chain(i, d - 1),))
    root = QueueConfig(name="root", submitacl="*", queues=tuple(chain(i, depth) for i in range(leaves)))
    uuids = itertools.count(1)
    p = Partition("default", PartitionConfig(name="default", queues=(root,)),
                  new_uuid=lambda: f"uuid-{next(uuids)}", created_ns=1)
    for i in range(2000):
        p.handle(AddNode(f"n{i}", Resource({"memory": 100_000, "vcore": 1000})), 1)
    apps = []
    for i in range(leaves):
        path = ".".join(["root"] + [f"p{i}"] * (depth - 1) + [f"l{i}"])
        for a in range(apps_per_leaf):
            p.handle(AddApp(f"a{i}-{a}", path, "u"), 1)
            apps.append(f"a{i}-{a}")
    rnd = random.Random(7)
    r = Resource({"memory": 10, "vcore": 1})
    t = time.perf_counter()
    for k in range(10_000):
        p.handle(AddAsk(f"k{k}", apps[k % len(apps)], r, priority=rnd.randint(0, 10) if prio else 0), 1)
    assert p.step(1) == 10_000
    return 10_000 / (time.perf_counter() - t)


@pytest.mark.parametrize("leaves, apps_per_leaf, depth, policy, prio", [
    (100, 1, 1, "fifo", False), (100, 1, 1, "fair", True), (20, 2, 5, "fifo", False),
    (1, 1000, 1, "fifo", True), (1, 2, 1, "fair", True),
], ids=["100 leaves", "100 fair leaves with priorities", "5 levels deep",
        "1000 apps with priorities", "2 fair apps with priorities"])
def test_queue_and_app_shapes_keep_the_throughput(leaves, apps_per_leaf, depth, policy, prio) -> None:
    assert _shaped_rate(leaves, apps_per_leaf, depth, policy, prio) >= 8_000
