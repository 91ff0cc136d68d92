"""The worker's health file, for probes that cannot speak ZeroMQ (e.g. a Kubernetes exec probe).

A worker opens no port, so a container runtime cannot ask it anything. With
``korral worker --health-file PATH`` the loop rewrites PATH between turns, at most once a
second: the wall time of its last turn and of the last message it heard from the broker.
``korral worker --probe live|ready`` (run in the worker's container, with its environment,
so it reads the same ``--health-file`` and ``--stall-seconds``) checks it and exits 0 or 1:

- ``live``: the loop made a turn within ``--stall-seconds``, the bound after which the
  heartbeat thread stops beating and the broker declares the worker dead; past it the worker
  is hung and restarting it is right. A worker that cannot hear the broker is still live:
  it keeps its partition through a broker restart, and restarting it would lose the partition.
- ``ready``: live, and the broker was heard within ``EXPIRY`` (plus the write interval): the
  worker is a member of the cluster, as an owner or a spare.

Writing is best effort: a full or read-only disk is logged once and never stops scheduling.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from common.heartbeat import EXPIRY

log = logging.getLogger("korral.worker")

WRITE_EVERY = 1.0  # seconds between two writes of the file
READY_WITHIN = EXPIRY + WRITE_EVERY  # the broker heard this recently (as written) => ready


class HealthFile:
    """Written by the worker loop: ``update(loop)`` after each turn, rate-limited."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._written_at = float("-inf")
        self._failed = False
        # a file left by an earlier run of this container must not vouch for this one
        self.path.unlink(missing_ok=True)

    def update(self, loop: Any) -> None:
        """Record the loop's last turn (``_turn_at``) and when it last heard the broker (``broker_heard``),
        both monotonic, as wall times; at most every ``WRITE_EVERY`` seconds."""
        now = time.monotonic()
        if now - self._written_at < WRITE_EVERY:
            return
        self._written_at = now
        wall = time.time()
        heard = loop.broker_heard
        owned = loop.owned
        doc = {
            "pid": os.getpid(),
            "turn": wall - (now - loop._turn_at),
            "broker": None if heard is None else wall - (now - heard),
            "partition": None if owned is None else f"[{owned.rm_id}]{owned.partition}",
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.path)  # a probe never reads a half-written file
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.error("cannot write the health file %s: %s (probes reading it will fail)", self.path, exc)
            return
        self._failed = False


def check(path: str, kind: str, stall_seconds: float, now: float | None = None) -> tuple[bool, str]:
    """(healthy, why) for a ``live`` or ``ready`` probe of the health file at path."""
    now = time.time() if now is None else now
    try:
        doc = json.loads(Path(path).read_text())
        turn = float(doc["turn"])
        broker = None if doc.get("broker") is None else float(doc["broker"])
    except FileNotFoundError:
        return False, f"no health file {path} (the worker has not made its first turn, or writes elsewhere)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"health file {path} is unreadable: {exc}"
    where = f"worker pid {doc.get('pid')}, partition {doc.get('partition') or '(spare)'}"
    idle = now - turn
    if idle > stall_seconds:
        return False, f"the worker loop made no turn for {idle:.1f}s (> --stall-seconds {stall_seconds:g}): hung ({where})"
    if kind == "live":
        return True, f"live: last turn {idle:.1f}s ago ({where})"
    if broker is None:
        return False, f"not ready: the broker has not been heard since the worker started ({where})"
    silent = now - broker
    if silent > READY_WITHIN:
        return False, f"not ready: the broker has been silent for {silent:.1f}s (> {READY_WITHIN:g}s) ({where})"
    return True, f"ready: last turn {idle:.1f}s ago, broker heard {silent:.1f}s ago ({where})"
