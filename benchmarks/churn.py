"""``korral bench churn``: a cluster at steady state, tasks arriving and ending, through the real stack.

The RM is ``si_client`` against a stack started with ``korral up`` (one worker per
partition). Set-up: the nodes, the apps, then ``--running`` tasks placed (the cluster at
steady state). Then for each arrival rate in ``--rates``, for ``--seconds``: tasks arrive
at that fixed rate (sent every ``TICK`` with the releases due), each runs for an exponential
duration of mean ``running / rate`` (so completions balance arrivals; the running tasks'
remaining times are drawn again when the rate changes, which exponential durations allow),
and the RM releases it when it ends. Workload: ``churn_workload`` (seeded).

Measured per rate, at the RM: ask -> allocation latency p50/p99/max (each ask timed from its
send to its allocation's arrival), the backlog (asks sent, not yet allocated) every
``SAMPLE`` s with its trend (least-squares slope), and CPU seconds per process (the stack's
from /proc, the RM's own process time). A rate is sustained when p99 <= ``P99_TARGET_MS``
and the backlog is flat (it grows by less than ``FLAT_FRACTION`` of the arrival rate). The
ladder stops after the first rate not sustained. Output: a table (or ``--json``), and
``churn-<time>.json`` and a plot ``churn-<time>.png`` (latency and backlog over time) in ``--out``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import si_pb2
from common.constants import CPU, MEMORY, NODE_PARTITION
from common.gcpause import SteadyCollector
from common.si_resource import fill_si_resource
from benchmarks.churn_workload import ChurnShape, TaskSource, config_yaml
from benchmarks.cpu import cpu_delta, cpu_snapshot
from common.series import percentile, slope
from si_client.callback import ResourceManagerCallback

__all__ = ["configure", "run", "churn_run", "phase_summary"]

RM_ID = "korral-churn"
TICK = 0.002  # seconds between sends of the due arrivals and releases
SAMPLE = 0.25  # seconds between backlog samples
P99_TARGET_MS = 20.0
FLAT_FRACTION = 0.01  # a backlog growing by more than 1 % of the arrival rate is not flat
FILL_BATCH = 5_000
DEFAULT_RATES = (500, 1000, 2000, 3000, 4000)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", default=",".join(map(str, DEFAULT_RATES)),
                        help="arrival rates in tasks/s, ascending, comma-separated (default 500,1000,2000,3000,4000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per rate (default 20)")
    for flag, default, text in (
            ("--nodes", 5_000, "nodes (default 5000)"),
            ("--running", 50_000, "running tasks at steady state (default 50000)"),
            ("--apps", 1_000, "applications (default 1000, in 100 leaf queues)"),
            ("--partitions", 1, "partitions, each on its own worker (default 1); nodes and apps split evenly"),
            ("--seed", 1, "workload seed (default 1)")):
        parser.add_argument(flag, type=int, default=default, help=text)
    parser.add_argument("--all-rates", action="store_true", help="run every rate, not only up to the first failure")
    parser.add_argument("--out", default=".state/churn",
                        help="directory for the JSON and the PNG (default .state/churn)")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG (matplotlib is in the `bench` extra)")
    parser.add_argument("--json", action="store_true", help="one JSON object per rate")


def phase_summary(rate: float, latencies_ms: list[float], backlog: list[tuple[float, float]],
                  seconds: float) -> dict:
    """Latency percentiles, backlog trend and the verdict of one rate's phase."""
    trend = slope(backlog)
    p99 = percentile(latencies_ms, 99)
    flat = trend <= FLAT_FRACTION * rate
    return {"rate": rate, "seconds": round(seconds, 2), "allocations": len(latencies_ms),
            "latency_p50_ms": _r(percentile(latencies_ms, 50)), "latency_p99_ms": _r(p99),
            "latency_max_ms": _r(max(latencies_ms) if latencies_ms else None),
            "backlog_mean": round(sum(b for _, b in backlog) / len(backlog), 1) if backlog else 0,
            "backlog_max": max((b for _, b in backlog), default=0),
            "backlog_end": backlog[-1][1] if backlog else 0,
            "backlog_slope_per_s": round(trend, 2), "backlog_flat": flat,
            "sustained": flat and p99 is not None and p99 <= P99_TARGET_MS}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


@dataclass
class _ChurnRM(ResourceManagerCallback):
    """The RM's books: asks in flight (send time), running tasks and when they end."""

    source: TaskSource
    cond: threading.Condition = field(default_factory=threading.Condition)
    rate: float = 1.0
    sent_at: dict[str, float] = field(default_factory=dict)  # ask key -> send time
    running: dict[str, si_pb2.Allocation] = field(default_factory=dict)
    ends: list[tuple[float, str]] = field(default_factory=list)  # heap of (end time, key)
    latency: list[tuple[float, float]] = field(default_factory=list)  # (arrival time, ms)
    nodes_accepted: int = 0
    apps_accepted: int = 0
    errors: list[str] = field(default_factory=list)

    def update_allocation(self, response) -> None:
        now = time.perf_counter()
        with self.cond:
            for a in response.new:
                sent = self.sent_at.pop(a.allocationKey, None)
                if sent is None:
                    self.errors.append(f"allocation for unknown ask {a.allocationKey}")
                    continue
                self.latency.append((now, (now - sent) * 1000))
                self.running[a.allocationKey] = a
                heapq.heappush(self.ends, (now + self.source.duration(self.rate), a.allocationKey))
            for r in response.released:
                if r.terminationType != si_pb2.STOPPED_BY_RM:  # the scheduler's own (preemption, timeout)
                    self.running.pop(r.allocationKey, None)
            for r in response.rejected:
                self.sent_at.pop(r.allocationKey, None)
                self.errors.append(f"ask {r.allocationKey} rejected: {r.reason}")
            self.cond.notify_all()

    def update_node(self, response) -> None:
        with self.cond:
            self.nodes_accepted += len(response.accepted)
            self.errors += [f"node {n.nodeID} rejected: {n.reason}" for n in response.rejected]
            self.cond.notify_all()

    def update_application(self, response) -> None:
        with self.cond:
            self.apps_accepted += len(response.accepted)
            self.errors += [f"app {a.applicationID} rejected: {a.reason}" for a in response.rejected]
            self.cond.notify_all()

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: predicate(self) or bool(self.errors), timeout):
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
            if self.errors:
                raise RuntimeError(f"{what}: {len(self.errors)} errors, e.g. {self.errors[0]}")

    def set_rate(self, rate: float, now: float) -> None:
        """Arrivals at ``rate`` from now: every running task's remaining time is drawn again."""
        with self.cond:
            self.rate = rate
            self.ends = [(now + self.source.duration(rate), k) for _, k in self.ends]
            heapq.heapify(self.ends)

    def due(self, now: float, arrivals: int, shape: ChurnShape) -> si_pb2.AllocationRequest | None:
        """The request for ``arrivals`` new tasks and the tasks ended by ``now``."""
        req = si_pb2.AllocationRequest(rmID=RM_ID)
        with self.cond:
            ends = self.ends
            while ends and ends[0][0] <= now:
                _, key = heapq.heappop(ends)
                a = self.running.pop(key, None)
                if a is not None:
                    req.releases.allocationsToRelease.add(
                        partitionName=a.partitionName, applicationID=a.applicationID, UUID=a.UUID,
                        allocationKey=key, terminationType=si_pb2.STOPPED_BY_RM, message="task completed")
            for _ in range(arrivals):
                t = self.source.next_task()
                ask = req.asks.add(allocationKey=t.key, applicationID=f"app-{t.app_index}",
                                   partitionName=shape.app_partition(t.app_index), maxAllocations=1)
                fill_si_resource(ask.resourceAsk, {MEMORY: t.memory, CPU: t.vcore})
            sent = time.perf_counter()
            for ask in req.asks:
                self.sent_at[ask.allocationKey] = sent
        return req if req.asks or req.releases.allocationsToRelease else None

    def backlog(self) -> int:
        with self.cond:
            return len(self.sent_at)


def _setup(api, rm: _ChurnRM, shape: ChurnShape, fill_rate: float) -> None:
    ugi = [si_pb2.UserGroupInformation(user=shape.user(i)) for i in range(shape.apps)]
    api.update_application(si_pb2.ApplicationRequest(rmID=RM_ID, new=[
        si_pb2.AddApplicationRequest(applicationID=f"app-{i}", queueName=shape.leaf(i),
                                     partitionName=shape.app_partition(i), ugi=ugi[i]) for i in range(shape.apps)]))
    rm.wait(lambda r: r.apps_accepted >= shape.apps, 120, f"{shape.apps} apps accepted")
    nodes = si_pb2.NodeRequest(rmID=RM_ID)
    for i in range(shape.nodes):
        n = nodes.nodes.add(nodeID=f"node-{i:05d}", action=si_pb2.NodeInfo.CREATE,
                            attributes={NODE_PARTITION: shape.node_partition(i)})
        fill_si_resource(n.schedulableResource, {MEMORY: shape.node_memory, CPU: shape.node_vcore})
    api.update_node(nodes)
    rm.wait(lambda r: r.nodes_accepted >= shape.nodes, 120, f"{shape.nodes} nodes accepted")
    rm.set_rate(fill_rate, time.perf_counter())
    for start in range(0, shape.running, FILL_BATCH):
        req = rm.due(time.perf_counter(), min(FILL_BATCH, shape.running - start), shape)
        api.update_allocation(req)
        rm.wait(lambda r: len(r.sent_at) < FILL_BATCH, 300, "the fill's allocations")
    rm.wait(lambda r: not r.sent_at, 300, f"{shape.running} running tasks")


def churn_run(si_address: str, shape: ChurnShape, rates: list[float], seconds: float, seed: int,
              pids: dict[str, int], all_rates: bool = False, report=None) -> dict:
    """Set up the steady state, then each rate for ``seconds``; returns the results (see module doc)."""
    from si_client import SchedulerAPI

    rm = _ChurnRM(TaskSource(shape, seed))
    api = SchedulerAPI(si_address)
    phases: list[dict] = []
    backlog: list[tuple[float, float]] = []
    collector = SteadyCollector(full_every=3600)
    try:
        api.register_resource_manager(si_pb2.RegisterResourceManagerRequest(
            rmID=RM_ID, policyGroup="queues", config=config_yaml(shape)), rm)
        t_fill = time.perf_counter()
        _setup(api, rm, shape, rates[0])
        fill_secs = time.perf_counter() - t_fill
        rm.latency.clear()
        start = time.perf_counter()
        for rate in rates:
            t0 = time.perf_counter()
            rm.set_rate(rate, t0)
            first_latency = len(rm.latency)
            cpu0 = cpu_snapshot(pids)
            sent = 0
            phase_backlog: list[tuple[float, float]] = []
            next_sample = t0
            while (now := time.perf_counter()) < t0 + seconds:
                collector.after_turn()  # the RM's own full GC passes would count as latency
                arrivals = int((now - t0) * rate) - sent
                req = rm.due(now, arrivals, shape)
                sent += arrivals
                if req is not None:
                    api.update_allocation(req)
                if now >= next_sample:
                    point = (now - start, float(rm.backlog()))
                    phase_backlog.append((point[0] - (t0 - start), point[1]))
                    backlog.append(point)
                    next_sample += SAMPLE
                time.sleep(max(0.0, TICK - (time.perf_counter() - now)))
            cpu = cpu_delta(cpu0, cpu_snapshot(pids))
            with rm.cond:
                lat = [ms for _, ms in rm.latency[first_latency:]]
                running = len(rm.running)
            phase = phase_summary(rate, lat, phase_backlog, time.perf_counter() - t0)
            phase.update(sent=sent, running_end=running, cpu_seconds=cpu, start_s=round(t0 - start, 2),
                         loadavg_1m=os.getloadavg()[0])  # a shared machine's other work shows in p99
            phases.append(phase)
            if report is not None:
                report(phase)
            if not phase["sustained"] and not all_rates:
                break
        if rm.errors:
            raise RuntimeError(f"{len(rm.errors)} errors, e.g. {rm.errors[0]}")
        with rm.cond:
            latency = [(round(t - start, 4), round(ms, 3)) for t, ms in rm.latency]
    finally:
        collector.release()
        api.close()
    best = max((p["rate"] for p in phases if p["sustained"]), default=None)
    return {"shape": shape.__dict__, "seed": seed, "fill_seconds": round(fill_secs, 2), "phases": phases,
            "highest_sustained_rate": best, "p99_target_ms": P99_TARGET_MS,
            "series": {"latency": latency, "backlog": backlog}}


def run(args: argparse.Namespace) -> int:
    try:
        rates = [float(x) for x in args.rates.split(",") if x.strip()]
        shape = ChurnShape(nodes=args.nodes, running=args.running, apps=args.apps, partitions=args.partitions)
    except ValueError as exc:
        print(f"korral bench churn: {exc}", file=sys.stderr)
        return 2
    if not rates or any(r <= 0 for r in rates) or rates != sorted(rates):
        print(f"korral bench churn: --rates must be positive and ascending, got {args.rates!r}", file=sys.stderr)
        return 2
    if args.seconds <= 0:
        print("korral bench churn: --seconds must be positive", file=sys.stderr)
        return 2
    from common.cli.stack.throwaway import LocalStack
    from si_client import SchedulerError

    def report(phase: dict) -> None:
        print(json.dumps(phase) if args.json else _line(phase), flush=True)

    try:
        with LocalStack(shape.partitions, extra=("--log-level", "warning")) as stack:
            result = churn_run(stack.si_address, shape, rates, args.seconds, args.seed,
                               stack.processes(), args.all_rates, report)
    except (RuntimeError, SchedulerError) as exc:
        print(f"korral bench churn: {exc}", file=sys.stderr)
        return 1
    result["date"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / time.strftime(f"churn-{shape.partitions}p-%Y%m%d-%H%M%S", time.gmtime())
    stem.with_suffix(".json").write_text(json.dumps(result))
    written = [str(stem.with_suffix(".json"))]
    if not args.no_plot:
        try:
            from benchmarks.churn_plot import plot
        except ImportError as exc:
            print(f"korral bench churn: no plot ({exc}; install the bench extra: pip install -e '.[bench]')",
                  file=sys.stderr)
        else:
            plot(result, stem.with_suffix(".png"))
            written.append(str(stem.with_suffix(".png")))
    best = result["highest_sustained_rate"]
    print(f"highest rate with p99 <= {P99_TARGET_MS:.0f} ms and a flat backlog: "
          f"{'none' if best is None else f'{best:,.0f} tasks/s'}; results: {', '.join(written)}",
          file=sys.stderr if args.json else sys.stdout)
    return 0


def _line(p: dict) -> str:
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in p["cpu_seconds"].items() if v is not None)
    return (f"{p['rate']:>7,.0f}/s  p50 {p['latency_p50_ms']} ms  p99 {p['latency_p99_ms']} ms  "
            f"max {p['latency_max_ms']} ms  backlog mean {p['backlog_mean']} max {p['backlog_max']:.0f} "
            f"slope {p['backlog_slope_per_s']}/s ({'flat' if p['backlog_flat'] else 'GROWING'})  "
            f"{'ok' if p['sustained'] else 'NOT sustained'}  cpu s: {cpu}  load {p['loadavg_1m']:.1f}")
