"""The plot of a ``korral bench churn`` run: latency and backlog over time (matplotlib, `bench` extra).

Top: ask -> allocation latency, p50 and p99 of the allocations that arrived in each second
(log scale), with the p99 target. Bottom: the backlog (asks sent, not yet allocated). Each
arrival rate is a shaded band labelled with its rate; a band whose rate was not sustained
is red.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from common.series import percentile  # noqa: E402

__all__ = ["plot", "per_second"]


def per_second(latency: list[tuple[float, float]]) -> tuple[list[float], list[float], list[float]]:
    """(second, p50, p99) of the latencies (ms) grouped by the whole second they arrived in."""
    buckets: dict[int, list[float]] = {}
    for t, ms in latency:
        buckets.setdefault(int(t), []).append(ms)
    secs = sorted(buckets)
    return ([s + 0.5 for s in secs], [percentile(buckets[s], 50) for s in secs],
            [percentile(buckets[s], 99) for s in secs])


def plot(result: dict, path: Path) -> None:
    """Write the PNG of ``result`` (``churn_run``'s dict) to ``path``."""
    shape = result["shape"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, dpi=80)
    x, p50, p99 = per_second(result["series"]["latency"])
    top.plot(x, p50, label="p50", color="tab:blue", linewidth=1)
    top.plot(x, p99, label="p99", color="tab:orange", linewidth=1)
    top.axhline(result["p99_target_ms"], color="grey", linestyle="--", linewidth=0.8, label="p99 target")
    top.set_yscale("log")
    top.set_ylabel("ask → allocation (ms)")
    top.legend(loc="lower right", fontsize=8)
    bx = [t for t, _ in result["series"]["backlog"]]
    by = [b for _, b in result["series"]["backlog"]]
    bottom.plot(bx, by, color="tab:green", linewidth=1)
    bottom.set_ylabel("backlog (asks)")
    bottom.set_xlabel("seconds")
    for p in result["phases"]:
        start, end = p["start_s"], p["start_s"] + p["seconds"]
        for ax in (top, bottom):
            ax.axvspan(start, end, color="tab:green" if p["sustained"] else "tab:red", alpha=0.07)
        top.text(start + 0.3, 0.97, f"{p['rate']:,.0f}/s", transform=top.get_xaxis_transform(),
                 fontsize=8, va="top")
    top.set_title(f"korral bench churn: {shape['nodes']:,} nodes, {shape['running']:,} running, "
                  f"{shape['apps']:,} apps, {shape['partitions']} partition(s) — {result.get('date', '')}",
                  fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
