"""``korral queues | apps | nodes``: thin clients of the REST API (``/ws/v1``).

Each prints readable tables (or the API's JSON with ``--json``) for every partition of the
stack, or the one named by ``--partition``. Resources are shown in the dashboard's units
(``64 GiB``, ``16 cores``); ``--raw`` prints YuniKorn's integers (bytes, millicores) (``name``, or ``[rmID]name`` when several RMs have a
partition of that name). ``apps --queue root.a`` lists that queue's active applications.

Exit status: 0 on success, 1 when the REST API cannot be reached or answers an error (its
message is printed), 2 for bad flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from common.cli import target
from common.restclient import RestClient, RestError, path_part
from common.units import human_resource

__all__ = ["configure", "run", "format_table"]


def configure(parser: argparse.ArgumentParser) -> None:
    target.add_flags(parser, "REST address of any rmproxy")
    parser.add_argument("--partition", help="only this partition: name or [rmID]name (default: all)")
    if parser.get_default("_name") == "apps":
        parser.add_argument("--queue", help="only the active applications of this queue (full path, root.a)")
        parser.add_argument("--state", action="append", default=[],
                            help="only applications in this state (repeatable), e.g. Running")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of tables")
    parser.add_argument("--raw", action="store_true",
                        help="resources as exact integers (bytes, millicores) instead of 64 GiB, 16 cores")


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain text table with columns sized to their content."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _pct(r: dict | None) -> str:
    return ",".join(f"{k}={v}%" for k, v in sorted((r or {}).items())) or "-"


def _queue_rows(q: dict, depth: int, rows: list, raw: bool) -> None:
    name = "  " * depth + (q["queuename"].rsplit(".", 1)[-1] if depth else q["queuename"])
    rows.append([name, q["status"]] + [human_resource(q.get(f), raw) for f in
                                       ("guaranteedResource", "maxResource", "allocatedResource", "pendingResource")]
                + [_pct(q.get("absUsedCapacity")), q.get("runningApps", 0)])
    for c in q.get("children", []):
        _queue_rows(c, depth + 1, rows, raw)


def _queues(client: RestClient, args, part: dict) -> tuple[Any, str]:
    tree = client.get(f"/ws/v1/partition/{path_part(part['name'])}/queues", rmID=part.get("rmID", ""))
    rows: list = []
    _queue_rows(tree, 0, rows, args.raw)
    return tree, format_table(["QUEUE", "STATE", "GUARANTEED", "MAX", "ALLOCATED", "PENDING", "USED",
                               "RUNNING"], rows)


def _apps(client: RestClient, args, part: dict) -> tuple[Any, str]:
    base = f"/ws/v1/partition/{path_part(part['name'])}"
    if args.queue:
        apps = client.get(f"{base}/queue/{path_part(args.queue)}/applications", rmID=part.get("rmID", ""))
    else:
        apps = client.get(f"{base}/applications", rmID=part.get("rmID", ""))
    if args.state:
        wanted = {s.lower() for s in args.state}
        apps = [a for a in apps if a["applicationState"].lower() in wanted]
    rows = [[a["applicationID"], a["queueName"], a["user"], a["applicationState"], len(a["allocations"]),
             sum(r.get("pendingCount", 0) for r in a["requests"]), human_resource(a["usedResource"], args.raw),
             human_resource(a["pendingResource"], args.raw)] for a in apps]
    return apps, format_table(["APPLICATION", "QUEUE", "USER", "STATE", "ALLOCS", "PENDING ASKS", "USED",
                               "PENDING"], rows)


def _nodes(client: RestClient, args, part: dict) -> tuple[Any, str]:
    nodes = client.get(f"/ws/v1/partition/{path_part(part['name'])}/nodes", rmID=part.get("rmID", ""))
    rows = [[n["nodeID"], "yes" if n["schedulable"] else "no", human_resource(n["capacity"], args.raw),
             human_resource(n["allocated"], args.raw), human_resource(n["available"], args.raw),
             _pct(n["utilized"]), len(n["allocations"])] for n in nodes]
    return nodes, format_table(["NODE", "SCHEDULABLE", "CAPACITY", "ALLOCATED", "AVAILABLE", "UTILISED",
                                "ALLOCS"], rows)


_COMMANDS = {"queues": _queues, "apps": _apps, "nodes": _nodes}


def run(args: argparse.Namespace) -> int:
    name = getattr(args, "_name", "queues")
    show = _COMMANDS.get(name)
    if show is None:
        print(f"korral {name}: not a REST client command (one of {', '.join(_COMMANDS)})", file=sys.stderr)
        return 2
    try:
        client = RestClient(target.rest_address(args))
        parts = client.partitions(args.partition)
        results = []
        for p in parts:
            try:
                results.append((p, *show(client, args, p)))
            except RestError as exc:
                # apps --queue over every partition: partitions without that queue are skipped
                if args.partition or "Queue not found" not in str(exc):
                    raise
        if parts and not results:
            raise RestError(f"queue {getattr(args, 'queue', '')!r}: Queue not found in any partition")
    except RestError as exc:
        print(f"korral {name}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        doc = [{"rmID": p.get("rmID"), "partition": p["name"], name: data} for p, data, _ in results]
        print(json.dumps(doc, indent=2))
        return 0
    if not results:
        print("no partitions: no RM is registered")
    for p, _, text in results:
        print(f"[{p.get('rmID')}]{p['name']}")
        print(text)
        print()
    return 0
