"""The core's performance targets (run by `make bench`; excluded from the default test run).

Each row runs in a fresh spawned process, as `korral bench core` does, so peak RSS is the row's.
"""

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
