"""``korral bench backlog``: a large backlog of unschedulable asks, with and without YuniKorn 1.8's
unschedulable-ask backoff, through a real stack.

Per mode (``--modes backoff,none``, interleaved ``--runs`` times): a fresh registration,
``--nodes`` nodes, ``--apps`` apps in ``root.backlog`` with ``--asks`` asks in all, each asking
for more memory than any node has (they fit nowhere, ever). Once they are in and the worker
has settled, the worker's CPU is read from ``/proc/<pid>/stat`` over ``--idle-seconds``
(``% of one core``), then ``--probes`` single asks arrive one by one in ``root.probe`` (sorted
after the backlog, so every cycle meets the backlog first) and each is timed from the send to
its allocation at the RM (p50/p99). ``backoff``: ``application.unschedasks.backoff: 5``,
``...backoff.delay: 30s`` on ``root.backlog``; ``none``: no backoff.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from common import si_pb2
from common.constants import CPU, MEMORY
from common.si_resource import fill_si_resource
from benchmarks.e2e import _BenchRM, _ask, _ms
from common.series import percentile

__all__ = ["configure", "run", "backlog_row"]

RM_ID = "korral-bench-backlog"
NODE_MEMORY = 1000
# root.backlog holds the unschedulable asks (with or without backoff), root.probe the timed ones
_CONFIG = ("partitions: [{{name: default, queues: [{{name: root, submitacl: '*', queues: "
           "[{{name: backlog{props}}}, {{name: probe}}]}}]}}]")
_BACKOFF = (", properties: {application.unschedasks.backoff: '5', "
            "application.unschedasks.backoff.delay: 30s}")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=5000, help="nodes (default 5000)")
    parser.add_argument("--asks", type=int, default=100_000, help="unschedulable asks in all (default 100000)")
    parser.add_argument("--apps", type=int, default=1000, help="apps holding them (default 1000)")
    parser.add_argument("--probes", type=int, default=100, help="schedulable single asks timed (default 100)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="CPU sampling window (default 10)")
    parser.add_argument("--settle-seconds", type=float, default=5.0,
                        help="wait after the backlog is in before sampling (default 5)")
    parser.add_argument("--modes", default="backoff,none", help="comma-separated: backoff, none")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs per mode; medians reported (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def backlog_row(si_address: str, worker_pids: list[int], mode: str, args: argparse.Namespace) -> dict:
    from si_client import SchedulerAPI

    rm = _BenchRM()
    api = SchedulerAPI(si_address)
    try:
        config = _CONFIG.format(props=_BACKOFF if mode == "backoff" else "")
        api.register_resource_manager(si_pb2.RegisterResourceManagerRequest(
            rmID=RM_ID, policyGroup="queues", config=config), rm)
        ugi = si_pb2.UserGroupInformation(user="bench")
        apps = [f"b-{i}" for i in range(args.apps)]
        api.update_application(si_pb2.ApplicationRequest(new=[
            si_pb2.AddApplicationRequest(applicationID=a, queueName="root.backlog", partitionName="default", ugi=ugi)
            for a in apps] + [si_pb2.AddApplicationRequest(applicationID="probe", queueName="root.probe",
                                                           partitionName="default", ugi=ugi)]))
        rm.wait(lambda r: len(r.apps_accepted) == len(apps) + 1, 60, "the apps' acceptance")
        nodes = si_pb2.NodeRequest()
        for i in range(args.nodes):
            n = nodes.nodes.add(nodeID=f"node-{i:05d}", action=si_pb2.NodeInfo.CREATE)
            fill_si_resource(n.schedulableResource, {MEMORY: NODE_MEMORY, CPU: 100})
        api.update_node(nodes)
        rm.wait(lambda r: r.nodes_accepted >= args.nodes, 120, f"{args.nodes} nodes")
        for start in range(0, args.asks, 5000):
            req = si_pb2.AllocationRequest(rmID=RM_ID)
            for i in range(start, min(args.asks, start + 5000)):
                req.asks.append(_ask(f"big-{i}", apps[i % len(apps)], memory=NODE_MEMORY * 2))
            api.update_allocation(req)
        api.flush(60)
        time.sleep(args.settle_seconds)  # a benchmark, not a test: let the first cycles over the backlog pass
        before = {pid: _cpu_seconds(pid) for pid in worker_pids}
        t0 = time.monotonic()
        time.sleep(args.idle_seconds)
        elapsed = time.monotonic() - t0
        idle = max((_cpu_seconds(pid) - c) / elapsed * 100 for pid, c in before.items())
        lat = []
        for i in range(args.probes):
            have = len(rm.allocations)
            t = time.perf_counter()
            api.update_allocation(si_pb2.AllocationRequest(asks=[_ask(f"probe-{i}", "probe")]))
            rm.wait(lambda r: len(r.allocations) > have, 60, "a probe allocation")
            lat.append(rm.alloc_times[have] - t)
            alloc = rm.allocations[have]
            api.update_allocation(si_pb2.AllocationRequest(releases=si_pb2.AllocationReleasesRequest(
                allocationsToRelease=[si_pb2.AllocationRelease(
                    partitionName="default", applicationID="probe", UUID=alloc.UUID,
                    allocationKey=alloc.allocationKey, terminationType=si_pb2.STOPPED_BY_RM)])))
            time.sleep(0.05)
        return {"mode": mode, "nodes": args.nodes, "asks": args.asks, "apps": args.apps,
                "idle_worker_cpu_percent": round(idle, 2),
                "probe_p50_ms": _ms(percentile(lat, 50)), "probe_p99_ms": _ms(percentile(lat, 99)),
                "probes": len(lat)}
    finally:
        api.close()


def run(args: argparse.Namespace) -> int:
    from common.cli.stack.throwaway import LocalStack

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("backoff", "none")]
    if bad:
        print(f"korral bench backlog: unknown mode(s) {', '.join(bad)}: use backoff and/or none")
        return 2
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    with LocalStack(workers=1) as stack:
        pids = [pid for name, pid in stack.processes().items() if "worker" in name]
        for _ in range(args.runs):
            for mode in modes:  # interleaved: the machine's noise hits both alike
                rows[mode].append(backlog_row(stack.si_address, pids, mode, args))
    summary = [{**rs[0], **{k: statistics.median(r[k] for r in rs)
                           for k in ("idle_worker_cpu_percent", "probe_p50_ms", "probe_p99_ms")},
                "runs": len(rs)} for rs in rows.values()]
    if args.json:
        print(json.dumps({"medians": summary, "runs": rows}, indent=2))
    else:
        print(f"{'mode':8} {'nodes':>6} {'asks':>7} {'idle worker % core':>19} {'probe p50 ms':>13} {'probe p99 ms':>13}")
        for r in summary:
            print(f"{r['mode']:8} {r['nodes']:>6} {r['asks']:>7} {r['idle_worker_cpu_percent']:>19} "
                  f"{r['probe_p50_ms']:>13} {r['probe_p99_ms']:>13}   (median of {r['runs']})")
    return 0
