"""``korral bench core | e2e | recovery | backlog | churn | k8s | compare``: each lives with the code it measures."""

from __future__ import annotations

import argparse
import importlib

__all__ = ["BENCHES", "configure", "run"]

BENCHES = {
    "core": ("partition_worker.bench", "the scheduling core in-process (YuniKorn's core benchmark scenario)"),
    "e2e": ("benchmarks.e2e", "the same scenario through gRPC, rmproxy, broker and a worker"),
    "recovery": ("benchmarks.recovery", "kill -9 a worker; time until its partition is back"),
    "backlog": ("benchmarks.backlog", "100,000 unschedulable asks on 5,000 nodes, with and without the "
                                         "unschedulable-ask backoff: idle worker CPU, latency of asks behind them"),
    "churn": ("benchmarks.churn",
              "steady state through the stack: tasks arriving at fixed rates and ending; latency, backlog, CPU"),
    "k8s": ("benchmarks.k8s", "pods per second through the Kubernetes shim on the fake cluster: binding rate, "
                                 "creation -> binding latency, CPU per 1,000 pods of each process"),
    "compare": ("partition_worker.bench_compare",
                "YuniKorn's own core benchmark and `bench core`, interleaved: both rates and the ratios"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK")
    sub.required = True
    for name, (module_name, help_text) in BENCHES.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module_name).configure(p)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(BENCHES[args.bench][0]).run(args) or 0)
