"""Shared fixtures and helpers: a real ``redis-server``, the ``korral`` CLI, real stacks via
``korral up``, the one wait helper (``wait_until``) and the one way to stop a process
(``stop_process``).

- ``redis_server``: a ``RedisServer`` on a free loopback port in a tmp dir, stopped after.
- ``korral``: run ``korral ARGS...`` as a subprocess (clean ``KORRAL_*`` environment).
- ``stack_factory``: start stacks with ``korral up --detach`` (free ports, tmp state dir);
  every stack it started is stopped with ``korral down`` at teardown, which then asserts,
  by pid, that no process of it is left (leftovers are SIGKILLed and the test fails).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common.netutil import free_ports, http_get_json
from common.cli.stack.redis_server import RedisServer
from common.cli.stack.down import NoStack, ProcId, live_children, load_stack

__all__ = ["UP_TIMEOUT", "korral_env", "run_korral", "wait_until", "wait_until_async", "stop_process", "StackHandle",
           "start_stack", "stop_and_verify", "Background"]

UP_TIMEOUT = 60.0  # seconds `korral up` may take to report ready before the fixture fails


def korral_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``KORRAL_*`` (a developer's exports must not leak in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_korral(*args: str, timeout: float = 90.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``korral ARGS`` with this interpreter; returns the completed process (text output)."""
    return subprocess.run([sys.executable, "-m", "common.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=korral_env(env), stdin=subprocess.DEVNULL)


def wait_until(predicate, timeout: float, what: str, context=None, *, interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy, and return that. At ``timeout``:
    AssertionError naming ``what``, the last value (an OSError counts as "not yet", e.g. a
    server still starting) and ``context()`` if given (e.g. the processes' logs)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(interval)
    raise _not_reached(what, timeout, last, context)


async def wait_until_async(predicate, timeout: float, what: str, context=None):
    """``wait_until`` inside a coroutine, for state the event loop's other tasks change: the
    event loop runs between two polls (``predicate`` is not called for an OSError here)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (last := predicate()):
        if loop.time() >= deadline:
            raise _not_reached(what, timeout, last, context)
        await asyncio.sleep(0)
    return last


def _not_reached(what: str, timeout: float, last, context) -> AssertionError:
    extra = f"\n{context()}" if context is not None else ""
    return AssertionError(f"{what} not reached in {timeout}s (last: {last}){extra}")


def stop_process(proc: subprocess.Popen, timeout: float = 5.0, *, group: bool = False) -> bool:
    """Stop a process this test started: SIGTERM by its pid (its process group with ``group``),
    SIGKILL after ``timeout``; reaped either way. True when it had to be killed."""
    if proc.poll() is not None:
        return False
    send = os.killpg if group else os.kill
    send(proc.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
    send(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
        return False
    except subprocess.TimeoutExpired:
        send(proc.pid, signal.SIGKILL)
        proc.wait(5)
        return True


@pytest.fixture
def korral():
    """``korral(*args, timeout=..., env=...) -> CompletedProcess``."""
    return run_korral


@pytest.fixture
def redis_server(tmp_path_factory):
    """A real ``redis-server`` (no persistence) on a free loopback port; ``.url``, ``.port``, ``.pid``."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class StackHandle:
    """A stack started by ``korral up --detach``: its addresses, state dir and processes."""

    state_dir: Path
    si_address: str
    rest_address: str
    redis_url: str
    broker_frontend: str
    broker_backend: str
    workers: int
    procs: dict[str, ProcId] = field(default_factory=dict)
    up_output: str = ""

    @property
    def pids(self) -> dict[str, int]:
        """Program name (``supervisord``, ``redis``, ``broker``, ``rmproxy``, ``worker-N``) -> pid."""
        return {name: p.pid for name, p in self.procs.items()}

    def korral(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return run_korral(*args, timeout=timeout)

    def status(self) -> dict:
        """``korral status --json`` of this stack."""
        return json.loads(run_korral("status", "--state-dir", str(self.state_dir), "--json").stdout)

    def ready(self) -> dict:
        """The body of rmproxy's ``/ws/v1/korral/ready``."""
        return http_get_json(f"http://{self.rest_address}/ws/v1/korral/ready").body

    def current_procs(self) -> dict[str, ProcId]:
        """Every process of the stack now: recorded ones plus supervisord's live children."""
        procs = dict(self.procs)
        try:
            procs.update(live_children(load_stack(self.state_dir)))
        except NoStack:
            pass
        return procs


def start_stack(state_dir: Path, workers: int = 2, extra: tuple[str, ...] = (),
                env: dict[str, str] | None = None) -> StackHandle:
    """``korral up --detach`` on free loopback ports (``env``: more environment for the stack's
    processes, e.g. ``KORRAL_TRENDS_INTERVAL``); fails the test with the output if not ready."""
    si, rest = free_ports(2)
    args = ["up", "--detach", "--state-dir", str(state_dir), "--si-address", f"127.0.0.1:{si}",
            "--rest-address", f"127.0.0.1:{rest}", "--workers", str(workers),
            "--timeout", str(UP_TIMEOUT), *extra]
    result = run_korral(*args, timeout=UP_TIMEOUT + 30, env=env)
    if result.returncode != 0:
        # `korral up` stops what it started on failure; make sure, then report its words.
        if (state_dir / "stack.json").exists():
            run_korral("down", "--state-dir", str(state_dir))
        pytest.fail(f"korral {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    info = load_stack(state_dir)
    handle = StackHandle(
        state_dir=state_dir, si_address=info.addresses["si"], rest_address=info.addresses["rest"],
        redis_url=info.addresses["redis_url"], broker_frontend=info.addresses["broker_frontend"],
        broker_backend=info.addresses["broker_backend"], workers=info.workers,
        procs=info.all_procs(), up_output=result.stdout,
    )
    return handle


def stop_and_verify(handle: StackHandle) -> list[str]:
    """``korral down`` the stack; returns problems (non-zero exit, processes left, which get SIGKILL)."""
    before = handle.current_procs()
    result = run_korral("down", "--state-dir", str(handle.state_dir))
    problems = []
    if result.returncode != 0:
        problems.append(f"korral down exited {result.returncode}: {result.stdout}{result.stderr}")
    left = {name: p for name, p in before.items() if p.alive()}
    for p in left.values():
        p.signal(signal.SIGKILL)
    if left:
        problems.append("left running after korral down (now killed): "
                        + ", ".join(f"{n} pid {p.pid}" for n, p in sorted(left.items())))
    return problems


@pytest.fixture
def stack_factory(tmp_path_factory):
    """``start(workers=2, extra=()) -> StackHandle``; all started stacks are downed and checked after."""
    started: list[StackHandle] = []

    def start(workers: int = 2, extra: tuple[str, ...] = ()) -> StackHandle:
        handle = start_stack(tmp_path_factory.mktemp("stack") / "state", workers, tuple(extra))
        started.append(handle)
        return handle

    yield start
    problems = [p for handle in started for p in stop_and_verify(handle)]
    if problems:
        pytest.fail("\n".join(problems))


class Background:
    """A load running beside a test: ``step()`` every ``interval`` seconds on a daemon thread,
    from ``with`` until its end (the thread is joined, at most 10 s)."""

    interval = 0.1

    def __init__(self, name: str) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def step(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stop.is_set():
            self.step()
            self.stop.wait(self.interval)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
