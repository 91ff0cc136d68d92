"""``korral bench core``: YuniKorn's core scheduling benchmark, in-process against the core.

Scenario (YuniKorn's ``BenchmarkScheduling``): two apps in ``root.a`` and ``root.b``
(guaranteed memory 100000 / 1000000, vcore 10000 / 10000), N nodes each sized for
asks/N + 1 asks (YuniKorn's sizing: every ask fits, little is left), 10,000 asks of {memory: 10, vcore: 1} split over the two apps; time until
all are allocated. Each row runs in a fresh ``spawn`` subprocess so rows do not
share their peak RSS.

Output per row: nodes, asks, seconds (submit + schedule until all allocated),
allocations per second, nodes per second (node add rate), peak RSS. ``--json``
prints one JSON object per row. ``--memory`` runs the capacity check instead:
20,000 nodes and 200,000 pending asks in one partition, reporting peak RSS and
the cost of one scheduling cycle over the pending asks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import resource
import sys
import time

from partition_worker.session import uuid_source

DEFAULT_NODES = (500, 1000, 2000, 5000)
DEFAULT_ASKS = 10_000
MEMORY_NODES = 20_000
MEMORY_ASKS = 200_000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, action="append", metavar="N",
                        help="node count of one row (repeatable; default 500 1000 2000 5000)")
    parser.add_argument("--asks", type=int, default=DEFAULT_ASKS, help="asks per row (default 10000)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument("--memory", action="store_true",
                        help=f"capacity check: {MEMORY_NODES} nodes + {MEMORY_ASKS} pending asks")
    parser.add_argument("--policy", choices=("fair", "binpacking"), default="fair",
                        help="node sort policy (default fair)")
    parser.add_argument("--apps", type=int, default=2,
                        help="apps the asks are spread over, alternating root.a/root.b "
                             "(default 2, the benchmark's)")
    parser.add_argument("--app-policy", choices=("fifo", "fair", "stateaware"), default="fifo",
                        help="application.sort.policy of root.a and root.b (default fifo)")
    parser.add_argument("--preemption", action="store_true",
                        help="queue preemption on full clusters instead: 2,000 preemptors of a high-priority "
                             "queue against the nodes of --nodes (default 500 and 5000) filled by a low one "
                             "(partition_worker/bench_preemption.py)")
    parser.add_argument("--node-terms", action="store_true",
                        help="a Kubernetes-shaped cluster instead: tainted GPU pool and control-plane nodes, "
                             "asks with tolerations, node affinity, nodeSelector and host ports, timed against "
                             "the same asks without them (partition_worker/bench_node_terms.py)")
    parser.add_argument("--interpod", action="store_true",
                        help="inter-pod constraints instead: deployments of 20 replicas, half with required pod "
                             "anti-affinity on the hostname, half spread over three zones (maxSkew 1), timed "
                             "against the same pods without them (partition_worker/bench_interpod.py)")
    parser.add_argument("--gangs", action="store_true",
                        help="topology-aware gang placement instead: 1,000 gangs of 8-64 members on --nodes "
                             "(default 5000) in 10 blocks x 10 racks, tagged korral.io/gang-topology (rack, "
                             "preferred), against the same gangs topology-blind: share in one rack / block, "
                             "decision time (partition_worker/bench_gangs.py)")
    parser.add_argument("--gang-lifetime", type=int, default=600, metavar="N",
                        help="with --gangs: a gang ends when the N-th gang after it arrives (default 600: "
                             "about 95%% of the free slots in use; 700 saturates the cluster)")
    parser.add_argument("--session", action="store_true",
                        help="drive the worker's session (PartitionSession: asks in as rows, nodes and apps as "
                             "SI protobuf, as rmproxy sends them) instead of the core commands")
    parser.add_argument("--profile", action="store_true",
                        help="run one row in-process under cProfile and print the top functions")


def run(args: argparse.Namespace) -> int:
    if args.asks <= 0 or args.apps <= 0:
        print("korral bench core: --asks and --apps must be positive", file=sys.stderr)
        return 2
    nodes = args.nodes or list(DEFAULT_NODES)
    if any(n <= 0 for n in nodes):
        print("korral bench core: --nodes must be positive", file=sys.stderr)
        return 2
    if args.profile:
        return _profile(nodes[0], args.asks, args.policy, args.apps, args.app_policy)
    ctx = multiprocessing.get_context("spawn")
    if args.preemption:
        from partition_worker.bench_preemption import HIGH_TASKS, PER_NODE, preemption_row
        small = [n for n in args.nodes or () if n * PER_NODE * 9 // 10 < HIGH_TASKS]
        if small:
            print(f"korral bench core: --preemption needs at least {-(-HIGH_TASKS * 10 // (PER_NODE * 9))} "
                  f"nodes for its {HIGH_TASKS} preemptors, got --nodes {small[0]}", file=sys.stderr)
            return 2
        rows = [_in_subprocess(ctx, preemption_row, n) for n in (args.nodes or [500, 5000])]
        for r in rows:
            print(json.dumps(r) if args.json else _preemption_line(r), flush=True)
        return 0 if all(r["victims_only_from_low"] and r["low_kept_its_guarantee"] for r in rows) else 1
    if args.node_terms:
        from partition_worker.bench_node_terms import node_terms_row
        rows = [_in_subprocess(ctx, node_terms_row, n, args.asks, args.policy) for n in (args.nodes or [5000])]
        for r in rows:
            print(json.dumps(r) if args.json else _node_terms_line(r), flush=True)
        return 0
    if args.gangs:
        from partition_worker.bench_gangs import gangs_row
        rows = [_in_subprocess(ctx, gangs_row, n, args.gang_lifetime) for n in (args.nodes or [5000])]
        for r in rows:
            print(json.dumps(r) if args.json else _gangs_line(r), flush=True)
        return 0
    if args.interpod:
        from partition_worker.bench_interpod import interpod_row
        rows = [_in_subprocess(ctx, interpod_row, n, args.asks, args.policy) for n in (args.nodes or [5000])]
        for r in rows:
            print(json.dumps(r) if args.json else _interpod_line(r), flush=True)
        return 0 if all(r["violations"] == 0 for r in rows) else 1
    if args.memory:
        fn = memory_session_row if args.session else memory_row
        rows = [_in_subprocess(ctx, fn, MEMORY_NODES, MEMORY_ASKS, args.policy)]
    else:
        if args.session:
            rows = [_in_subprocess(ctx, session_row, n, args.asks, args.policy) for n in nodes]
        else:
            rows = [_in_subprocess(ctx, scheduling_row, n, args.asks, args.policy, args.apps,
                                   args.app_policy) for n in nodes]
    if args.json:
        for r in rows:
            print(json.dumps(r), flush=True)
    else:
        _print_table(rows, memory=args.memory)
    return 0


def _in_subprocess(ctx, fn, *args) -> dict:
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def _peak_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS
    v = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return v if platform.system() == "Darwin" else v * 1024


def _partition(policy: str, apps: int = 2, app_policy: str = "fifo"):
    """YuniKorn's two queues; ``apps`` apps alternate between them (2 = the benchmark's)."""
    from common.bench_scenario import partition_config
    from partition_worker.core import AddApp, Partition
    now = time.time_ns()
    p = Partition("default", partition_config(policy, app_policy), rm_id="bench",
                  new_uuid=uuid_source(), created_ns=now)
    for i in range(apps):
        p.handle(AddApp(_app_id(i, apps), "root.a" if i % 2 == 0 else "root.b", "bench"), now)
    return p


def _app_id(i: int, apps: int) -> str:
    if apps == 2:
        return "app-a" if i % 2 == 0 else "app-b"
    return f"app-{i}"


def _add_nodes(p, n: int, memory: int, vcore: int) -> float:
    from common.resources import Resource
    from partition_worker.core import AddNode
    now = time.time_ns()
    t0 = time.perf_counter()
    for i in range(n):
        p.handle(AddNode(f"node-{i:06d}", Resource({"memory": memory, "vcore": vcore})), now)
    return time.perf_counter() - t0


def _add_asks(p, n: int, memory: int, vcore: int, apps: int = 2) -> None:
    from common.resources import Resource
    from partition_worker.core import AddAsk
    now = time.time_ns()
    r = Resource({"memory": memory, "vcore": vcore})
    handle = p.handle
    ids = [_app_id(i, apps) for i in range(apps)]
    for i in range(n):
        handle(AddAsk(f"ask-{i}", ids[i % apps], r), now)


def scheduling_row(nodes: int, asks: int, policy: str = "fair", apps: int = 2,
                   app_policy: str = "fifo") -> dict:
    """One benchmark row; runs in its own process (peak RSS is this row's)."""
    from common.bench_scenario import node_size
    p = _partition(policy, apps, app_policy)
    # YuniKorn's sizing: each node holds asks/nodes + 1 asks, so the cluster is almost full
    # at the end and the node order matters (pkg/scheduler/tests/scheduler_perf_test.go)
    size = node_size(nodes, asks)
    node_secs = _add_nodes(p, nodes, memory=size["memory"], vcore=size["vcore"])
    p.step(time.time_ns())
    p.outcomes.drain()
    t0 = time.perf_counter()
    c0 = time.process_time()  # steadier than wall time on a shared machine
    _add_asks(p, asks, memory=10, vcore=1, apps=apps)
    allocated = 0
    cycles = 0
    while allocated < asks:
        n = p.step(time.time_ns())
        allocated += len(p.outcomes.drain().allocations)
        cycles += 1
        if n == 0 and allocated < asks:
            raise RuntimeError(f"bench stalled: {allocated} of {asks} allocated after {cycles} cycles")
    secs = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"nodes": nodes, "asks": asks, "seconds": round(secs, 4),
            "allocations_per_second": round(asks / secs, 1),
            "cpu_seconds": round(cpu, 4), "allocations_per_cpu_second": round(asks / cpu, 1) if cpu > 0 else None,
            "nodes_per_second": round(nodes / node_secs, 1) if node_secs > 0 else None,
            "peak_rss_bytes": _peak_rss_bytes(), "cycles": cycles, "policy": policy,
            "apps": apps, "app_policy": app_policy}


def session_row(nodes: int, asks: int, policy: str = "fair") -> dict:
    """The same scenario through ``PartitionSession``, as the worker gets it from rmproxy: apps and
    nodes as SI protobuf, asks as rows; new allocations out as rows."""
    from common import si_pb2
    from common.bench_scenario import node_request, partition_config
    from common.si_rows import AskRow, RequestRows
    from partition_worker.session import PartitionSession
    s = PartitionSession("bench", "default", partition_config(policy))
    ugi = si_pb2.UserGroupInformation(user="bench")
    s.apply_application_request(si_pb2.ApplicationRequest(new=[
        si_pb2.AddApplicationRequest(applicationID="app-a", queueName="root.a", ugi=ugi),
        si_pb2.AddApplicationRequest(applicationID="app-b", queueName="root.b", ugi=ugi)]),
        time.time_ns())
    nreq = node_request(nodes, asks)
    t0 = time.perf_counter()
    s.apply_node_request(nreq, time.time_ns())
    accepted = len(s.step(time.time_ns()).node.accepted)
    node_secs = time.perf_counter() - t0
    if accepted != nodes:
        raise RuntimeError(f"only {accepted} of {nodes} nodes accepted")
    body = RequestRows([["memory", 10, "vcore", 1]], [
        AskRow(f"ask-{i}", "app-a" if i % 2 == 0 else "app-b", 0, 1, 0, 0, None, "", False, False, True, True)
        for i in range(asks)])
    t0 = time.perf_counter()
    s.apply_allocation_rows(body, time.time_ns())
    allocated = 0
    while allocated < asks:
        out = s.step(time.time_ns())
        got = len(out.new_allocations.new) if out.new_allocations is not None else 0
        if got == 0:
            raise RuntimeError(f"bench stalled: {allocated} of {asks} allocated")
        allocated += got
    secs = time.perf_counter() - t0
    return {"nodes": nodes, "asks": asks, "seconds": round(secs, 4),
            "allocations_per_second": round(asks / secs, 1),
            "nodes_per_second": round(nodes / node_secs, 1) if node_secs > 0 else None,
            "peak_rss_bytes": _peak_rss_bytes(), "policy": policy, "via": "session"}


def memory_row(nodes: int, asks: int, policy: str = "fair") -> dict:
    """Capacity check: ``nodes`` nodes, ``asks`` pending asks that fit no node, one cycle."""
    p = _partition(policy)
    node_secs = _add_nodes(p, nodes, memory=64 * 2**30, vcore=16_000)
    t0 = time.perf_counter()
    _add_asks(p, asks, memory=128 * 2**30, vcore=1000)  # larger than any node: stays pending
    add_secs = time.perf_counter() - t0
    t1 = time.perf_counter()
    p.step(time.time_ns())
    cycle_secs = time.perf_counter() - t1
    out = p.outcomes.drain()
    pending = sum(a.pending for app in p.apps.values() for a in app.asks.values())
    del out
    return {"nodes": nodes, "asks": asks, "pending": pending, "seconds": round(add_secs, 4),
            "allocations_per_second": 0.0,
            "nodes_per_second": round(nodes / node_secs, 1) if node_secs > 0 else None,
            "cycle_seconds": round(cycle_secs, 4), "peak_rss_bytes": _peak_rss_bytes(),
            "policy": policy}


def memory_session_row(nodes: int, asks: int, policy: str = "fair") -> dict:
    """Capacity check through the worker's session with k8s-shaped input: 200 apps, asks (as
    rows) with ``memory``/``vcore``/``pods`` and the shim's namespace/podName tags, each larger
    than any node (so all stay pending); one cycle, whose 200,000 FAILED scheduling states are built."""
    from common import si_pb2
    from common.config.model import NodeSortPolicyConfig, PartitionConfig, QueueConfig
    from common.si_rows import AskRow, RequestRows
    from partition_worker.session import PartitionSession
    root = QueueConfig(name="root", submitacl="*", queues=(QueueConfig(name="a"), QueueConfig(name="b")))
    s = PartitionSession("bench", "default", PartitionConfig(
        name="default", queues=(root,), nodesortpolicy=NodeSortPolicyConfig(type=policy)))
    ugi = si_pb2.UserGroupInformation(user="bench")
    napps = 200
    s.apply_application_request(si_pb2.ApplicationRequest(new=[
        si_pb2.AddApplicationRequest(applicationID=f"app-{i}", queueName="root.a" if i % 2 else "root.b",
                                     ugi=ugi) for i in range(napps)]), time.time_ns())
    nreq = si_pb2.NodeRequest()
    for i in range(nodes):
        n = nreq.nodes.add(nodeID=f"node-{i:06d}", action=si_pb2.NodeInfo.CREATE,
                           attributes={"si/hostname": f"node-{i}", "si/rackname": "/rack-default"})
        for k, v in (("memory", 64 * 2**30), ("vcore", 16_000), ("pods", 110)):
            n.schedulableResource.resources[k].value = v
    t0 = time.perf_counter()
    s.apply_node_request(nreq, time.time_ns())
    s.step(time.time_ns())
    node_secs = time.perf_counter() - t0
    del nreq
    add_secs = 0.0  # time in apply_allocation_rows only, not building the rows
    batch = 10_000
    sizes = [["memory", 128 * 2**30, "vcore", 1000, "pods", 1]]
    for start in range(0, asks, batch):
        body = RequestRows(sizes, [
            AskRow(f"pod-uid-{i:012d}", f"app-{i % napps}", 0, 1, 0, 0,
                   {"kubernetes.io/meta/namespace": "default", "kubernetes.io/meta/podName": f"pod-{i}"},
                   "", False, False, True, True) for i in range(start, min(asks, start + batch))])
        t0 = time.perf_counter()
        s.apply_allocation_rows(body, time.time_ns())
        add_secs += time.perf_counter() - t0
    t1 = time.perf_counter()
    out = s.step(time.time_ns())
    cycle_secs = time.perf_counter() - t1
    states = len(out.scheduling_states)
    del out
    pending = sum(a.pending for app in s.core.apps.values() for a in app.asks.values())
    return {"nodes": nodes, "asks": asks, "pending": pending, "seconds": round(add_secs, 4),
            "allocations_per_second": 0.0, "nodes_per_second": round(nodes / node_secs, 1),
            "cycle_seconds": round(cycle_secs, 4), "scheduling_states": states,
            "peak_rss_bytes": _peak_rss_bytes(), "policy": policy, "via": "session"}


def _print_table(rows: list[dict], memory: bool) -> None:
    head = f"{'nodes':>7} {'asks':>7} {'seconds':>9} {'allocs/s':>10} {'nodes/s':>10} {'peak RSS':>10}"
    if memory:
        head += f" {'pending':>8} {'cycle s':>8}"
    print(head)
    for r in rows:
        line = (f"{r['nodes']:>7} {r['asks']:>7} {r['seconds']:>9.3f} "
                f"{r['allocations_per_second']:>10.0f} {r['nodes_per_second'] or 0:>10.0f} "
                f"{r['peak_rss_bytes'] / 2**20:>8.0f}Mi")
        if memory:
            line += f" {r['pending']:>8} {r['cycle_seconds']:>8.3f}"
        print(line, flush=True)


def _node_terms_line(r: dict) -> str:
    return (f"{r['nodes']:>6} nodes, {r['asks']} asks with node terms ({r['policy']}): "
            f"{r['allocations_per_second']:.0f} allocations/s, {r['allocations_per_cpu_second']:.0f} per CPU second; "
            f"the same asks without terms {r['plain_allocations_per_cpu_second']:.0f} per CPU second "
            f"(CPU cost x{r['cost_ratio']})")


def _interpod_line(r: dict) -> str:
    return (f"{r['nodes']:>6} nodes, {r['asks']} asks with pod anti-affinity / topology spread ({r['policy']}): "
            f"{r['allocations_per_second']:.0f} allocations/s, {r['allocations_per_cpu_second']:.0f} per CPU second; "
            f"the same pods without them {r['plain_allocations_per_cpu_second']:.0f} per CPU second "
            f"(rate x{r['rate_ratio']}, goal >= 0.5); {r['violations']} placements breaking a constraint")


def _gangs_line(r: dict) -> str:
    def run(name: str, x: dict) -> str:
        line = (f"{name}: {x['gangs_placed']} gangs placed, {x['in_one_rack']:.1%} in one rack, "
                f"{x['in_one_block']:.1%} in one block; of the {x['fit_a_rack']} that fitted a rack on arrival "
                f"{x['fit_a_rack_placed_in_one']:.1%} in one rack; step median {x['step_ms_median']} ms, "
                f"p99 {x['step_ms_p99']} ms")
        if x["decision_ms_median"] is not None:
            line += (f"; domain decision median {x['decision_ms_median']} ms, p99 {x['decision_ms_p99']} ms, "
                     f"max {x['decision_ms_max']} ms ({x['no_domain_decisions']} finding no domain: median "
                     f"{x['no_domain_ms_median']} ms)")
        return line
    return (f"{r['nodes']:>6} nodes, {r['gangs']} gangs (lifetime {r['lifetime']}):\n  "
            f"{run('topology', r['topology'])}\n  {run('blind', r['blind'])}")


def _preemption_line(r: dict) -> str:
    checks = "ok" if r["victims_only_from_low"] and r["low_kept_its_guarantee"] else "VIOLATED"
    return (f"{r['nodes']:>6} nodes, {r['low_allocations']} low allocations, {r['preemptors']} preemptors: "
            f"{r['placed']} placed, {r['victims']} victims in {r['cycles']} cycles; cycle median "
            f"{r['cycle_ms_median']} ms, p99 {r['cycle_ms_p99']} ms, max {r['cycle_ms_max']} ms; "
            f"scheduler time {r['scheduler_seconds']} s; victims only from root.low and root.low kept its "
            f"guarantee: {checks}")


def _profile(nodes: int, asks: int, policy: str, apps: int = 2, app_policy: str = "fifo") -> int:
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    row = scheduling_row(nodes, asks, policy, apps, app_policy)
    prof.disable()
    print(json.dumps(row))
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="korral bench core", description=__doc__.splitlines()[0])
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
