"""``korral bench compare``: YuniKorn's own core benchmark and ``korral bench core``, interleaved.

The anchor is YuniKorn core v1.2.0's ``BenchmarkScheduling`` built for this machine (outside the
repository: ``--anchor``, ``KORRAL_YUNIKORN_ANCHOR``, else ``shared/anchors/yunikorn-core-bench``
found beside the checkout or one of its parents). Each round runs both systems once, in
alternating order (so neither always runs on a warmer or quieter machine), over the node counts
the anchor reports; the result is the median of each system per node count and the ratio of
the medians, with every round's figures. The anchor binds YuniKorn's REST port 127.0.0.1:9080
while it runs: a second run at the same time fails, and says so.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
from pathlib import Path

__all__ = ["ANCHOR_ENV", "ANCHOR_NAME", "configure", "find_anchor", "run", "summarise"]

ANCHOR_ENV = "KORRAL_YUNIKORN_ANCHOR"
ANCHOR_NAME = Path("shared") / "anchors" / "yunikorn-core-bench"
ANCHOR_NODES = (500, 1000, 2000, 5000)
ANCHOR_TIMEOUT_S = 300


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--anchor", metavar="PATH",
                        help=f"YuniKorn's benchmark script (env {ANCHOR_ENV}; default: {ANCHOR_NAME} "
                             "beside the checkout or one of its parents)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3; medians)")
    parser.add_argument("--nodes", type=int, action="append", metavar="N", choices=ANCHOR_NODES,
                        help="node counts to compare (repeatable; default all the anchor runs: "
                             "500 1000 2000 5000)")
    parser.add_argument("--policy", choices=("fair", "binpacking"), default="fair",
                        help="Korral's node sort policy (default fair, YuniKorn's default)")
    parser.add_argument("--json", action="store_true", help="one JSON object per node count")


def find_anchor(explicit: str | None = None, start: Path | None = None) -> Path | None:
    """The anchor script: ``explicit``, else ``$KORRAL_YUNIKORN_ANCHOR``, else
    ``shared/anchors/yunikorn-core-bench`` in the checkout's parent or any ancestor of it
    (a worktree can sit one level deeper than the main checkout)."""
    given = explicit or os.environ.get(ANCHOR_ENV)
    if given:
        return Path(given).expanduser().resolve()
    here = (start or Path(__file__)).resolve()
    for d in here.parents:
        candidate = d / ANCHOR_NAME
        if candidate.is_file():
            return candidate
    return None


def run(args: argparse.Namespace) -> int:
    anchor = find_anchor(args.anchor)
    if anchor is None:
        print(f"korral bench compare: YuniKorn's benchmark not found: no {ANCHOR_NAME} beside this checkout "
              f"or its parents; give its path with --anchor or {ANCHOR_ENV}", file=sys.stderr)
        return 2
    if not anchor.is_file() or not os.access(anchor, os.X_OK):
        print(f"korral bench compare: YuniKorn's benchmark {anchor} is missing or not executable "
              f"(from --anchor or {ANCHOR_ENV})", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print("korral bench compare: --rounds must be at least 1", file=sys.stderr)
        return 2
    nodes = sorted(set(args.nodes or ANCHOR_NODES))
    from partition_worker.bench import scheduling_row
    ctx = multiprocessing.get_context("spawn")
    yk: list[dict[int, float]] = []
    kr: list[dict[int, float]] = []
    for i in range(args.rounds):
        steps = [("yunikorn", lambda: _anchor_round(anchor, nodes)),
                 ("korral", lambda: _korral_round(ctx, scheduling_row, nodes, args.policy))]
        if i % 2:
            steps.reverse()
        for name, fn in steps:
            try:
                rates = fn()
            except RuntimeError as exc:
                print(f"korral bench compare: {exc}", file=sys.stderr)
                return 1
            (yk if name == "yunikorn" else kr).append(rates)
            if not args.json:
                print(f"round {i + 1} {name:>8}: " + "  ".join(
                    f"{n}: {rates[n]:,.0f}/s" for n in nodes), file=sys.stderr, flush=True)
    rows = summarise(nodes, yk, kr)
    if args.json:
        for r in rows:
            print(json.dumps({**r, "policy": args.policy, "anchor": str(anchor)}), flush=True)
    else:
        _print_table(rows, args.rounds)
    return 0


def summarise(nodes: list[int], yk: list[dict[int, float]], kr: list[dict[int, float]]) -> list[dict]:
    """Per node count: each system's median allocations/s over the rounds, the ratio of the
    medians (Korral / YuniKorn) and every round's figures."""
    rows = []
    for n in nodes:
        y = [r[n] for r in yk]
        k = [r[n] for r in kr]
        my, mk = statistics.median(y), statistics.median(k)
        cpu = [r[-n] for r in kr if -n in r]
        rows.append({"nodes": n, "yunikorn_allocations_per_second": round(my, 1),
                     "korral_allocations_per_second": round(mk, 1),
                     "korral_allocations_per_cpu_second": round(statistics.median(cpu), 1) if cpu else None,
                     "ratio": round(mk / my, 2) if my else None,
                     "yunikorn_rounds": y, "korral_rounds": k,
                     "round_ratios": [round(a / b, 2) if b else None for a, b in zip(k, y)]})
    return rows


def _anchor_round(anchor: Path, nodes: list[int]) -> dict[int, float]:
    try:
        out = subprocess.run([str(anchor), "--json"], capture_output=True, text=True,
                             timeout=ANCHOR_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"YuniKorn's benchmark {anchor} did not finish in {ANCHOR_TIMEOUT_S} s") from None
    if out.returncode != 0:
        raise RuntimeError(f"YuniKorn's benchmark {anchor} failed (exit {out.returncode}; it needs "
                           f"127.0.0.1:9080 free): {out.stderr.strip()[-600:]}")
    rates = {}
    for line in out.stdout.splitlines():
        try:
            row = json.loads(line)
            rates[int(row["nodes"])] = float(row["allocations_per_second"])
        except (ValueError, KeyError, TypeError):
            continue
    missing = [n for n in nodes if n not in rates]
    if missing:
        raise RuntimeError(f"YuniKorn's benchmark {anchor} reported no allocation rate for "
                           f"{missing} nodes; its output: {out.stdout.strip()[-600:]!r}")
    return rates


def _korral_round(ctx, row_fn, nodes: list[int], policy: str) -> dict[int, float]:
    rates = {}
    for n in nodes:
        with ctx.Pool(1) as pool:  # a fresh process per row, as `korral bench core` runs it
            row = pool.apply(row_fn, (n, 10_000, policy))
        rates[n] = row["allocations_per_second"]
        rates[-n] = row["allocations_per_cpu_second"]  # by CPU time: the steadier figure, Korral's only
    return rates


def _print_table(rows: list[dict], rounds: int) -> None:
    print(f"median of {rounds} interleaved rounds, allocations/s (10,000 asks)")
    print(f"{'nodes':>6} {'YuniKorn 1.2':>13} {'Korral':>10} {'ratio':>6}   per-round ratios   (Korral per CPU second)")
    for r in rows:
        print(f"{r['nodes']:>6} {r['yunikorn_allocations_per_second']:>13,.0f} "
              f"{r['korral_allocations_per_second']:>10,.0f} {r['ratio']:>5.2f}x   "
              + " ".join(f"{x:.2f}" for x in r["round_ratios"])
              + f"   ({r['korral_allocations_per_cpu_second'] or 0:,.0f})", flush=True)
