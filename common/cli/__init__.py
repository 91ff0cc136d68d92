"""The ``korral`` command: one subcommand per module.

Each subcommand lives in the module that owns the concept and exposes two
functions: ``configure(parser: argparse.ArgumentParser) -> None`` adds its
flags, ``run(args: argparse.Namespace) -> int`` runs it and returns the exit
status. Modules are imported only when their subcommand runs, so
``korral check-config`` does not pay for gRPC and ZeroMQ.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

# name -> (module, one-line help). ``bench`` has its own sub-subcommands.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("common.cli.stack.up", "start the local stack (Redis, broker, rmproxy, workers) under supervisord"),
    "down": ("common.cli.stack.down", "stop a stack started by `korral up`"),
    "status": ("common.cli.status", "show the processes, partitions and RMs of a stack"),
    "broker": ("broker.main", "run the broker process"),
    "rmproxy": ("rmproxy.main", "run the rmproxy process (gRPC SI front door and REST API)"),
    "worker": ("partition_worker.main", "run a partition worker process"),
    "check-config": ("common.config.check", "validate a queues.yaml file offline"),
    "sim": ("simulator", "run a simulated cluster (a hollow-node RM) against a stack"),
    "k8s-shim": ("k8s_shim.main", "schedule a Kubernetes cluster's pods (schedulerName yunikorn) with Korral"),
    "bench": ("common.cli.bench", "run a benchmark: core | e2e | recovery"),
    "keys": ("common.cli.keys", "generate CURVE key pairs for secured links"),
    "dump": ("common.cli.dump", "write the full state dump of a stack to a file"),
    "queues": ("common.cli.restcli", "list the queues of a partition (REST client)"),
    "apps": ("common.cli.restcli", "list applications (REST client)"),
    "nodes": ("common.cli.restcli", "list nodes (REST client)"),
    "explain": ("common.cli.explain", "why an application's asks wait (REST client)"),
    "k8s-fake": ("k8s_shim.fake.main", "run a fake Kubernetes API server with fake nodes (try the shim "
                                          "and kubectl without a cluster)"),
    "config": ("common.cli.config", "an RM's queues.yaml on a running stack: get, apply (--dry-run), diff, "
                                    "history, rollback (rmproxy's admin endpoint)"),
}


def invocation() -> str:
    """How to run ``korral`` again from here, for the commands Korral prints: ``korral`` when
    that is on PATH and is this installation, else the path of this installation's ``korral``
    script (relative when it is below the working directory, as ``.venv/bin/korral``), else
    ``python -m common.cli`` with this interpreter."""
    script = os.path.join(os.path.dirname(sys.executable), "korral")
    on_path = shutil.which("korral")
    if on_path and os.path.exists(script) and os.path.samefile(on_path, script):
        return "korral"
    if os.path.exists(script):
        rel = os.path.relpath(script)
        return rel if not rel.startswith("..") else script
    return f"{sys.executable} -m common.cli"


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="korral",
        description="Korral: a distributed scheduler speaking the YuniKorn Scheduler Interface.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = argv[0] if argv else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module_name, _name=name)
        if name == wanted:
            # a module serving several commands reads args._name in run()
            importlib.import_module(module_name).configure(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
