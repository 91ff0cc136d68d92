"""korral bench e2e's row logic, run small against the fake scheduler (not a timing test)."""

from __future__ import annotations

import argparse
import json

from benchmarks import e2e as bench_e2e


def test_a_row_reports_every_documented_key_with_sane_values(fake):
    row = bench_e2e.e2e_row(fake.address, nodes=20, asks=200, rtt_samples=5)
    assert row["nodes"] == 20 and row["asks"] == 200
    assert row["seconds"] > 0 and row["allocations_per_second"] > 0 and row["nodes_per_second"] > 0
    assert 0 < row["latency_p50_ms"] <= row["latency_p99_ms"]
    assert row["single_ask_samples"] == 5 and row["single_ask_p50_ms"] > 0
    # the round-trip asks were released; the burst filled the nodes exactly as sized
    assert len(fake.allocs) == 200


def test_json_output_has_the_keys_of_the_issue_and_null_core_when_skipped(fake, capsys):
    parser = argparse.ArgumentParser()
    bench_e2e.configure(parser)
    args = parser.parse_args(["--si-address", fake.address, "--nodes", "10", "--asks", "50", "--json",
                              "--rtt-samples", "2", "--no-core"])
    assert bench_e2e.run(args) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("nodes", "asks", "seconds", "allocations_per_second", "nodes_per_second", "latency_p50_ms",
                "latency_p99_ms", "core_allocations_per_second", "ratio_to_core"):
        assert key in row
    assert row["core_allocations_per_second"] is None and row["ratio_to_core"] is None


def test_a_refused_registration_fails_the_bench_with_the_reason(fake, capsys):
    fake.refuse_register = "registration of RM failed: broken"
    parser = argparse.ArgumentParser()
    bench_e2e.configure(parser)
    args = parser.parse_args(["--si-address", fake.address, "--nodes", "10", "--no-core"])
    assert bench_e2e.run(args) == 1
    assert "registration of RM failed: broken" in capsys.readouterr().err
