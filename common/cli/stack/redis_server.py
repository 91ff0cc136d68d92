"""An embedded ``redis-server``: the command line, a PING check, and a start/stop handle.

``korral up`` runs Redis as a supervisord program built from ``redis_command``; the test
fixtures run it directly through ``RedisServer``. Either way the server binds loopback
only, keeps its files in one directory, and is stopped by its own pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.netutil import free_port

__all__ = [
    "RedisNotInstalled",
    "RedisStartError",
    "find_redis_server",
    "redis_command",
    "ping",
    "wait_for_ping",
    "RedisServer",
]

INSTALL_HINT = "install it with `apt-get install -y redis-server` (Debian/Ubuntu) or put it on PATH"


class RedisNotInstalled(RuntimeError):
    """No ``redis-server`` binary could be found."""


class RedisStartError(RuntimeError):
    """The embedded Redis did not answer PING before its deadline."""


def find_redis_server() -> str:
    """Path of the ``redis-server`` binary: ``$KORRAL_REDIS_SERVER``, else PATH, else /usr/bin, /usr/sbin."""
    explicit = os.environ.get("KORRAL_REDIS_SERVER")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise RedisNotInstalled(f"$KORRAL_REDIS_SERVER={explicit!r} is not an executable file")
    found = shutil.which("redis-server")
    if found:
        return found
    for candidate in ("/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(candidate, os.X_OK):
            return candidate
    raise RedisNotInstalled(f"redis-server not found; {INSTALL_HINT}")


def redis_command(port: int, data_dir: str | os.PathLike, *, host: str = "127.0.0.1",
                  persist: bool = True, binary: str | None = None) -> list[str]:
    """The argv of a foreground ``redis-server`` on ``host:port`` keeping its files in ``data_dir``.

    With ``persist`` the server keeps an append-only file there, so RM registrations and
    partition epochs survive a Redis restart under supervisord (epochs must only grow).
    Without it (tests) nothing is written to disk. Logs go to stdout.
    """
    argv = [
        binary or find_redis_server(),
        "--port", str(port),
        "--bind", host,
        "--dir", str(data_dir),
        "--daemonize", "no",
        "--protected-mode", "yes",
        "--logfile", "",
        "--save", "",
        "--appendonly", "yes" if persist else "no",
    ]
    return argv


def ping(url: str, timeout: float = 1.0) -> bool:
    """True when the Redis at ``url`` answers PING; any error (refused, auth, bad URL) is False."""
    import redis  # imported here: ``korral down`` and ``status`` do not need it

    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def wait_for_ping(url: str, deadline: float, interval: float = 0.05) -> bool:
    """Poll PING until it succeeds (True) or ``deadline`` (a ``time.monotonic`` value) passes (False)."""
    while True:
        if ping(url, timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@dataclass(slots=True)
class RedisServer:
    """A ``redis-server`` child process on loopback, owned by whoever calls ``start``.

    ``port`` 0 means "pick a free port at start". ``stop`` ends exactly this process
    (SIGTERM, then SIGKILL after ``timeout``) and is safe to call twice.
    """

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    persist: bool = False
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return Path(self.data_dir) / "redis.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, timeout: float = 10.0) -> "RedisServer":
        """Start the server and return once it answers PING; ``RedisStartError`` (with its log) if not."""
        if self.process is not None:
            raise RedisStartError(f"redis-server on port {self.port} already started (pid {self.process.pid})")
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        if self.port == 0:
            self.port = free_port(self.host)
        argv = redis_command(self.port, self.data_dir, host=self.host, persist=self.persist)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not ping(self.url, timeout=0.5):
            if self.process.poll() is not None or time.monotonic() >= deadline:
                code = self.process.poll()
                self.stop()
                why = f"exited with {code}" if code is not None else f"no PING answer in {timeout:g}s"
                raise RedisStartError(
                    f"embedded redis-server on {self.host}:{self.port} {why}; log {self.log_path}:\n"
                    + _tail(self.log_path))
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop this server by its pid and reap it; no-op when not running."""
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self.process = None

    def __enter__(self) -> "RedisServer":
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"
