"""``korral bench compare``: finding YuniKorn's benchmark, interleaving, medians and ratios.

A stand-in anchor script (the real one is outside the repository and takes a minute) prints
what the real one prints; the Korral side is the real ``bench core`` row."""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from partition_worker import bench_compare


def _anchor(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "shared" / "anchors" / "yunikorn-core-bench"
    path.parent.mkdir(parents=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    bench_compare.configure(parser)
    return bench_compare.run(parser.parse_args(argv))


def test_the_anchor_is_found_beside_the_checkout_or_any_parent_of_it(tmp_path, monkeypatch):
    monkeypatch.delenv(bench_compare.ANCHOR_ENV, raising=False)
    anchor = _anchor(tmp_path, "exit 0\n")
    deep = tmp_path / "wt" / "perf" / "partition_worker" / "bench_compare.py"  # a worktree one level down
    assert bench_compare.find_anchor(start=deep) == anchor
    assert bench_compare.find_anchor(start=Path("/nonexistent/a/b.py")) is None


def test_the_flag_and_the_environment_variable_name_the_anchor(tmp_path, monkeypatch):
    monkeypatch.setenv(bench_compare.ANCHOR_ENV, str(tmp_path / "from-env"))
    assert bench_compare.find_anchor() == tmp_path / "from-env"
    assert bench_compare.find_anchor(str(tmp_path / "from-flag")) == tmp_path / "from-flag"


def test_a_missing_anchor_is_refused_naming_the_flag_and_the_variable(tmp_path, capsys):
    assert _run(["--anchor", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "nope") in err and "--anchor" in err and bench_compare.ANCHOR_ENV in err


def test_a_failing_anchor_fails_the_comparison_with_its_output(tmp_path, capsys):
    anchor = _anchor(tmp_path, "echo 'listen tcp 127.0.0.1:9080: bind: address already in use' >&2; exit 1\n")
    assert _run(["--anchor", str(anchor), "--nodes", "500", "--rounds", "1"]) == 1
    err = capsys.readouterr().err
    assert "failed (exit 1" in err and "address already in use" in err


def test_both_systems_are_run_interleaved_and_compared_by_their_medians(tmp_path, capsys):
    log = tmp_path / "calls"
    anchor = _anchor(tmp_path, f"echo run >> {log}\n"
                     "for n in 500 1000 2000 5000; do "
                     "echo \"{\\\"nodes\\\": $n, \\\"allocations_per_second\\\": 1000.0}\"; done\n")
    assert _run(["--anchor", str(anchor), "--nodes", "500", "--rounds", "2", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert log.read_text().count("run") == 2  # once per round
    assert row["nodes"] == 500 and row["yunikorn_rounds"] == [1000.0, 1000.0]
    assert len(row["korral_rounds"]) == 2 and row["korral_allocations_per_second"] > 0
    assert row["ratio"] == pytest.approx(row["korral_allocations_per_second"] / 1000.0, abs=0.01)


def test_summary_takes_medians_per_system_and_the_ratio_of_the_medians():
    rows = bench_compare.summarise([500], [{500: 10.0}, {500: 30.0}, {500: 20.0}],
                                   [{500: 60.0}, {500: 40.0}, {500: 100.0}])
    assert rows[0]["yunikorn_allocations_per_second"] == 20.0
    assert rows[0]["korral_allocations_per_second"] == 60.0
    assert rows[0]["ratio"] == 3.0 and rows[0]["round_ratios"] == [6.0, 1.33, 5.0]


def test_the_repository_does_not_carry_the_anchor():
    repo = Path(bench_compare.__file__).resolve().parents[1]
    copies = [p for d in ("common", "broker", "partition_worker", "rmproxy", "deploy", "docs", "tests")
              for p in (repo / d).rglob("yunikorn-core*")]
    assert not copies and not os.path.exists(repo / "shared")
