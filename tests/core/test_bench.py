"""``korral bench core`` produces correct rows (tiny sizes here; real runs are `make bench`)."""

import json

import pytest

from partition_worker import bench

KEYS = {"nodes", "asks", "seconds", "allocations_per_second", "nodes_per_second", "peak_rss_bytes"}


@pytest.mark.parametrize("row", [bench.scheduling_row, bench.session_row], ids=["core", "session"])
@pytest.mark.parametrize("policy", ["fair", "binpacking"])
def test_a_row_allocates_every_ask_and_reports_the_keys(row, policy) -> None:
    r = row(20, 300, policy)
    assert KEYS <= set(r)
    assert (r["nodes"], r["asks"]) == (20, 300)
    assert r["allocations_per_second"] > 0 and r["peak_rss_bytes"] > 0


def test_memory_row_keeps_every_ask_pending() -> None:
    r = bench.memory_row(50, 1000)
    assert r["pending"] == 1000 and KEYS <= set(r)


def test_json_output_is_one_object_per_row(capsys) -> None:
    import argparse
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    assert bench.run(parser.parse_args(["--nodes", "10", "--asks", "100", "--json"])) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and KEYS <= set(json.loads(lines[0]))


def test_bad_flags_are_refused(capsys) -> None:
    import argparse
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    assert bench.run(parser.parse_args(["--nodes", "0"])) == 2
    assert "--nodes must be positive" in capsys.readouterr().err


@pytest.mark.parametrize("app_policy", ["fifo", "fair", "stateaware"])
def test_rows_with_many_apps_allocate_everything(app_policy) -> None:
    r = bench.scheduling_row(20, 300, "fair", 30, app_policy)
    assert (r["apps"], r["app_policy"], r["asks"]) == (30, app_policy, 300)


def test_memory_row_through_the_session_keeps_every_ask_pending() -> None:
    r = bench.memory_session_row(30, 500)
    assert r["pending"] == 500 and r["scheduling_states"] == 500 and KEYS <= set(r)


def test_preemption_row_places_every_preemptor_with_victims_only_from_low() -> None:
    from partition_worker.bench_preemption import preemption_row
    r = preemption_row(30, preemptors=100)
    assert (r["placed"], r["victims"]) == (100, 100)
    assert r["victims_only_from_low"] and r["low_kept_its_guarantee"]
    assert r["cycle_ms_median"] > 0 and r["cycles"] >= 100 // 32
    with pytest.raises(ValueError, match="do not fit in 90% of 30 nodes"):
        preemption_row(30, preemptors=271)


def test_the_node_terms_row_places_every_ask_where_every_check_passes() -> None:
    from partition_worker.bench_node_terms import _run, node_terms_row
    from partition_worker.core.feasibility import CHAIN, Purpose
    r = node_terms_row(100, 400)
    assert (r["nodes"], r["asks"]) == (100, 400) and r["cost_ratio"] > 0
    *_, p = _run(100, 400, "fair", terms=True)
    placed = {a.key: a for app in p.apps.values() for a in app.allocations.values()}
    assert len(placed) == 400
    gpu = [a for a in placed.values() if "dedicated" in a.tags.get("korral.io/tolerations", "")]
    assert gpu and all(p.nodes.get(a.node_id).taints for a in gpu)  # GPU pods on the GPU pool only
    assert all(not p.nodes.get(a.node_id).taints for a in placed.values() if a not in gpu)
    ported = [a.node_id for a in placed.values() if "korral.io/host-ports" in a.tags]
    assert ported and len(set(ported)) == len(ported)  # one pod with host port 9100 per node
    for app in p.apps.values():  # each would still pass every check but resources where it runs
        for a in app.allocations.values():
            ask = app.asks.get(a.key)
            if ask is not None:
                rejection = CHAIN.bind(ask, Purpose.RESERVE, p.apps, nodes=p.nodes).first_rejection(
                    p.nodes.get(a.node_id))
                assert rejection is None or rejection.stage in ("host-ports", "resources"), rejection


def test_the_interpod_row_places_every_ask_without_breaking_a_constraint() -> None:
    from partition_worker.bench_interpod import _run, _violations, interpod_row
    r = interpod_row(120, 600)
    assert (r["nodes"], r["asks"], r["violations"]) == (120, 600, 0) and r["rate_ratio"] > 0
    *_, p = _run(120, 600, "fair", constrained=True)
    assert len(p.ledger.allocations) == 600 and _violations(p) == 0
    *_, plain = _run(120, 600, "binpacking", constrained=False)
    assert _violations(plain) > 0  # packed without the checks, the same pods break them
    *_, packed = _run(120, 600, "binpacking", constrained=True)
    assert _violations(packed) == 0


def test_korral_bench_core_interpod_reports_the_ratio(capsys) -> None:
    import argparse

    from partition_worker import bench
    parser = argparse.ArgumentParser()
    bench.configure(parser)
    assert bench.run(parser.parse_args(["--interpod", "--nodes", "60", "--asks", "240"])) == 0
    out = capsys.readouterr().out
    assert "60 nodes, 240 asks with pod anti-affinity / topology spread" in out and "rate x" in out, out


def test_the_gangs_row_places_tagged_gangs_in_one_rack_and_blind_ones_not() -> None:
    from partition_worker.bench_gangs import gangs_row
    r = gangs_row(1000, lifetime=40, gangs=80)
    aware, blind = r["topology"], r["blind"]
    assert aware["gangs_placed"] == blind["gangs_placed"] == 80
    assert aware["fit_a_rack_placed_in_one"] == 1.0 and aware["decision_ms_median"] is not None
    assert blind["in_one_rack"] < 0.5 and blind["decision_ms_median"] is None
