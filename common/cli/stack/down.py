"""``korral down``: stop a stack started by ``korral up``, and the stack's on-disk record.

A stack lives in a state directory. ``stack.json`` there records where every process
listens and which processes belong to the stack, each as a ``ProcId`` (pid plus the
kernel's start time of that pid), so a recycled pid is never mistaken for ours and
nothing is ever found or killed by name.

Stopping asks supervisord to shut down (it stops its children with SIGTERM, then
SIGKILL after ``stopwaitsecs``), waits for every recorded process to be gone, kills by
pid whatever outlived the deadline, and reports what it had to kill.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import time
import xmlrpc.client
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "STACK_FILE",
    "StackError",
    "NoStack",
    "ProcId",
    "StackInfo",
    "DownReport",
    "default_state_dir",
    "load_stack",
    "save_stack",
    "supervisor_rpc",
    "live_children",
    "stop_stack",
    "supervisord_from_pidfile",
    "configure",
    "run",
]

STACK_FILE = "stack.json"
STACK_FILE_VERSION = 1


class StackError(RuntimeError):
    """The stack cannot be started, inspected or stopped; the message says why and what to do."""


class NoStack(StackError):
    """The state directory holds no stack record."""


def default_state_dir() -> str:
    """``$KORRAL_STATE_DIR`` or ``.korral`` in the current directory."""
    return os.environ.get("KORRAL_STATE_DIR", ".korral")


@dataclass(frozen=True, slots=True)
class ProcId:
    """A process identity that survives pid reuse: the pid and its start time in clock ticks."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> "ProcId | None":
        """The identity of the live process ``pid`` now, or ``None`` if there is none."""
        ticks = _start_ticks(pid)
        return None if ticks is None else cls(pid, ticks)

    def alive(self) -> bool:
        """True while this very process runs (a zombie or a recycled pid counts as gone)."""
        return _start_ticks(self.pid) == self.start_ticks

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to this process if it is still this process; True when sent."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, signum)
            return True
        except ProcessLookupError:
            return False


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or None when the pid is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(slots=True)
class StackInfo:
    """Everything ``stack.json`` records about one stack.

    ``addresses`` maps ``si``, ``rest``, ``broker_frontend``, ``broker_backend``,
    ``redis_url`` to what the processes listen on; ``processes`` maps supervisord
    program names (``redis``, ``broker``, ``rmproxy``, ``worker-0``...) to ``ProcId``.
    ``state`` is ``starting``, ``running``, ``stopping`` (``korral down`` at work) or ``stopped``.
    """

    state_dir: str
    config_path: str
    socket_path: str
    pidfile: str
    logs_dir: str
    addresses: dict[str, str]
    workers: int
    redis_embedded: bool
    supervisord: ProcId | None = None
    processes: dict[str, ProcId] = field(default_factory=dict)
    state: str = "starting"
    started_at: float = 0.0
    security: str = ""  # what protects the links (``StackSecurity.describe``)
    version: int = STACK_FILE_VERSION

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["supervisord"] = asdict(self.supervisord) if self.supervisord else None
        data["processes"] = {name: asdict(p) for name, p in self.processes.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "StackInfo":
        if data.get("version") != STACK_FILE_VERSION:
            raise StackError(f"{STACK_FILE}: unsupported version {data.get('version')!r} "
                             f"(this korral writes version {STACK_FILE_VERSION})")
        data = dict(data)
        sup = data.pop("supervisord", None)
        procs = data.pop("processes", {}) or {}
        info = cls(**data)
        info.supervisord = ProcId(**sup) if sup else None
        info.processes = {name: ProcId(**p) for name, p in procs.items()}
        return info

    def all_procs(self) -> dict[str, ProcId]:
        """Every recorded process of the stack, supervisord included."""
        procs = dict(self.processes)
        if self.supervisord is not None:
            procs["supervisord"] = self.supervisord
        return procs


def load_stack(state_dir: str | os.PathLike) -> StackInfo:
    """Read ``stack.json`` of ``state_dir``; ``NoStack`` when absent, ``StackError`` when unreadable."""
    path = Path(state_dir) / STACK_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise NoStack(f"no stack in {state_dir} ({path} does not exist)") from None
    except (OSError, ValueError) as exc:
        raise StackError(f"{path} is unreadable: {exc}") from None
    try:
        return StackInfo.from_json(data)
    except TypeError as exc:
        raise StackError(f"{path} is not a korral stack record: {exc}") from None


def save_stack(info: StackInfo) -> None:
    """Write ``stack.json`` atomically (a reader never sees half a file)."""
    path = Path(info.state_dir) / STACK_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info.to_json(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix socket, with a timeout (supervisor's own has none)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__()
        self._path, self._timeout = path, timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixConnection(self._path, self._timeout)


def supervisor_rpc(info: StackInfo, timeout: float = 5.0) -> Any:
    """An XML-RPC proxy to the stack's supervisord (``proxy.supervisor.getAllProcessInfo()``...)."""
    return xmlrpc.client.ServerProxy("http://localhost", transport=_UnixTransport(info.socket_path, timeout))


def live_children(info: StackInfo, timeout: float = 5.0) -> dict[str, ProcId]:
    """The running children of supervisord now, by program name; empty if it does not answer."""
    try:
        rows = supervisor_rpc(info, timeout).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error, http.client.HTTPException):
        return {}
    found: dict[str, ProcId] = {}
    for row in rows:
        pid = int(row.get("pid") or 0)
        ident = ProcId.of(pid) if pid > 0 else None
        if ident is not None:
            found[row["name"]] = ident
    return found


@dataclass(slots=True)
class DownReport:
    """What ``stop_stack`` did: processes that stopped by themselves, those it had to kill, and leftovers."""

    stopped: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def stop_stack(state_dir: str | os.PathLike, timeout: float = 30.0) -> DownReport:
    """Stop every process of the stack in ``state_dir`` and verify, by pid, that none is left.

    Raises ``NoStack`` when there is no record. Never raises because a process is
    already gone; ``report.left`` is non-empty only if a process survived SIGKILL.
    """
    info = load_stack(state_dir)
    procs = info.all_procs()
    procs.update(live_children(info))
    # Tells a foreground `korral up` watching supervisord that this stop is deliberate.
    info.state = "stopping"
    save_stack(info)
    deadline = time.monotonic() + timeout
    sup = info.supervisord or supervisord_from_pidfile(info)
    if sup is not None:
        procs["supervisord"] = sup
    if sup is not None and sup.alive():
        try:
            supervisor_rpc(info).supervisor.shutdown()
        except (OSError, xmlrpc.client.Error, http.client.HTTPException):
            sup.signal(signal.SIGTERM)  # supervisord stops its children on SIGTERM too
    else:
        # supervisord is gone (crashed or killed): its orphans get the signal it would have sent.
        for proc in procs.values():
            _signal_group(proc, signal.SIGTERM)
    report = DownReport()
    _wait_gone(procs.values(), deadline)
    for name, proc in sorted(procs.items()):
        if not proc.alive():
            report.stopped.append(f"{name} (pid {proc.pid})")
            continue
        _signal_group(proc, signal.SIGKILL)
        report.killed.append(f"{name} (pid {proc.pid})")
    _wait_gone(procs.values(), time.monotonic() + 5.0)
    report.left = [f"{n} (pid {p.pid})" for n, p in sorted(procs.items()) if p.alive()]
    if not report.left:
        info.state = "stopped"
        info.processes = {}
        info.supervisord = None
        save_stack(info)
        for leftover in (info.pidfile, info.socket_path):
            Path(leftover).unlink(missing_ok=True)
    return report


def supervisord_from_pidfile(info: StackInfo) -> ProcId | None:
    """The stack's supervisord when ``korral up`` was stopped before recording it.

    From its pid file, or, when it was stopped before supervisord wrote one, the process
    running supervisord with exactly this stack's config file. Trusted only if that pid runs
    supervisord with this stack's config file.
    """
    try:
        pids = [int(Path(info.pidfile).read_text().strip())]
    except (OSError, ValueError):
        pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if info.config_path.encode() in cmdline and any(b"supervisord" in part for part in cmdline):
            return ProcId.of(pid)
    return None


def _signal_group(proc: ProcId, signum: int) -> None:
    """Signal the process, and its process group when it leads one (supervisord's children do)."""
    if not proc.alive():
        return
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signum)
            return
    except (ProcessLookupError, PermissionError):
        pass
    proc.signal(signum)


def _wait_gone(procs: Any, deadline: float) -> None:
    procs = list(procs)
    while any(p.alive() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", default=default_state_dir(),
                        help="state directory of the stack [$KORRAL_STATE_DIR, .korral]")
    parser.add_argument("--timeout", type=float, default=os.environ.get("KORRAL_DOWN_TIMEOUT", "30"),
                        help="seconds to wait for a clean stop before killing by pid [$KORRAL_DOWN_TIMEOUT, 30]")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when nothing of the stack is left (also when it was already stopped), 1 otherwise."""
    try:
        info = load_stack(args.state_dir)
        if info.state == "stopped" and not any(p.alive() for p in info.all_procs().values()):
            print(f"korral down: the stack in {args.state_dir} is already stopped")
            return 0
        report = stop_stack(args.state_dir, timeout=args.timeout)
    except NoStack as exc:
        print(f"korral down: {exc}", file=sys.stderr)
        return 1
    except StackError as exc:
        print(f"korral down: {exc}", file=sys.stderr)
        return 1
    if report.killed:
        print(f"korral down: killed after {args.timeout:g}s: {', '.join(report.killed)}", file=sys.stderr)
    if report.left:
        print(f"korral down: still running, could not stop: {', '.join(report.left)}", file=sys.stderr)
        return 1
    print(f"korral down: stopped {len(report.stopped) + len(report.killed)} processes; "
          f"nothing of the stack in {args.state_dir} is left (logs kept in {info.logs_dir})")
    return 0
