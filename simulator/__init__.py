"""``korral sim``: a simulated cluster (hollow nodes, in the spirit of KWOK) driving Korral.

Built on ``si_client``: it registers as an RM, reports N nodes (several
partitions via ``si/node-partition``), submits apps over time into queues,
"runs" every allocated task for its duration and releases it ``STOPPED_BY_RM``,
removes apps when done, and checks every scheduler decision (see
``simulator.checks``). Exit status: 0 clean, 1 violations found, 2 setup error
(bad workload, registration refused, scheduler unreachable). See docs/sim.md.
"""

from __future__ import annotations

import argparse

from common import security

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    from common.cli import target
    from simulator.presets import PRESETS


    target.add_flags(parser, "rmproxy's gRPC SI address", si=True, rest_default="", rest_help=(
        "rmproxy's REST address: limits are checked against the config the scheduler serves (an operator may change "
        "it during the run), and the cluster view is printed at the end of the run, with a pointer to the web UI"))
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--workload", metavar="FILE", help="workload YAML (format in docs/sim.md)")
    source.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="built-in workload: " + "; ".join(f"{k}: {v[1]}" for k, v in sorted(PRESETS.items()))
                        + " (default: demo)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the workload's)")
    parser.add_argument("--duration", type=float, default=None,
                        help="stop after this many seconds even if apps are left (default: the workload's)")
    parser.add_argument("--rm-id", default="korral-sim", help="rmID to register as (default: korral-sim)")
    parser.add_argument("--si-revision", choices=("seed", "v1.8"), default="seed",
                        help="the SI revision the sim's RM speaks: the seed's or today's v1.8 (default: seed; "
                             "docs/si-revisions.md)")
    parser.add_argument("--csv", metavar="FILE", help="write the per-second timeline as CSV")
    parser.add_argument("--json", metavar="FILE", help="write the summary and timeline as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no live progress view")
    security.add_tls_client_flags(parser)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from common.config.errors import ConfigError
    from si_client import SchedulerError
    from simulator.presets import PRESETS
    from simulator.report import print_final_view, print_summary, write_csv, write_json
    from simulator.runner import SimOptions, simulate
    from simulator.workload import WorkloadError, parse_workload, plan

    console = Console()
    err = Console(stderr=True)
    try:
        if args.workload:
            try:
                with open(args.workload, encoding="utf-8") as f:
                    text, source = f.read(), args.workload
            except OSError as exc:
                err.print(f"korral sim: cannot read workload {args.workload}: {exc.strerror}")
                return 2
        else:
            name = args.preset or "demo"
            text, source = PRESETS[name][0], f"preset {name}"
        workload = parse_workload(text, source)
        the_plan = plan(workload, args.seed)
    except WorkloadError as exc:
        err.print("korral sim: invalid workload:")
        for e in exc.errors:
            err.print(f"  {e}", markup=False)
        return 2
    from common.cli import target
    from common.restclient import RestError
    try:
        si_address, rest_address = target.si_address(args), target.rest_address(args)
    except RestError as exc:
        err.print(f"korral sim: {exc}", markup=False)
        return 2
    console.print(f"korral sim: workload [bold]{workload.name}[/] seed {the_plan.seed}: "
                  f"{len(the_plan.nodes)} nodes, {len(the_plan.apps)} apps, {the_plan.task_count} tasks "
                  f"-> {si_address} as RM {args.rm_id} (SI revision {args.si_revision})")
    try:
        credentials = security.grpc_channel_credentials(args.tls_ca, args.tls_client_cert, args.tls_client_key)
    except security.SecurityError as exc:
        err.print(f"korral sim: {exc}", markup=False)
        return 2
    options = SimOptions(si_address=si_address, rm_id=args.rm_id, duration=args.duration,
                         progress=not args.no_progress and console.is_terminal, credentials=credentials,
                         rest_address=rest_address, si_revision=args.si_revision)
    try:
        result = simulate(the_plan, options, console)
    except ConfigError as exc:
        err.print(f"korral sim: the workload's config is invalid: {exc}", markup=False)
        return 2
    except SchedulerError as exc:
        err.print(f"korral sim: {exc}", markup=False)
        return 2
    except KeyboardInterrupt:
        err.print("korral sim: interrupted")
        return 130
    print_summary(result.summary, console, rest_address)
    if result.final_view is not None:
        print_final_view(result.final_view, args.rm_id, console)
    if result.reconnects:
        console.print(f"the client re-registered and replayed {result.reconnects} time(s)")
    if args.json:
        write_json(args.json, result.summary, result.timeline)
    if args.csv:
        write_csv(args.csv, result.timeline)
    return 1 if result.summary["violations"] else 0
