"""``korral k8s-fake``: run a fake Kubernetes API server with fake nodes, to try the shim (and
kubectl) without a cluster. It writes a kubeconfig that points at it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import signal
import sys
import tempfile
from pathlib import Path

from common.gcpause import steady_until_stopped
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster, NodeTemplate, write_kubeconfig
from k8s_shim.fake.tls import TlsError, self_signed

__all__ = ["configure", "run", "parse_labels_flag", "parse_taints_flag"]

log = logging.getLogger("korral.k8s.fake")


def parse_labels_flag(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise argparse.ArgumentTypeError(f"--node-labels: {part!r} is not KEY=VALUE")
        out[key] = value
    return out


def parse_taints_flag(text: str) -> list[dict[str, str]]:
    """``key=value:Effect`` or ``key:Effect``, comma separated."""
    out: list[dict[str, str]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        left, colon, effect = part.rpartition(":")
        if not colon or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not left:
            raise argparse.ArgumentTypeError(f"--node-taints: {part!r} is not KEY[=VALUE]:EFFECT with EFFECT one of "
                                             "NoSchedule, PreferNoSchedule, NoExecute")
        key, _, value = left.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        out.append(taint)
    return out


def parse_pools_flag(text: str) -> dict[str, int]:
    """``NAME=N``, comma separated: N nodes of pool NAME."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, count = part.partition("=")
        if not eq or not name or not count.isdigit():
            raise argparse.ArgumentTypeError(f"--node-pools: {part!r} is not NAME=N (N nodes of pool NAME)")
        out[name] = int(count)
    return out


def _address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise argparse.ArgumentTypeError(f"--address: {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", type=_address, default=("127.0.0.1", 6443), metavar="HOST:PORT",
                        help="where to serve the API (default 127.0.0.1:6443; port 0 picks a free one)")
    parser.add_argument("--kubeconfig-out", metavar="FILE",
                        help="write a kubeconfig for this server (kubectl and the shim read it)")
    parser.add_argument("--token", help="bearer token every request must carry (default: a random one; "
                                        "'none' turns authentication off)")
    parser.add_argument("--no-tls", action="store_true",
                        help="serve plain HTTP (kubectl then sends no token: use it with --token none)")
    parser.add_argument("--tls-cert", metavar="FILE", help="serving certificate (default: a self-signed one "
                                                            "made with openssl, written to --state-dir)")
    parser.add_argument("--tls-key", metavar="FILE", help="the --tls-cert's private key")
    parser.add_argument("--state-dir", metavar="DIR", help="where to keep the self-signed certificate (default: "
                                                           "a temporary directory removed on exit)")
    parser.add_argument("--nodes", type=int, default=3, metavar="N", help="fake nodes to create (default 3)")
    parser.add_argument("--node-name-pattern", default="fake-node-{i}", metavar="PATTERN",
                        help="node names; {i} is the node's number from 0 (default fake-node-{i})")
    parser.add_argument("--node-cpu", default="32", help="each node's cpu capacity (default 32)")
    parser.add_argument("--node-memory", default="128Gi", help="each node's memory capacity (default 128Gi)")
    parser.add_argument("--node-pods", default="110", help="each node's pod capacity (default 110)")
    parser.add_argument("--node-labels", type=parse_labels_flag, default={}, metavar="K=V,...",
                        help="labels on every fake node (besides kubernetes.io/hostname, os and arch)")
    parser.add_argument("--node-taints", type=parse_taints_flag, default=[], metavar="K[=V]:EFFECT,...",
                        help="taints on every fake node")
    parser.add_argument("--node-pools", type=parse_pools_flag, default={}, metavar="NAME=N,...",
                        help="node pools to create besides --nodes: N nodes NAME-node-0.. per pool, labelled "
                             "--node-pool-label=NAME (and --node-labels), for korral k8s-shim --partition-label")
    parser.add_argument("--node-pool-label", default="korral.io/pool", metavar="KEY",
                        help="the label naming a node's pool (default korral.io/pool)")
    parser.add_argument("--pod-start-seconds", type=float, default=0.0, metavar="S",
                        help="how long the fake kubelet takes to start a bound pod (default 0)")
    parser.add_argument("--no-kubelet", action="store_true",
                        help="run no fake kubelet: bound pods stay Pending and graceful deletions wait")
    parser.add_argument("--volume-provisioners", default=None, metavar="DRIVER,...",
                        help="the CSI drivers the fake external provisioner makes volumes for (default: every "
                             "class's provisioner; '' none: claims of a provisioning class stay Pending)")
    parser.add_argument("--no-volume-binder", action="store_true",
                        help="run no persistent-volume binder nor provisioner: claims stay Pending")
    parser.add_argument("--history", type=int, default=10_000, metavar="N",
                        help="writes kept per resource for watches and exact lists; older resourceVersions "
                             "answer 410 Expired (default 10000)")
    parser.add_argument("--bookmark-interval", type=float, default=60.0, metavar="S",
                        help="seconds between watch BOOKMARKs when a watch asks for them (default 60, as a real "
                             "server)")
    parser.add_argument("--throttle-qps", type=float, default=0.0, metavar="R",
                        help="answer requests beyond R a second (a second's worth may come at once) with 429 Too "
                             "Many Requests and Retry-After: 1, as API Priority and Fairness rejects them; watches "
                             "are exempt (default 0: never)")
    parser.add_argument("--runtime-config", action="append", default=[], metavar="GROUP/VERSION=true",
                        help="turn on an API group a real server serves only when asked; served: "
                             "scheduling.k8s.io/v1alpha2=true (Workload, PodGroup and pods' spec.schedulingGroup, "
                             "Kubernetes 1.36's gang API; off by default, as on a real server)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def options_from(args: argparse.Namespace) -> ClusterOptions:
    token = args.token if args.token is not None else secrets.token_urlsafe(24)
    def template(count: int, pattern: str, labels: dict[str, str]) -> NodeTemplate:
        return NodeTemplate(count=count, name_pattern=pattern, cpu=args.node_cpu, memory=args.node_memory,
                            pods=args.node_pods, labels=labels, taints=args.node_taints)
    return ClusterOptions(
        token=None if token == "none" else token, history=args.history, bookmark_interval=args.bookmark_interval,
        kubelet=not args.no_kubelet, pod_start_seconds=args.pod_start_seconds,
        volume_binder=not args.no_volume_binder,
        provisioners=None if args.volume_provisioners is None else
        frozenset(d for d in args.volume_provisioners.split(",") if d),
        throttle_qps=max(0.0, args.throttle_qps),
        runtime_config=frozenset(e.strip() for arg in args.runtime_config for e in arg.split(",") if e.strip()),
        nodes=template(args.nodes, args.node_name_pattern, args.node_labels),
        pools=[template(count, f"{pool}-node-{{i}}", {**args.node_labels, args.node_pool_label: pool})
               for pool, count in args.node_pools.items()])


async def serve(args: argparse.Namespace, tls: tuple[str, str] | None) -> int:
    options = options_from(args)
    options.tls = tls
    cluster = FakeCluster(options)
    host, port = args.address
    url = await cluster.start(host, port)
    if args.kubeconfig_out:
        write_kubeconfig(args.kubeconfig_out, cluster.kubeconfig())
    pools = "".join(f", {t.count} in pool {t.labels[args.node_pool_label]}" for t in cluster.options.pools)
    print(f"fake Kubernetes API at {url} ({cluster.options.nodes.count} nodes{pools})"
          + (f"; kubeconfig: {args.kubeconfig_out}" if args.kubeconfig_out else ""), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # 50,000 pods and their history are millions of objects: a full GC pass over them every few
    # seconds would cost more than serving them, and stall every client meanwhile
    await steady_until_stopped(stop)
    await cluster.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.nodes < 0:
        print("korral k8s-fake: --nodes must be 0 or more", file=sys.stderr)
        return 2
    try:
        args.node_name_pattern.format(i=0)
    except (KeyError, IndexError, ValueError):
        print(f"korral k8s-fake: --node-name-pattern {args.node_name_pattern!r} may only use {{i}}", file=sys.stderr)
        return 2
    if bool(args.tls_cert) != bool(args.tls_key):
        print("korral k8s-fake: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="korral-k8s-fake-") as tmp:
        tls: tuple[str, str] | None = None
        if args.tls_cert:
            tls = (args.tls_cert, args.tls_key)
        elif not args.no_tls:
            try:
                cert, key = self_signed(Path(args.state_dir or tmp), args.address[0])
            except TlsError as exc:
                print(f"korral k8s-fake: {exc}", file=sys.stderr)
                return 1
            tls = (str(cert), str(key))
        return _serve(args, tls)


def _serve(args: argparse.Namespace, tls: tuple[str, str] | None) -> int:
    try:
        return asyncio.run(serve(args, tls))
    except OSError as exc:
        print(f"korral k8s-fake: cannot serve on {args.address[0]}:{args.address[1]}: {exc}", file=sys.stderr)
        return 1
