"""CPU seconds per process of a local stack, from /proc, for the benchmarks' breakdowns."""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["RM_PROCESS", "cpu_seconds", "cpu_snapshot", "cpu_delta"]

RM_PROCESS = "rm (this process)"


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process and its waited-for children, from /proc (None if gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float | None]:
    """Each named process's CPU seconds, and this process's (the RM) as ``RM_PROCESS``."""
    snap = {name: cpu_seconds(pid) for name, pid in pids.items()}
    snap[RM_PROCESS] = time.process_time()
    return snap


def cpu_delta(before: dict, after: dict) -> dict[str, float | None]:
    """CPU seconds each process used between two snapshots (None if it went away)."""
    return {k: (round(after[k] - v, 3) if v is not None and after.get(k) is not None else None)
            for k, v in before.items()}
