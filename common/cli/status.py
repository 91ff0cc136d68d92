"""``korral status``: the processes, partitions and RMs of a stack.

With ``--state-dir`` (a stack started by ``korral up``): each local process with its
role, supervisord program name, pid, state and uptime, rmproxy's readiness JSON, and
the cluster view below. With ``--rest-address`` (any rmproxy) or ``--broker`` (the
broker itself), from any host: the cluster view only — workers with partition, epoch
and heartbeat age, rmproxies, RMs with their connection state, partitions and owners
(``common.cli.cluster_status``). Changes nothing.

Exit status: 0 when every process runs and the stack is ready, 3 when it runs but is
degraded (a process not RUNNING or not ready), 1 when there is no running stack.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import xmlrpc.client
from typing import Any

from common import netutil, security
from common.cli import cluster_status, target
from common.cli.stack.down import StackError, default_state_dir, load_stack, supervisor_rpc

__all__ = ["configure", "run", "collect_status", "format_status"]

READY_PATH = "/ws/v1/korral/ready"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", default=default_state_dir(),
                        help="state directory of the stack [$KORRAL_STATE_DIR, .korral]")
    parser.add_argument("--rest-address", default=None, metavar="HOST:PORT",
                        help="ask this rmproxy's REST address instead of a local state dir (works from any host)")
    parser.add_argument("--broker", default=None, metavar="ADDR",
                        help="ask the broker at this frontend address (tcp://host:port) instead (any host)")
    security.add_curve_client_flags(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")


def _role(name: str) -> str:
    return name.split("-", 1)[0] if name.startswith("worker-") else name


def collect_status(state_dir: str, now: float | None = None) -> dict[str, Any]:
    """The status document: ``running``, ``ready``, ``processes`` (list of rows), ``addresses``.

    Raises ``StackError`` (``NoStack``) when the state dir holds no stack record.
    """
    info = load_stack(state_dir)
    doc: dict[str, Any] = {
        "state_dir": info.state_dir, "state": info.state, "addresses": info.addresses,
        "supervisord": None, "processes": [], "ready": None, "running": False,
    }
    sup = info.supervisord
    if sup is None or not sup.alive():
        return doc
    doc["supervisord"] = {"pid": sup.pid}
    try:
        rows = supervisor_rpc(info, timeout=3.0).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error, http.client.HTTPException) as exc:
        doc["error"] = f"supervisord (pid {sup.pid}) does not answer: {exc}"
        return doc
    doc["running"] = True
    for row in rows:
        state = row["statename"]
        started = int(row.get("start") or 0)
        clock_now = int(row.get("now") or (now or time.time()))
        doc["processes"].append({
            "name": row["name"], "role": _role(row["name"]), "pid": int(row.get("pid") or 0) or None,
            "state": state, "uptime_s": clock_now - started if state == "RUNNING" and started else None,
            "log": row.get("stdout_logfile"),
        })
    url = f"http://{target.connect_address(info.addresses['rest'])}{READY_PATH}"
    try:
        answer = netutil.http_get_json(url, timeout=2.0)
        doc["ready"] = answer.body if isinstance(answer.body, dict) else {"status": answer.status}
    except OSError as exc:
        doc["ready"] = {"ready": False, "error": f"{url}: {exc}"}
    try:
        doc["cluster"] = cluster_status.from_rest(info.addresses["rest"])
    except OSError as exc:
        doc["cluster"] = {"error": str(exc)}
    return doc


def _uptime(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    minutes, s = divmod(seconds, 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m{s:02d}s" if hours else f"{m}m{s:02d}s" if m else f"{s}s"


def format_status(doc: dict[str, Any]) -> str:
    """A human-readable table of ``collect_status``'s document."""
    if not doc["running"]:
        why = doc.get("error") or f"no process of the stack runs (recorded state: {doc['state']})"
        return f"stack in {doc['state_dir']}: not running: {why}"
    lines = [f"stack in {doc['state_dir']} (supervisord pid {doc['supervisord']['pid']})"]
    header = ("ROLE", "NAME", "PID", "STATE", "UPTIME")
    rows = [(p["role"], p["name"], str(p["pid"] or "-"), p["state"], _uptime(p["uptime_s"]))
            for p in doc["processes"]]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    a = doc["addresses"]
    lines.append(f"  SI {a.get('si')}  REST {a.get('rest')}  Redis {a.get('redis_url')}")
    lines.append(f"  broker frontend {a.get('broker_frontend')}  backend {a.get('broker_backend')}")
    lines.append(f"  ready: {json.dumps(doc['ready'], sort_keys=True)}")
    cluster = doc.get("cluster") or {}
    if "error" in cluster:
        lines.append(f"  cluster view unavailable: {cluster['error']}")
    elif cluster:
        lines.append(cluster_status.format_cluster(cluster))
    return "\n".join(lines)


def _healthy(doc: dict[str, Any]) -> bool:
    ready = doc.get("ready") or {}
    return (all(p["state"] in ("RUNNING", "STARTING") for p in doc["processes"])
            and isinstance(ready, dict) and ready.get("ready") is True)


def _remote(args: argparse.Namespace) -> int:
    try:
        if args.broker:
            doc = cluster_status.from_broker(args.broker, args.curve_secret, args.curve_server)
        else:
            doc = cluster_status.from_rest(args.rest_address)
    except (OSError, security.SecurityError, netutil.AddressError) as exc:
        print(json.dumps({"error": str(exc)}) if args.json else f"korral status: {exc}",
              file=sys.stdout if args.json else sys.stderr)
        return 1
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else cluster_status.format_cluster(doc))
    return 0 if doc.get("broker") and all(p.get("worker") for p in doc.get("partitions") or []) else 3


def run(args: argparse.Namespace) -> int:
    if args.broker or args.rest_address:
        return _remote(args)
    try:
        doc = collect_status(args.state_dir)
    except StackError as exc:
        if args.json:
            print(json.dumps({"state_dir": args.state_dir, "running": False, "error": str(exc)}))
        else:
            print(f"korral status: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else format_status(doc))
    if not doc["running"]:
        return 1
    return 0 if _healthy(doc) else 3
