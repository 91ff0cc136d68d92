"""``korral bench e2e``: YuniKorn's core benchmark scenario through the whole stack.

Path measured: ``si_client`` -> gRPC -> rmproxy -> broker -> partition worker
and back, on a stack started with ``korral up --detach`` (temp state dir, free
loopback ports) unless ``--si-address`` names a running one.

Scenario per row (as ``korral bench core``): queues ``root.a`` / ``root.b``, apps
``app-a`` / ``app-b``, N nodes each sized for asks/N + 1 asks of
``{memory: 10, vcore: 1}``; the asks go out as one AllocationRequest per app.
Measured: seconds to register the N nodes (send -> last accept received),
seconds from sending the asks to receiving the last allocation, allocations/s,
p50/p99 ask -> allocation latency (every ask is sent at t0, so an ask's latency
is when its allocation arrived), and, before the burst, single-ask round trips
on the idle cluster (ask sent -> allocation received, then released).
``core_allocations_per_second`` comes from ``korral bench core --json --nodes N``
run as a subprocess in the same invocation, before the stack starts.
``--si-revision`` picks the SI revision the RM speaks; ``both`` runs every row twice, once per
revision, in alternating order, and gives the v1.8 row ``ratio_to_seed``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from common import si_pb2, si_v18_pb2
from common.constants import CPU, MEMORY
from common.cli.stack.throwaway import LocalStack
from common.si_resource import fill_si_resource
from common.bench_scenario import CONFIG_YAML, node_request
from benchmarks.breakdown import Breakdown, format_breakdown
from common.series import percentile
from si_client.callback import ResourceManagerCallback

__all__ = ["configure", "run", "e2e_row"]

DEFAULT_NODES = (500, 1000, 2000, 5000)
DEFAULT_ASKS = 10_000
RM_ID = "korral-bench"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, action="append", metavar="N",
                        help="node count of one row (repeatable; default 500 1000 2000 5000)")
    parser.add_argument("--asks", type=int, default=DEFAULT_ASKS, help="asks per row (default 10000)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument("--si-address", default=None,
                        help="use this running stack instead of starting one with `korral up`")
    parser.add_argument("--workers", type=int, default=1, help="workers of the started stack (default 1)")
    parser.add_argument("--rtt-samples", type=int, default=200,
                        help="single-ask round trips per row on the idle cluster (default 200)")
    parser.add_argument("--no-core", action="store_true",
                        help="skip the in-process core row (core_allocations_per_second: null)")
    parser.add_argument("--rest-readers", type=int, default=0, metavar="N",
                        help="also run each burst again while N threads read the REST API in a loop, then once "
                             "more without; rest_slowdown = 1 - rate with reads / mean rate of the two without")
    parser.add_argument("--rest-address", default=None,
                        help="REST address of the stack given with --si-address (for --rest-readers, --breakdown)")
    parser.add_argument("--si-revision", choices=("seed", "v1.8", "both"), default="seed",
                        help="the SI revision the bench RM speaks; both: each row once as seed and once as "
                             "v1.8, in alternating order (default: seed)")
    parser.add_argument("--breakdown", action="store_true",
                        help="where each burst's time goes: CPU per process, the worker's stages (decode, apply, "
                             "cycle, respond, send), the RM's encode and decode (benchmarks/breakdown.py)")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


@dataclass
class _BenchRM(ResourceManagerCallback):
    """Callback that timestamps every verdict and allocation as it arrives."""

    v18: bool = False  # the RM speaks SI v1.8
    cond: threading.Condition = field(default_factory=threading.Condition)
    nodes_accepted: int = 0
    nodes_rejected: list[str] = field(default_factory=list)
    last_node_at: float = 0.0
    apps_accepted: set[str] = field(default_factory=set)
    apps_rejected: dict[str, str] = field(default_factory=dict)
    allocations: list[si_pb2.Allocation] = field(default_factory=list)
    alloc_times: list[float] = field(default_factory=list)
    rejected_asks: list[str] = field(default_factory=list)

    def update_node(self, response):
        now = time.perf_counter()
        with self.cond:
            self.nodes_accepted += len(response.accepted)
            self.nodes_rejected += [f"{n.nodeID}: {n.reason}" for n in response.rejected]
            self.last_node_at = now
            self.cond.notify_all()

    def update_application(self, response):
        with self.cond:
            self.apps_accepted.update(a.applicationID for a in response.accepted)
            self.apps_rejected.update({a.applicationID: a.reason for a in response.rejected})
            self.cond.notify_all()

    def update_allocation(self, response):
        now = time.perf_counter()
        with self.cond:
            if response.new:
                self.allocations.extend(response.new)
                self.alloc_times.extend([now] * len(response.new))
            rejected = response.rejectedAllocations if self.v18 else response.rejected
            self.rejected_asks += [f"{r.allocationKey}: {r.reason}" for r in rejected]
            self.cond.notify_all()

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: predicate(self), timeout):
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def _ask(key: str, app: str, v18: bool = False, memory: int = 10, vcore: int = 1):
    """A seed AllocationAsk, or for v1.8 an Allocation without node."""
    if v18:
        a = si_v18_pb2.Allocation(allocationKey=key, applicationID=app, partitionName="default")
        fill_si_resource(a.resourcePerAlloc, {MEMORY: memory, CPU: vcore})
        return a
    a = si_pb2.AllocationAsk(allocationKey=key, applicationID=app, partitionName="default", maxAllocations=1)
    fill_si_resource(a.resourceAsk, {MEMORY: memory, CPU: vcore})
    return a


def _asks_request(asks: list, v18: bool):
    return si_v18_pb2.AllocationRequest(rmID=RM_ID, allocations=asks) if v18 else \
        si_pb2.AllocationRequest(rmID=RM_ID, asks=asks)


REST_READS = ("/ws/v1/partitions", "/ws/v1/partition/default/queues",
              "/ws/v1/partition/default/nodes?limit=100", "/ws/v1/partition/default/application/app-a",
              "/ws/v1/scheduler/healthcheck", "/ws/v1/metrics")


class _RestReaders:
    """Threads that read the REST API in a loop (a dashboard and scripts polling hard)."""

    def __init__(self, rest_address: str, threads: int) -> None:
        self.base = f"http://{rest_address}"
        self.stop = threading.Event()
        self.reads = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        import urllib.request

        i = 0
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.base + REST_READS[i % len(REST_READS)], timeout=10) as r:
                    r.read()
                self.reads += 1
            except OSError:
                pass
            i += 1

    def __enter__(self) -> "_RestReaders":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)


def e2e_row(si_address: str, nodes: int, asks: int, rtt_samples: int = 200, rest_address: str = "",
            rest_readers: int = 0, si_revision: str = "seed", breakdown: Breakdown | None = None) -> dict:
    """One row against the stack at ``si_address`` (re-registers ``korral-bench``, wiping its state),
    the RM speaking ``si_revision``; with ``breakdown``, where the burst's time went."""
    from si_client import SchedulerAPI

    v18 = si_revision == "v1.8"
    pb = si_v18_pb2 if v18 else si_pb2
    rm = _BenchRM(v18=v18)
    api = SchedulerAPI(si_address, si_revision=si_revision)
    try:
        api.register_resource_manager(
            pb.RegisterResourceManagerRequest(rmID=RM_ID, policyGroup="queues", config=CONFIG_YAML), rm)
        ugi = pb.UserGroupInformation(user="bench")
        api.update_application(pb.ApplicationRequest(new=[
            pb.AddApplicationRequest(applicationID="app-a", queueName="root.a", partitionName="default", ugi=ugi),
            pb.AddApplicationRequest(applicationID="app-b", queueName="root.b", partitionName="default", ugi=ugi),
        ]))
        rm.wait(lambda r: len(r.apps_accepted) + len(r.apps_rejected) == 2, 30, "the two apps' verdicts")
        if rm.apps_rejected:
            raise RuntimeError(f"apps rejected: {rm.apps_rejected}")
        nreq = pb.NodeRequest.FromString(node_request(nodes, asks).SerializeToString())  # one schema
        t0 = time.perf_counter()
        api.update_node(nreq)
        rm.wait(lambda r: r.nodes_accepted + len(r.nodes_rejected) >= nodes, 120, f"{nodes} node verdicts")
        node_secs = rm.last_node_at - t0
        if rm.nodes_rejected:
            raise RuntimeError(f"{len(rm.nodes_rejected)} nodes rejected, e.g. {rm.nodes_rejected[0]}")

        before = breakdown.worker_time() if breakdown is not None else None
        rtts = _round_trips(api, rm, rtt_samples)
        # the worker's share of one round trip (its ask and its release), the rest is the wire
        rtt_worker_ms = None if before is None or not rtts else round(
            (breakdown.worker_time() - before) * 1000 / (len(rtts) + 5), 3)

        per_app: dict[str, list] = {"app-a": [], "app-b": []}
        for i in range(asks):
            app = "app-a" if i % 2 == 0 else "app-b"
            per_app[app].append(_ask(f"ask-{i}", app, v18))
        requests = {app: _asks_request(items, v18) for app, items in per_app.items()}
        base = len(rm.allocations)
        readers = _RestReaders(rest_address, rest_readers) if rest_readers else None
        if readers is not None:
            readers.__enter__()
        if breakdown is not None:
            breakdown.start()
        t_send = time.perf_counter()
        try:
            for req in requests.values():
                api.update_allocation(req)
            rm.wait(lambda r: len(r.allocations) - base + len(r.rejected_asks) >= asks, 300, f"{asks} allocations")
        finally:
            if readers is not None:
                readers.__exit__()
        if rm.rejected_asks:
            raise RuntimeError(f"{len(rm.rejected_asks)} asks rejected, e.g. {rm.rejected_asks[0]}")
        times = rm.alloc_times[base:]
        secs = max(times) - t_send
        lat = [t - t_send for t in times]
        parts = {} if breakdown is None else {
            "breakdown": {**breakdown.stop(secs, list(requests.values()), rm.allocations[base:],
                                           pb.AllocationResponse),
                          "single_ask_worker_ms": rtt_worker_ms}}
        return {**parts, "nodes": nodes, "asks": asks, "seconds": round(secs, 4),
                "allocations_per_second": round(asks / secs, 1),
                "node_seconds": round(node_secs, 4),
                "nodes_per_second": round(nodes / node_secs, 1) if node_secs > 0 else None,
                "latency_p50_ms": _ms(percentile(lat, 50)), "latency_p99_ms": _ms(percentile(lat, 99)),
                "single_ask_p50_ms": _ms(percentile(rtts, 50)), "single_ask_p99_ms": _ms(percentile(rtts, 99)),
                "single_ask_samples": len(rtts), "rest_reads": readers.reads if readers else 0,
                "si_revision": si_revision}
    finally:
        api.close()


def _round_trips(api, rm: _BenchRM, samples: int) -> list[float]:
    """Ask one allocation and wait for it, ``samples`` times on the idle cluster; then release
    them all at once. Each ask goes out alone: a release sent just before it would be timed too
    (it holds the stream's writer and the worker for a turn)."""
    rtts = []
    placed = []
    for i in range(samples + 5):  # the first few warm the path up and are not counted
        have = len(rm.allocations)
        t = time.perf_counter()
        api.update_allocation(_asks_request([_ask(f"rtt-{i}", "app-a", rm.v18)], rm.v18))
        rm.wait(lambda r: len(r.allocations) > have or r.rejected_asks, 10, "a single-ask allocation")
        if rm.rejected_asks:
            raise RuntimeError(f"single ask rejected: {rm.rejected_asks[0]}")
        if i >= 5:
            rtts.append(rm.alloc_times[have] - t)
        placed.append(rm.allocations[have])
    pb = si_v18_pb2 if rm.v18 else si_pb2
    releases = [pb.AllocationRelease(partitionName="default", applicationID="app-a", allocationKey=a.allocationKey,
                                     terminationType=pb.STOPPED_BY_RM, message="bench round trip done")
                for a in placed]
    if not rm.v18:
        for release, alloc in zip(releases, placed):
            release.UUID = alloc.UUID
    api.update_allocation(pb.AllocationRequest(releases=pb.AllocationReleasesRequest(allocationsToRelease=releases)))
    time.sleep(0.2)  # let the releases land before the burst
    return rtts


def _core_rate(nodes: int, asks: int) -> float | None:
    """``korral bench core --json --nodes N``'s allocations_per_second, or None if unavailable."""
    try:
        out = subprocess.run([sys.executable, "-m", "common.cli", "bench", "core", "--json", "--nodes", str(nodes),
                              "--asks", str(asks)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"korral bench e2e: core row for {nodes} nodes failed: {exc}", file=sys.stderr)
        return None
    for line in out.stdout.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "allocations_per_second" in row:
            return float(row["allocations_per_second"])
    print(f"korral bench e2e: no core row for {nodes} nodes (exit {out.returncode}): "
          f"{(out.stderr or out.stdout).strip()[-300:]}", file=sys.stderr)
    return None


def run(args: argparse.Namespace) -> int:
    nodes_list = args.nodes or list(DEFAULT_NODES)
    for n in nodes_list:
        if n <= 0:
            print(f"korral bench e2e: --nodes must be positive, got {n}", file=sys.stderr)
            return 2
    from si_client import SchedulerError

    core = {n: (None if args.no_core else _core_rate(n, args.asks)) for n in nodes_list}
    rows = []
    try:
        if args.si_address:
            if (args.rest_readers or args.breakdown) and not args.rest_address:
                print("korral bench e2e: --rest-readers or --breakdown with --si-address needs --rest-address",
                      file=sys.stderr)
                return 2
            rows = _rows(args.si_address, nodes_list, args, core, args.rest_address or "")
        else:
            with LocalStack(args.workers, extra=("--log-level", "warning")) as stack:
                rows = _rows(stack.si_address, nodes_list, args, core, stack.rest_address, stack.processes())
    except (RuntimeError, SchedulerError) as exc:
        print(f"korral bench e2e: {exc}", file=sys.stderr)
        return 1
    if not args.json:
        _print_table(rows)
    return 0


def _rows(si_address: str, nodes_list: list[int], args: argparse.Namespace, core: dict,
          rest_address: str = "", pids: dict[str, int] | None = None) -> list[dict]:
    rows = []
    for i, n in enumerate(nodes_list):
        # both: every row once per revision, the order alternating, so warm-up and drift favour neither
        revisions = {"both": ("seed", "v1.8") if i % 2 == 0 else ("v1.8", "seed")}.get(args.si_revision,
                                                                                        (args.si_revision,))
        pair = {revision: _row(si_address, n, args, core, rest_address, revision, pids) for revision in revisions}
        if len(pair) == 2:
            pair["v1.8"]["ratio_to_seed"] = round(
                pair["v1.8"]["allocations_per_second"] / pair["seed"]["allocations_per_second"], 3)
        for row in pair.values():
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    return rows


def _row(si_address: str, n: int, args: argparse.Namespace, core: dict, rest_address: str, revision: str,
         pids: dict[str, int] | None) -> dict:
    parts = Breakdown(rest_address, RM_ID, pids or {}) if args.breakdown else None
    row = e2e_row(si_address, n, args.asks, args.rtt_samples, si_revision=revision, breakdown=parts)
    row["core_allocations_per_second"] = core[n]
    row["ratio_to_core"] = round(row["allocations_per_second"] / core[n], 3) if core[n] else None
    if args.rest_readers:
        # quiet, loaded, quiet again: the loaded burst is compared with the mean of the two
        # around it, so warm-up and drift do not pass for an effect of the reads
        loaded = e2e_row(si_address, n, args.asks, 0, rest_address, args.rest_readers, revision)
        after = e2e_row(si_address, n, args.asks, 0, si_revision=revision)
        quiet = (row["allocations_per_second"] + after["allocations_per_second"]) / 2
        row["allocations_per_second_with_rest_reads"] = loaded["allocations_per_second"]
        row["rest_reads"] = loaded["rest_reads"]
        row["rest_slowdown"] = round(1 - loaded["allocations_per_second"] / quiet, 3)
    return row


def _print_table(rows: list[dict]) -> None:
    head = ("SI", "nodes", "asks", "node reg s", "nodes/s", "asks→last alloc s", "alloc/s", "p50 ms", "p99 ms",
            "core alloc/s", "ratio", "1-ask p50 ms", "1-ask p99 ms", "v1.8/seed")
    keys = ("si_revision", "nodes", "asks", "node_seconds", "nodes_per_second", "seconds", "allocations_per_second",
            "latency_p50_ms", "latency_p99_ms", "core_allocations_per_second", "ratio_to_core",
            "single_ask_p50_ms", "single_ask_p99_ms", "ratio_to_seed")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(_cell(r.get(k)) for k in keys))
    for r in rows:
        if "breakdown" in r:
            print(format_breakdown(r))


def _cell(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, int) or value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.3f}"
