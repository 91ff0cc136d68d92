"""``korral explain APP [KEY]``: why an application's asks wait (a REST client).

For each pending ask (or the one named): its scheduling state and reason, the queue whose
headroom or the user/group limit that holds it, and how many nodes each node check rejected,
by reason (kube-scheduler's wording: unschedulable, not ready, reserved for another ask, the
requested node name, untolerated taint, node affinity/selector, free ports, Insufficient
<resource>, unsupported constraint) or found fitting. Reads
``/ws/v1/korral/partition/{p}/application/{app}/allocation/{key}/explain``.

An application that no longer waits for anything (finished, removed by the RM, or expired from
the finished list) is answered from the partition's records: its final state, since when, and
why. Reads ``/ws/v1/korral/partition/{p}/application/{app}/explain`` first.

Without ``--partition`` every partition of the stack is searched and the answer starts with the
one holding the application; with it, an application found elsewhere is named there, with the
command that explains it.

Exit status: 0 on success, 1 when the REST API cannot be reached or answers an error (the
application was never known or is long forgotten, or the ask does not exist: its message is
printed), 2 for bad flags.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

from common.cli import invocation, target
from common.restclient import RestClient, RestError, path_part

__all__ = ["configure", "run", "locate", "format_explanation", "format_grouped", "format_ended"]

MAX_ASKS = 50  # pending asks explained when no KEY is given


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("application", help="application ID")
    parser.add_argument("key", nargs="?", help="allocation key of one ask (default: every pending ask, "
                                               f"at most {MAX_ASKS})")
    target.add_flags(parser, "REST address of any rmproxy")
    parser.add_argument("--partition", default=None,
                        help="partition of the application: name or [rmID]name (default: every partition is "
                             "searched, and the one holding it named)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of text")


def format_ended(status: dict[str, Any]) -> str:
    """An application that no longer waits for anything: how and when it ended."""
    app, when = status["applicationID"], fmt_time(status.get("since"))
    where = f" (queue {status['queue']})" if status.get("queue") else ""
    why = status.get("reason") or ""
    if status.get("removed"):
        return f"application {app} was removed by the RM at {when} while {status['state']}{where}: nothing of it waits"
    expired = ", and has since expired from the partition's list of finished applications" if status.get("expired") else ""
    return f"application {app} is {status['state']} since {when}{where}{': ' + why if why else ''}{expired}: nothing of it waits"


def fmt_time(ns: int | None) -> str:
    if not ns:
        return "(unknown time)"
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


SHOWN_KEYS = 5  # keys named in the heading of a group of asks that wait for the same reasons


def format_explanation(e: dict[str, Any], keys: list[str] | None = None) -> str:
    """One explanation; ``keys`` (several asks that wait for exactly the same reasons) makes the
    heading name them and count them instead of the one ask."""
    keys = keys or [e["allocationKey"]]
    if len(keys) == 1:
        who = f"ask {keys[0]}"
    else:
        shown = ", ".join(keys[:SHOWN_KEYS]) + (f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")
        who = f"{len(keys)} asks ({shown})"
    lines = [f"{who} of {e['applicationID']}: {e['pending']} pending{' each' if len(keys) > 1 else ''}, "
             f"state {e['state'] or '-'}" + (f" ({e['reason']})" if e.get("reason") else "")]
    if e.get("queueHeadroomBlockedBy"):
        lines.append(f"  held by the headroom of queue {e['queueHeadroomBlockedBy']}")
    if e.get("limitBlockedBy"):
        lines.append(f"  held by a limit: {e['limitBlockedBy']}")
    if e.get("gangTopology") and e["gangTopology"] != e.get("reason"):
        lines.append(f"  gang topology: {e['gangTopology']}")
    if e.get("reservedNode"):
        lines.append(f"  has node {e['reservedNode']} reserved")
    nodes = e.get("nodes") or {}
    lines.append("  nodes: " + (", ".join(f"{stage} {n}" for stage, n in nodes.items()) or "none registered"))
    return "\n".join(lines)


def format_grouped(answers: list[dict[str, Any]]) -> str:
    """Explanations, asks that wait for exactly the same reasons shown once with a count (a job
    of 37 identical pods is one block, not 37), groups in the order of their first ask."""
    groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for e in answers:
        same = json.dumps({k: v for k, v in e.items() if k != "allocationKey"}, sort_keys=True, default=str)
        groups.setdefault(same, (e, []))[1].append(e["allocationKey"])
    return "\n".join(format_explanation(e, keys) for e, keys in groups.values())


NOT_FOUND = "Application not found"


def _app_base(part: dict, app_id: str) -> str:
    return f"/ws/v1/korral/partition/{path_part(part['name'])}/application/{path_part(app_id)}"


def _status(client: RestClient, part: dict, app_id: str) -> dict | None:
    """Where the application stands in ``part``; None when the partition does not know it."""
    try:
        return client.get(f"{_app_base(part, app_id)}/explain", rmID=part.get("rmID", ""), limit=str(MAX_ASKS))
    except RestError as exc:
        if NOT_FOUND in str(exc):
            return None
        raise


def _full_name(part: dict) -> str:
    return f"[{part.get('rmID', '')}]{part['name']}"


def locate(client: RestClient, app_id: str, wanted: str | None) -> tuple[dict, dict, str]:
    """(partition, the application's status there, a line saying where it was found) of
    ``app_id``: in the partition ``wanted`` names, else searched in every partition. RestError
    naming the partitions searched (and where it is instead) when it is not there."""
    parts = client.partitions(wanted)
    if wanted:
        status = _status(client, parts[0], app_id)
        if status is not None:
            return parts[0], status, ""
        others = [p for p in client.partitions(None) if _full_name(p) != _full_name(parts[0])]
    else:
        others = parts
    found = [(p, st) for p in others if (st := _status(client, p, app_id)) is not None]
    if wanted:
        where = "; ".join(f"it is in partition {_full_name(p)}: {invocation()} explain {app_id} --partition "
                          f"'{_full_name(p)}'" for p, _ in found) or "nor in any other partition"
        raise RestError(f"{NOT_FOUND}: application {app_id} is not in partition {_full_name(parts[0])}; {where}")
    if not found:
        searched = ", ".join(_full_name(p) for p in parts) or "none: no RM is registered"
        raise RestError(f"{NOT_FOUND}: application {app_id} is in no partition (searched: {searched})")
    if len(found) > 1:
        names = ", ".join(_full_name(p) for p, _ in found)
        raise RestError(f"application {app_id} is in several partitions ({names}): name one with --partition")
    part, status = found[0]
    return part, status, f"application {app_id} is in partition {_full_name(part)}"


def run(args: argparse.Namespace) -> int:
    try:
        client = RestClient(target.rest_address(args))
        part, status, where = locate(client, args.application, args.partition)
        rm_id = part.get("rmID", "")
        app_base = _app_base(part, args.application)
        keys = [] if not status.get("active") else [args.key] if args.key else status.get("pendingKeys", [])
        answers = [client.get(f"{app_base}/allocation/{path_part(k)}/explain", rmID=rm_id) for k in keys]
    except RestError as exc:
        print(f"korral explain: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answers if status.get("active") else status, indent=2))
        return 0
    if where:
        print(where)
    if not status.get("active"):
        print(format_ended(status))
    elif not answers:
        print(f"application {args.application} has no pending asks")
    else:
        print(format_grouped(answers))
    return 0
