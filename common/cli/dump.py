"""``korral dump``: write the full state dump of a stack (``GET /ws/v1/fullstatedump``) to a file.

The dump holds the config, partitions, queues, applications, nodes, allocations, reservations,
RM registrations and the processes of the stack; each partition is consistent in itself.
Writes atomically (a temporary file renamed into place). Exit 0 on success, 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from common.cli import target
from common.restclient import RestClient, RestError

__all__ = ["configure", "run", "fetch_dump"]


def configure(parser: argparse.ArgumentParser) -> None:
    target.add_flags(parser, "REST address of any rmproxy")
    parser.add_argument("--output", "-o", default=None,
                        help="file to write ('-' for stdout; default korral-dump-<UTC time>.json)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the dump [60]")


def fetch_dump(rest_address: str, timeout: float = 60.0) -> tuple[dict, str]:
    """The state dump as a dict and as the server's text; raises RestError naming what failed."""
    raw = RestClient(rest_address, timeout).get_raw("/ws/v1/fullstatedump")
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except ValueError as exc:
        raise RestError(f"the answer of /ws/v1/fullstatedump is not JSON: {exc}") from None
    if not isinstance(doc, dict) or "Partitions" not in doc:
        raise RestError("the answer of /ws/v1/fullstatedump is not a state dump")
    return doc, text


def run(args: argparse.Namespace) -> int:
    try:
        doc, text = fetch_dump(target.rest_address(args), args.timeout)
    except RestError as exc:
        print(f"korral dump: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output or time.strftime("korral-dump-%Y%m%dT%H%M%SZ.json", time.gmtime()))
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        print(f"korral dump: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    nodes = sum(len(n["nodesInfo"]) for n in doc.get("Nodes", []))
    print(f"wrote {out}: {len(doc['Partitions'])} partition(s), {len(doc.get('Applications', []))} "
          f"application(s), {nodes} node(s), {len(text)} bytes")
    for err in doc.get("Errors", []):
        print(f"warning: {err}", file=sys.stderr)
    return 0
