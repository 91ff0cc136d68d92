"""``korral config get | apply FILE | diff FILE | history | rollback N``: an RM's queues.yaml changed
on a running stack by an operator, through rmproxy's admin endpoint (``/ws/v1/korral/admin/config``).

- ``get`` prints the active config as ``/ws/v1/config`` does: the text ending with its
  ``checksum:`` line. Edit that file and ``apply`` it: the change is made against that checksum
  (compare-and-swap), so a change made by someone else in between is refused with both checksums,
  not overwritten. A file without a ``checksum:`` line is applied against the config read just
  before (``--checksum`` names one explicitly).
- ``apply --dry-run FILE`` reports what the config would do to the live partitions (queues that
  drain or go, usage over a new max, users over new limits, where placement would now put each
  running app) and changes nothing.
- ``diff FILE`` shows how FILE differs from the active config (unified diff, checksum lines left out).
- ``history`` lists every change (who, when, old and new checksum); ``rollback N`` restores the
  config change N replaced.

Where: ``--state-dir D`` (a ``korral up`` stack: its REST address and its admin token
``D/admin-token``; ``common.cli.target``) or ``--rest-address`` with ``--token-file`` or a client certificate
(``--tls-client-cert``/``--tls-client-key``, ``--tls-ca`` for the server's CA). ``--rm-id``
names the RM (default: the only one registered).

Exit status: 0 done (also "unchanged"), 1 refused or unreachable (the reason is printed; the
active config is kept), 2 bad flags.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

from common import security
from common.cli import target
from common.config.loader import file_checksum, strip_checksum
from common.restclient import RestClient, RestError, path_part
from common.units import human_resource

__all__ = ["configure", "run", "ACTIONS", "format_dry_run"]

ADMIN = "/ws/v1/korral/admin/config"
ALLOW_REMOVAL_FLAG = "--allow-partition-removal"  # rmproxy.errors names both in its refusal
ALLOW_REMOVAL_PARAM = "allowPartitionRemoval"
ACTIONS = {
    "get": "print the active config (ending with its checksum line)",
    "apply": "apply FILE (against the checksum in it, or the one read now); --dry-run: only report what it would do",
    "diff": "show how FILE differs from the active config",
    "history": "list the config changes: who, when, old and new checksum",
    "rollback": "restore the config that change N replaced",
}


def _common_flags(p: argparse.ArgumentParser) -> None:
    target.add_flags(p, "REST address of the rmproxy holding the RM (host:port, or https://host:port); "
                        "--state-dir also gives the stack's admin token (DIR/admin-token)")
    p.add_argument("--rm-id", help="the RM whose config it is (default: the only one registered)")
    p.add_argument("--token-file", default=os.environ.get("KORRAL_ADMIN_TOKEN_FILE") or None, metavar="FILE",
                   help="admin token file (its first NAME:TOKEN or TOKEN line) [$KORRAL_ADMIN_TOKEN_FILE]")
    security.add_tls_client_flags(p, client="this admin (the REST server's --rest-tls-client-ca)")
    p.add_argument("--json", action="store_true", help="print the API's JSON instead of text")


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    for name, help_text in ACTIONS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name in ("apply", "diff"):
            p.add_argument("file", help="the queues.yaml file")
        if name == "apply":
            p.add_argument("--dry-run", action="store_true",
                           help="report what the config would do to the live partitions; change nothing")
        if name == "rollback":
            p.add_argument("number", type=int, help="the change to undo (korral config history lists them)")
        if name in ("apply", "rollback"):
            p.add_argument("--checksum", help="make the change against this checksum (default: the file's "
                                              "checksum line, else the active config's read now)")
            p.add_argument(ALLOW_REMOVAL_FLAG, dest="allow_partition_removal", action="store_true",
                           help="make the change even if it empties the config or removes a partition that holds "
                                "nodes or applications (refused otherwise, naming what would go)")
        _common_flags(p)


def _client(args: argparse.Namespace) -> RestClient:
    address, token_file = target.rest_address(args), args.token_file
    state_dir = args.state_dir
    if state_dir and not token_file:
        from common.cli.stack.security import ADMIN_TOKEN_FILE
        local = Path(state_dir) / ADMIN_TOKEN_FILE
        token_file = str(local) if local.exists() else None
    token = None
    if token_file:
        try:
            token = next(iter(security.read_admin_tokens(token_file).values()))
        except security.SecurityError as exc:
            raise RestError(str(exc)) from None
    try:
        ctx = security.rest_client_ssl(args.tls_ca, args.tls_client_cert, args.tls_client_key)
    except security.SecurityError as exc:
        raise RestError(str(exc)) from None
    return RestClient(address, token=token, ssl_context=ctx)


def _rm_id(client: RestClient, wanted: str | None) -> str:
    if wanted:
        return wanted
    rms = sorted({p.get("rmID", "") for p in client.get("/ws/v1/partitions")})
    if len(rms) != 1:
        raise RestError(f"{'no RM is registered' if not rms else 'several RMs are registered: ' + ', '.join(rms)}"
                        f"{'' if not rms else '; name one with --rm-id'}")
    return rms[0]


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RestError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _change_text(doc: dict) -> str:
    if not doc["changed"]:
        return f"RM {doc['rmID']}: the config is unchanged (checksum {doc['newChecksum']}); nothing was done"
    record = doc.get("record") or {}
    number = f" as change {record['id']}" if record else ""
    warning = f"\nwarning: {doc['warning']}" if doc.get("warning") else ""
    return f"RM {doc['rmID']}: config changed {doc['oldChecksum']} -> {doc['newChecksum']}{number}{warning}"


def _get(client: RestClient, base: str, args) -> tuple[Any, str]:
    doc = client.get(base)
    if doc.get("default") and not args.json:
        print(f"korral config get: RM {doc['rmID']} has an empty config: the scheduler serves the default config "
              "below", file=sys.stderr)
    text = strip_checksum(doc["config"])
    return doc, text + ("" if text.endswith("\n") or not text else "\n") + f"checksum: {doc['checksum']}\n"


def _apply(client: RestClient, base: str, args) -> tuple[Any, str]:
    raw = _read_file(args.file)
    body = strip_checksum(raw).encode("utf-8")
    if args.dry_run:
        doc = client.send_json("POST", f"{base}/dry-run", body, {"Content-Type": "application/x-yaml"})
        return doc, format_dry_run(doc, args.file)
    expected = args.checksum or file_checksum(raw) or client.get(base)["checksum"]
    doc = client.send_json("PUT", base + _allow(args), body, {"Content-Type": "application/x-yaml",
                                                               "If-Match": expected})
    return doc, _change_text(doc)


def _allow(args) -> str:
    return f"?{ALLOW_REMOVAL_PARAM}=true" if args.allow_partition_removal else ""


def _diff(client: RestClient, base: str, args) -> tuple[Any, str]:
    active = strip_checksum(client.get(base)["config"]).splitlines(keepends=True)
    wanted = strip_checksum(_read_file(args.file)).splitlines(keepends=True)
    lines = list(difflib.unified_diff(active, wanted, "active", args.file))
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return {"differs": bool(lines), "diff": text}, (text.rstrip("\n") if lines else "no differences")


def _history(client: RestClient, base: str, args) -> tuple[Any, str]:
    doc = client.get(f"{base}/history")
    from common.cli.explain import fmt_time
    from common.cli.restcli import format_table
    rows = [[r["id"], fmt_time(r["time"]), r["who"], r["action"], r["oldChecksum"][:12], r["newChecksum"][:12],
             r.get("note", "")] for r in doc["records"]]
    if not rows:
        return doc, f"RM {doc['rmID']}: no config change recorded"
    return doc, format_table(["N", "TIME", "WHO", "ACTION", "OLD", "NEW", "NOTE"], rows)


def _rollback(client: RestClient, base: str, args) -> tuple[Any, str]:
    expected = args.checksum or client.get(base)["checksum"]
    doc = client.send_json("POST", f"{base}/rollback/{args.number}{_allow(args)}", b"", {"If-Match": expected})
    return doc, _change_text(doc)


_ACTIONS = {"get": _get, "apply": _apply, "diff": _diff, "history": _history, "rollback": _rollback}


def run(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
        base = f"{ADMIN}/{path_part(_rm_id(client, args.rm_id))}"
        doc, text = _ACTIONS[args.action](client, base, args)
    except RestError as exc:
        print(f"korral config {args.action}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else text, end="" if text.endswith("\n") and not args.json else "\n")
    return 0


# ---------------------------------------------------------------- the dry-run report

def _res(r: dict | None) -> str:
    return human_resource(r or {}, False)


def format_dry_run(doc: dict, source: str) -> str:
    """The dry-run answer as text, one block per partition."""
    head = (f"dry run of {source} for RM {doc['rmID']} (checksum {doc['oldChecksum'][:12]} -> "
            f"{doc['newChecksum'][:12]}{', unchanged' if doc['unchanged'] else ''}); nothing was changed")
    lines = [head] + [f"  warning: {w}" for w in doc.get("warnings", [])]
    if doc.get("refusal"):
        lines.append(f"  applying it would be refused: {doc['refusal']}")
    for part in doc["partitions"]:
        lines += _partition_lines(doc["rmID"], part)
    return "\n".join(lines)


def _quota_preemption_line(qp: dict) -> str:
    if not qp.get("enabled"):
        return f"quota preemption: none ({qp.get('reason', 'not reported')})"
    if not qp["victimCount"]:
        return f"quota preemption after {qp['delay']}: nothing to take ({qp['reason']})"
    apps = sorted({v["applicationID"] for v in qp["victims"]})
    return (f"quota preemption after {qp['delay']}: would take {_res(qp['preemptable'])} by preempting "
            f"{qp['victimCount']} allocations of {len(apps)} applications ({', '.join(apps[:10])}"
            f"{', ...' if len(apps) > 10 else ''}) if the usage is still the same then")


def _partition_lines(rm_id: str, part: dict) -> list[str]:
    name = f"[{rm_id}]{part['partition']}"
    if "error" in part:
        return [f"{name}: cannot evaluate: {part['error']}"]
    action = part.get("action")
    if action == "add":
        return [f"{name}: added ({part.get('note', '')})"]
    if action == "remove":
        return [f"{name}: removed: {part['applications']} applications fail (PartitionRemoved), "
                f"{part['allocations']} allocations are released, {part['nodes']} nodes are removed"]
    if part.get("refused"):
        return [f"{name}: the partition would refuse this config: {part['refused']}"]
    out = [f"{name}: kept"]
    q = part["queues"]
    out += [f"  queue {d['queue']} drains: left out of the config, it still holds {d['applications']} "
            f"applications using {_res(d['allocated'])}" for d in q["draining"]]
    out += [f"  queue {path} is removed (empty)" for path in q["removed"]]
    out += [f"  queue {path} is added" for path in q["added"]]
    for d in part["overMax"]:
        out.append(f"  queue {d['queue']} is over its new max {_res(d['max'])} by {_res(d['overBy'])} (uses "
                   f"{_res(d['allocated'])}): nothing more is placed there until its usage drops below the max")
        out.append("    " + _quota_preemption_line(d.get("quotaPreemption") or {}))
    for d in part["limits"]:
        who = f"user {d['user']}" if "user" in d else f"group {d['group']}"
        over = [f"over maxresources {_res(d['maxResources'])} by {_res(d['overBy'])}"] if d["overBy"] else []
        if d["maxApplications"] and d["runningApplications"] > d["maxApplications"]:
            over.append(f"{d['runningApplications']} running applications, maxapplications {d['maxApplications']}")
        out.append(f"  {who} in {d['queue']} would exceed the new limit: {'; '.join(over)} "
                   f"(applications {', '.join(d['applications'])})")
    pl = part["placement"]
    out.append(f"  placement of the {pl['unchanged'] + pl['movedTotal'] + pl['rejectedTotal']} active "
               f"applications if submitted now: {pl['unchanged']} where they are, {pl['movedTotal']} elsewhere, "
               f"{pl['rejectedTotal']} rejected (running applications stay where they are)")
    out += [f"    {m['applicationID']} ({m['user']}): {m['queue']} -> {m['wouldBe']}" for m in pl["moved"]]
    out += [f"    {r['applicationID']} ({r['user']}, in {r['queue']}): rejected: {r['reason']}" for r in pl["rejected"]]
    return out
