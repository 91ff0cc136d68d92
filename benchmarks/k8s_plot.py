"""The plot of a ``korral bench k8s`` run over time (matplotlib, `bench` extra).

Top: pods created and bound per second. Middle: creation -> binding latency, p50 and p99 of the
pods bound in each second (log scale). Bottom: CPU used by each process (cores). The steady
window the figures are taken over is shaded.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from benchmarks.churn_plot import per_second  # noqa: E402

__all__ = ["plot", "rates", "cores"]


def rates(samples: list) -> tuple[list[float], list[float], list[float]]:
    """(time, created/s, bound/s) between consecutive samples, over one-second spans."""
    xs, created, bound = [], [], []
    last = None
    for s in samples:
        if last is None or s[0] - last[0] >= 1.0:
            if last is not None:
                span = s[0] - last[0]
                xs.append(s[0])
                created.append((s[1] - last[1]) / span)
                bound.append((s[2] - last[2]) / span)
            last = s
    return xs, created, bound


def cores(samples: list) -> dict[str, tuple[list[float], list[float]]]:
    """Per process: (time, cores used) over one-second spans; workers summed as ``worker``."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    last = None
    for s in samples:
        if last is None or s[0] - last[0] >= 1.0:
            if last is not None:
                span = s[0] - last[0]
                used: dict[str, float] = {}
                for name, v in s[4].items():
                    before = last[4].get(name)
                    if v is None or before is None:
                        continue
                    key = "worker" if name.startswith("worker") else name
                    used[key] = used.get(key, 0.0) + (v - before) / span
                for name, v in used.items():
                    xs, ys = out.setdefault(name, ([], []))
                    xs.append(s[0])
                    ys.append(v)
            last = s
    return out


def plot(result: dict, path: Path) -> None:
    """Write the PNG of ``result`` (``benchmarks.k8s.summarize``'s dict) to ``path``."""
    shape, series = result["shape"], result["series"]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True, dpi=80)
    x, created, bound = rates(series["samples"])
    top.plot(x, created, label="created/s", color="tab:grey", linewidth=1)
    top.plot(x, bound, label="bound/s", color="tab:blue", linewidth=1)
    top.axhline(shape["rate"], color="grey", linestyle="--", linewidth=0.8)
    top.set_ylabel("pods/s")
    top.legend(loc="lower right", fontsize=8)
    lx, p50, p99 = per_second(series["latency"])
    middle.plot(lx, p50, label="p50", color="tab:blue", linewidth=1)
    middle.plot(lx, p99, label="p99", color="tab:orange", linewidth=1)
    middle.set_yscale("log")
    middle.set_ylabel("create → bound (ms)")
    middle.legend(loc="upper right", fontsize=8)
    for name, (cx, cy) in sorted(cores(series["samples"]).items()):
        bottom.plot(cx, cy, label=name, linewidth=1)
    bottom.set_ylabel("CPU (cores)")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper right", fontsize=7, ncol=4)
    w0, w1 = result["window_s"]
    for ax in (top, middle, bottom):
        ax.axvspan(w0, w1, color="tab:green", alpha=0.06)
    top.set_title(f"korral bench k8s: {shape['nodes']:,} nodes, {result['created']:,} pods at {shape['rate']:,.0f}/s, "
                  f"bound {result['bound_per_second']:,.0f}/s — {result['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
