"""``korral status``: the local view of a stack started by ``korral up``.

For each process of the stack: its role, supervisord program name, pid, supervisord
state and uptime; then rmproxy's readiness JSON (``/ws/v1/korral/ready``). Reads only
``stack.json``, supervisord's XML-RPC socket and the REST address; changes nothing.

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

from common import netutil
from common.stack_down import StackError, default_state_dir, load_stack, supervisor_rpc

__all__ = ["configure", "run", "collect_status", "format_status"]

READY_PATH = "/ws/v1/korral/ready"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", default=default_state_dir(),
                        help="state directory of the stack [$KORRAL_STATE_DIR, .korral]")
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
    host, port = netutil.parse_host_port(info.addresses["rest"], "rest address")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}{READY_PATH}"
    try:
        answer = netutil.http_get_json(url, timeout=2.0)
        doc["ready"] = answer.body if isinstance(answer.body, dict) else {"status": answer.status}
    except OSError as exc:
        doc["ready"] = {"ready": False, "error": f"{url}: {exc}"}
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
    return "\n".join(lines)


def _healthy(doc: dict[str, Any]) -> bool:
    ready = doc.get("ready") or {}
    return (all(p["state"] in ("RUNNING", "STARTING") for p in doc["processes"])
            and isinstance(ready, dict) and ready.get("ready") is True)


def run(args: argparse.Namespace) -> int:
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
