"""``/ws/v1/metrics`` parses as Prometheus text, uses YuniKorn's names, and moves with allocations."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from common import si_pb2
from tests.conftest import wait_until
from tests.rest.workload import Loaded
from tests.si_builders import ask, release


def allocate(loaded: Loaded, key: str) -> si_pb2.Allocation:
    """One ask of memory 30 for app-b1 of the loaded stack, allocated."""
    loaded.rm.asks(ask(key, "app-b1", memory=30, vcore=1))
    return loaded.rm.wait_allocated({key})[key]


def scrape(loaded: Loaded) -> dict[str, list]:
    r = loaded.get("/ws/v1/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(r.body.decode())}


def value(fams: dict, name: str, **labels: str) -> float:
    for s in fams[name]:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample of {name} with {labels}")


def test_yunikorn_and_korral_metric_names_are_served(loaded: Loaded) -> None:
    fams = scrape(loaded)
    for name in ("yunikorn_scheduler_application_total", "yunikorn_scheduler_node",
                 "yunikorn_scheduler_memory_node_usage_total", "yunikorn_root_a_queue_app",
                 "yunikorn_root_a_queue_resource", "yunikorn_root_default_queue_resource",
                 "korral_partition_cycles", "korral_partition_allocations", "korral_partition_pending_asks",
                 "korral_broker_envelopes_routed", "korral_rmproxy_resync", "korral_rm_state",
                 "korral_worker_heartbeat_age_seconds", "korral_broker_queue_depth",
                 "korral_rmproxy_heartbeat_age_seconds"):
        assert name in fams, name
    assert value(fams, "yunikorn_root_a_queue_resource", partition="default", state="guaranteed",
                 resource="memory") == 400
    assert value(fams, "yunikorn_root_a_queue_resource", partition="default", state="max",
                 resource="memory") == 1000
    assert value(fams, "yunikorn_scheduler_node", partition="default", state="active") == 2
    assert value(fams, "yunikorn_scheduler_node", partition="gpu", state="active") == 1
    assert value(fams, "yunikorn_root_b_queue_app", partition="default", state="running") == 1
    assert value(fams, "korral_rm_state", rm="rm-rest", state="Running") == 1


def test_each_partition_appears_once(loaded: Loaded) -> None:
    fams = scrape(loaded)
    rows = [(s.labels["rm"], s.labels["partition"]) for s in fams["korral_partition_allocations"]]
    assert sorted(rows) == [("rm-rest", "default"), ("rm-rest", "gpu")]


def test_metrics_move_when_an_allocation_happens_and_is_released(loaded: Loaded) -> None:
    before = scrape(loaded)
    allocated = value(before, "yunikorn_root_b_queue_resource", partition="default", state="allocated",
                      resource="memory")
    containers = value(before, "korral_partition_allocations", partition="default")
    cycles = value(before, "korral_partition_cycles", partition="default")
    allocation = allocate(loaded, "b1-metrics")
    during = scrape(loaded)
    assert value(during, "yunikorn_root_b_queue_resource", partition="default", state="allocated",
                 resource="memory") == allocated + 30
    assert value(during, "korral_partition_allocations", partition="default") == containers + 1
    assert value(during, "korral_partition_cycles", partition="default") > cycles
    # release it again so the shared stack keeps its documented workload
    loaded.rm.releases(release(allocation))

    def released() -> dict | None:
        fams = scrape(loaded)
        return fams if value(fams, "korral_partition_allocations", partition="default") == containers else None

    after = wait_until(released, 10, "the release shown in the metrics")
    assert value(after, "yunikorn_root_b_queue_resource", partition="default", state="allocated",
                 resource="memory") == allocated


def test_sorting_latency_per_level_counts_scheduling_cycles(loaded: Loaded) -> None:
    def cycles_by_level(fams: dict) -> dict[str, float]:
        return {s.labels["level"]: s.value for s in fams["yunikorn_scheduler_node_sorting_latency_milliseconds"]
                if s.name.endswith("_count") and s.labels.get("partition") == "default"}

    before = cycles_by_level(scrape(loaded))
    assert set(before) == {"queue", "app", "node"}
    allocation = allocate(loaded, "b1-sorting")
    after = cycles_by_level(scrape(loaded))
    assert all(after[level] > before[level] for level in before)  # the cycle that allocated was timed
    loaded.rm.releases(release(allocation))


def test_worker_stage_seconds_grow_with_a_request_in_every_stage(loaded: Loaded) -> None:
    def stages(fams: dict) -> dict[str, float]:
        return {s.labels["stage"]: s.value for s in fams["korral_worker_stage_seconds"]
                if s.labels.get("partition") == "default"}

    before = stages(scrape(loaded))
    assert set(before) == {"decode", "apply", "cycle", "respond", "send"}
    allocation = allocate(loaded, "b1-stages")
    after = stages(scrape(loaded))
    assert all(after[s] > before[s] for s in before), (before, after)  # the ask went through each stage
    loaded.rm.releases(release(allocation))
