"""A throwaway local stack for benchmarks: ``korral up --detach`` in a temp dir, ``korral down`` after."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common.netutil import free_ports

__all__ = ["LocalStack"]


class LocalStack:
    """``with LocalStack(workers=2) as s:`` -> ``s.si_address``, ``s.rest_address``, ``s.processes()``."""

    def __init__(self, workers: int = 2, extra: tuple[str, ...] = (), keep_logs: bool = False) -> None:
        self.workers = workers
        self.extra = extra
        self.keep_logs = keep_logs
        self.dir = Path(tempfile.mkdtemp(prefix="korral-bench-"))
        si, rest = free_ports(2)
        self.si_address = f"127.0.0.1:{si}"
        self.rest_address = f"127.0.0.1:{rest}"

    def _korral(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "common.cli", *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def __enter__(self) -> "LocalStack":
        r = self._korral("up", "--detach", "--state-dir", str(self.dir / "state"), "--si-address",
                         self.si_address, "--rest-address", self.rest_address, "--workers", str(self.workers),
                         *self.extra)
        if r.returncode != 0:
            raise RuntimeError(f"korral up failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return self

    def processes(self) -> dict[str, int]:
        """Program name -> pid, as the stack recorded them at start."""
        info = json.loads((self.dir / "state" / "stack.json").read_text())
        return {name: p["pid"] for name, p in info.get("processes", {}).items()}

    def __exit__(self, *exc) -> None:
        self._korral("down", "--state-dir", str(self.dir / "state"))
        if not self.keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)
