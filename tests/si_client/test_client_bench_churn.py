"""``korral bench churn``: the seeded workload, the verdict per rate, a small run against the fake
scheduler, and the plot (not a timing test: `make bench` runs the real one)."""

from __future__ import annotations

import pytest

from common.config import load_config
from common import series
from benchmarks import churn
from benchmarks.churn_workload import ChurnShape, TaskSource, config_yaml


def test_the_same_seed_gives_the_same_tasks_and_durations():
    shape = ChurnShape()
    a, b = TaskSource(shape, seed=7), TaskSource(shape, seed=7)
    assert [a.next_task() for _ in range(50)] == [b.next_task() for _ in range(50)]
    assert [a.duration(1000) for _ in range(50)] == [b.duration(1000) for _ in range(50)]
    assert TaskSource(shape, seed=8).next_task() != TaskSource(shape, seed=7).next_task()


def test_durations_balance_arrivals_with_the_running_count():
    source = TaskSource(ChurnShape(running=50_000), seed=1)
    mean = sum(source.duration(2000) for _ in range(20_000)) / 20_000
    assert mean == pytest.approx(25.0, rel=0.05)  # Little's law: 50,000 running / 2,000 per second
    with pytest.raises(ValueError, match="arrival rate must be positive"):
        source.duration(0)


@pytest.mark.parametrize("partitions", [1, 2])
def test_the_config_has_100_fair_leaves_under_10_parents_with_limits_in_every_partition(partitions):
    shape = ChurnShape(partitions=partitions)
    config = load_config(config_yaml(shape))
    assert [p.name for p in config.partitions] == shape.partition_names()
    for p in config.partitions:
        parents = p.root.queues
        assert len(parents) == 10 and all(len(q.queues) == 10 for q in parents)
        assert sum(1 for q in parents if q.limits) == 5
        leaf = parents[0].queues[0]
        assert leaf.properties["application.sort.policy"] == "fair"
        assert leaf.resources.guaranteed and leaf.resources.max


def test_apps_nodes_and_users_spread_over_queues_and_partitions():
    shape = ChurnShape(partitions=2)
    assert shape.leaf(0) == "root.p0.q0" and shape.leaf(99) == "root.p9.q9" and shape.leaf(100) == "root.p0.q0"
    assert {shape.app_partition(i) for i in range(shape.apps)} == {"default", "part1"}
    assert {shape.node_partition(i) for i in range(4)} == {"default", "part1"}


def test_a_bad_shape_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="nodes must be positive"):
        ChurnShape(nodes=0)
    with pytest.raises(ValueError, match="do not cover 100 leaf queues"):
        ChurnShape(apps=50)


def test_a_rate_is_sustained_only_with_a_low_p99_and_a_flat_backlog():
    flat = [(t * 0.25, 3.0) for t in range(40)]
    growing = [(t * 0.25, 10.0 * t) for t in range(40)]  # +40 asks/s
    assert churn.phase_summary(1000, [1.0] * 99 + [5.0], flat, 10)["sustained"]
    slow = churn.phase_summary(1000, [1.0] * 90 + [50.0] * 10, flat, 10)
    assert slow["latency_p99_ms"] == 50.0 and not slow["sustained"]
    behind = churn.phase_summary(1000, [1.0] * 100, growing, 10)
    assert behind["backlog_slope_per_s"] == pytest.approx(40.0) and not behind["backlog_flat"]
    assert not behind["sustained"]


def test_percentiles_and_slopes():
    assert series.percentile(list(range(1, 101)), 50) == 50 and series.percentile(list(range(1, 101)), 99) == 99
    assert series.percentile([], 99) is None
    assert series.slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2.0)
    assert series.slope([(1, 1)]) == 0.0


def test_a_small_run_places_every_task_and_keeps_the_running_count(fake):
    shape = ChurnShape(nodes=20, running=200, apps=100)
    phases = []
    result = churn.churn_run(fake.address, shape, [100.0, 200.0], 1.0, seed=3, pids={},
                             all_rates=True, report=phases.append)
    assert [p["rate"] for p in result["phases"]] == [100.0, 200.0] and phases == result["phases"]
    for p in result["phases"]:
        assert p["allocations"] > 0 and p["latency_p50_ms"] > 0 and p["cpu_seconds"]["rm (this process)"] >= 0
        assert 150 <= p["running_end"] <= 250  # completions balance arrivals around 200 running
    assert result["series"]["latency"] and result["series"]["backlog"]
    assert len(fake.allocs) == result["phases"][-1]["running_end"]


def test_the_plot_is_a_png_beside_the_results(tmp_path):
    pytest.importorskip("matplotlib")  # the bench and test extras install it
    from benchmarks.churn_plot import plot
    result = {"shape": ChurnShape().__dict__, "p99_target_ms": 20.0, "date": "2026-11-24",
              "phases": [{"rate": 500, "start_s": 0, "seconds": 2, "sustained": True},
                         {"rate": 1000, "start_s": 2, "seconds": 2, "sustained": False}],
              "series": {"latency": [(0.1, 1.0), (1.2, 2.0), (2.5, 30.0)],
                         "backlog": [(0.0, 1.0), (1.0, 2.0), (3.0, 40.0)]}}
    plot(result, tmp_path / "churn.png")
    assert (tmp_path / "churn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
