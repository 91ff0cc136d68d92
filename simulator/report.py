"""What the sim shows: the live progress view, the summary table, CSV/JSON files."""

from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from common.units import human_resource
from simulator.stats import queue_label

if TYPE_CHECKING:
    from simulator.cluster import SimCluster
    from simulator.stats import Stats

__all__ = ["LiveView", "print_summary", "print_final_view", "write_csv", "write_json"]


class LiveView:
    """A progress bar (tasks over) with allocations/s, pending, running, and a per-queue table."""

    def __init__(self, total_tasks: int, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]tasks"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"), console=console, transient=False)
        self.task_id = self.progress.add_task("tasks", total=total_tasks, info="")

    def renderable(self, cluster: "SimCluster", stats: "Stats", now: float) -> Group:
        counts = cluster.counts()
        over = sum(counts[k] for k in ("done", "rejected", "killed", "preempted", "failed"))
        info = (f"alloc/s {stats.rate(now):7.0f}  pending {counts['asked']:5d}  running {counts['running']:5d}"
                f"  violations {len(stats.violations)}")
        # re-submitted victims of preemption add tasks: the total grows
        self.progress.update(self.task_id, completed=over, total=sum(counts.values()), info=info)
        table = Table(box=None, pad_edge=False)
        for col in ("queue", "running", "share", "allocations"):
            table.add_column(col, justify="left" if col == "queue" else "right")
        shares = stats.shares(cluster)
        labels = sorted(set(shares) | set(stats.per_queue_allocations))
        run_counts = {queue_label(*k): v for k, v in _running_counts(cluster).items()}
        for label in labels:
            table.add_row(label, str(run_counts.get(label, 0)), f"{shares.get(label, 0.0):.0%}",
                          str(stats.per_queue_allocations.get(label, 0)))
        return Group(self.progress, table)


def _running_counts(cluster: "SimCluster") -> dict[tuple[str, str], int]:
    with cluster.lock:
        out: dict[tuple[str, str], int] = {}
        for t in cluster.tasks.values():
            if t.state == "running":
                out[t.app.queue] = out.get(t.app.queue, 0) + 1
        return out


def print_summary(summary: dict, console: Console, rest_address: str = "") -> None:
    head = Table(title=f"korral sim: {summary['workload']} (seed {summary['seed']})", show_header=False)
    head.add_column("what")
    head.add_column("value", justify="right")
    head.add_row("duration", f"{summary['seconds']:.1f} s")
    nodes = summary["nodes"]
    head.add_row("nodes accepted / planned", f"{nodes['accepted']} / {nodes['planned']}"
                 + (f"  ({nodes['rejected']} rejected)" if nodes["rejected"] else ""))
    head.add_row("apps by final state", ", ".join(f"{k} {v}" for k, v in sorted(summary["apps"].items())))
    head.add_row("tasks by state", ", ".join(f"{k} {v}" for k, v in summary["tasks"].items() if v))
    head.add_row("allocations", str(summary["allocations"]))
    head.add_row("throughput", _fmt(summary["allocations_per_second"], " alloc/s"))
    head.add_row("ask→allocation p50 / p99 / max",
                 f"{_fmt(summary['latency_p50_ms'], ' ms')} / {_fmt(summary['latency_p99_ms'], ' ms')}"
                 f" / {_fmt(summary['latency_max_ms'], ' ms')}")
    ph = summary["placeholders"]
    if any(ph.values()):
        head.add_row("gang placeholders", ", ".join(f"{k} {v}" for k, v in ph.items()))
    if summary["preempted"]:
        head.add_row("tasks preempted", str(summary["preempted"]))
    head.add_row("violations", str(len(summary["violations"])))
    console.print(head)
    queues = Table(title="per queue (share = dominant share of the partition, sampled each second)")
    for col in ("queue", "allocations", "preempted", "mean share", "max share"):
        queues.add_column(col, justify="left" if col == "queue" else "right")
    for q, e in summary["queues"].items():
        queues.add_row(q, str(e["allocations"]), str(e["preempted"]), f"{e['mean_share']:.1%}",
                       f"{e['max_share']:.1%}")
    console.print(queues)
    if summary["limit_peaks"]:
        peaks = Table(title="user/group limits: peak usage of each limited user or group per queue")
        peaks.add_column("queue, user or group")
        peaks.add_column("peak", justify="right")
        for who, peak in summary["limit_peaks"].items():
            peaks.add_row(who, human_resource(peak))
        console.print(peaks)
    for change in summary.get("config_changes", []):
        console.print(escape(f"the config the scheduler serves changed at {change['t']:.2f}s ({change['by']}): "
                             f"checksum {change['old'][:12]} -> {change['new'][:12]}; the queue max and user/group "
                             "limits were checked against it from then on"))
    if summary["violations"]:
        console.print(f"[bold red]{len(summary['violations'])} violation(s):[/]")
        for v in summary["violations"][:50]:
            console.print(f"  [red]{v['kind']}[/] at {v['t']:.2f}s: {v['message']}")
        if len(summary["violations"]) > 50:
            console.print(f"  ... and {len(summary['violations']) - 50} more (see --json)")
    else:
        console.print("[green]no violations: no node over-committed, no unknown ask, no key beyond "
                      "maxAllocations, no queue over its max, no user or group over its limit, every "
                      "placeholder replaced atomically on its node, no protected victim, no preemption "
                      "loop[/]")
    if rest_address:
        console.print(f"scheduler state: http://{rest_address}/ws/v1/partitions  (web UI: http://{rest_address}/)")


def print_final_view(views: dict, rm_id: str, console: Console) -> None:
    """What ran, as the scheduler showed it: each partition at its busiest (the queue tree with
    usage against guaranteed and max), and the partitions at the end of the run, read while the
    RM was still registered."""
    for name, (at, part) in sorted((views.get("busiest") or {}).items()):
        _print_partition(part, rm_id, console, f"{at:.0f}s into the run, its busiest view")
    end = views.get("end") or {}
    if "error" in end:
        console.print(f"[yellow]cluster view at the end: unavailable ({escape(end['error'])})[/]")
        return
    for part in end.get("partitions", []):
        cap = part["capacity"]
        apps = {k: v for k, v in part["applications"].items() if v and k != "total"}
        console.print(escape(f"[{rm_id}]{part['name']} at the end, before the RM unregistered: "
                             f"{human_resource(cap.get('capacity'))} in all, {_in_use(cap.get('usedCapacity'))}; "
                             "applications: "
                             + (", ".join(f"{k} {v}" for k, v in sorted(apps.items())) or "none left")))


def _in_use(used: dict | None) -> str:
    return f"{human_resource(used)} in use" if used else "nothing in use"


def _print_partition(part: dict, rm_id: str, console: Console, when: str) -> None:
    used = part["queues"].get("allocatedResource")  # of the same moment as the queues below
    table = Table(title=escape(f"[{rm_id}]{part['name']}, {when}: {_in_use(used)} of "
                               f"{human_resource(part['capacity'].get('capacity'))}"))
    for col in ("queue", "running apps", "allocated", "guaranteed", "max"):
        table.add_column(col, justify="left" if col == "queue" else "right")

    def rows(q: dict, depth: int) -> None:
        table.add_row("  " * depth + q["queuename"], str(q.get("runningApps", 0)),
                      human_resource(q.get("allocatedResource")), human_resource(q.get("guaranteedResource")),
                      human_resource(q.get("maxResource")))
        for child in q.get("children") or []:
            rows(child, depth + 1)

    rows(part["queues"], 0)
    console.print(table)


def _fmt(value, unit: str) -> str:
    return "n/a" if value is None else f"{value:,.1f}{unit}"


def write_json(path: str, summary: dict, timeline: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"summary": summary, "timeline": timeline}, f, indent=2)


def write_csv(path: str, timeline: list[dict]) -> None:
    """One row per second: t, running, pending, done, allocations_per_second, share:<queue>..."""
    labels = sorted({q for row in timeline for q in row["shares"]})
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "running", "pending", "done", "allocations_per_second"] + [f"share:{q}" for q in labels])
        for row in timeline:
            w.writerow([row["t"], row["running"], row["pending"], row["done"], row["allocations_per_second"]]
                       + [row["shares"].get(q, 0.0) for q in labels])
