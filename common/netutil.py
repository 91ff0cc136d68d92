"""Small network helpers for the local stack: addresses, free ports, waiting with a deadline.

Everything here is loopback-friendly plumbing used by ``korral up``, ``korral status``
and the test fixtures. Waits are bounded by an explicit deadline (a ``time.monotonic``
value) so no caller can hang forever; the clock and the sleep are parameters so tests
can drive them without sleeping.
"""

from __future__ import annotations

import errno
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AddressError",
    "WaitTimeout",
    "HttpAnswer",
    "parse_host_port",
    "parse_tcp_endpoint",
    "free_port",
    "free_ports",
    "port_in_use",
    "bind_error",
    "wait_for_port",
    "http_get_json",
    "wait_for_http",
]


class AddressError(ValueError):
    """An address given by a user that cannot be used; the message names the flag/object."""


class WaitTimeout(TimeoutError):
    """A wait ran past its deadline; ``last`` holds the last observation (or error) seen."""

    def __init__(self, message: str, last: Any = None) -> None:
        super().__init__(message)
        self.last = last


def parse_host_port(value: str, what: str = "address") -> tuple[str, int]:
    """Split ``HOST:PORT`` (or ``[v6]:PORT``) into host and port.

    Raises ``AddressError`` naming ``what`` (e.g. ``--si-address``) when the value is not
    a host and a port in 1..65535. Port 0 is refused: the stack prints where each process
    listens, so every port must be known before a process starts.
    """
    text = (value or "").strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if not sep:
            raise AddressError(f"{what}: {value!r} is not HOST:PORT (unclosed '[')")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise AddressError(f"{what}: {value!r} is not HOST:PORT (no ':PORT')")
    if not host:
        raise AddressError(f"{what}: {value!r} has no host")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise AddressError(f"{what}: {value!r} has no valid port (1..65535)")
    return host, int(port_text)


def parse_tcp_endpoint(value: str, what: str = "endpoint") -> tuple[str, int]:
    """Split a ZeroMQ ``tcp://HOST:PORT`` endpoint; raises ``AddressError`` naming ``what``."""
    text = (value or "").strip()
    if not text.startswith("tcp://"):
        raise AddressError(f"{what}: {value!r} is not a tcp://HOST:PORT endpoint")
    return parse_host_port(text[len("tcp://"):], what)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nobody listens on right now (the kernel picks it).

    The port is free at return, not reserved: a caller that needs several distinct
    ports must use ``free_ports`` so the same one is not handed out twice.
    """
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1", exclude: Iterable[int] = ()) -> list[int]:
    """``count`` distinct free TCP ports on ``host``, none of them in ``exclude``.

    All sockets stay bound until every port is picked, so the kernel cannot hand out
    the same port twice; ``exclude`` keeps ports that a caller was given (but has not
    bound yet) from being picked again.
    """
    if count < 0:
        raise ValueError(f"free_ports: count must be >= 0, got {count}")
    excluded = set(exclude)
    sockets: list[socket.socket] = []
    picked: list[int] = []
    try:
        while len(picked) < count:
            if len(sockets) > count + 1000:
                raise OSError(f"no {count} free ports on {host} outside {sorted(excluded)}")
            s = socket.socket(_family(host), socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in excluded:
                picked.append(port)
        return picked
    finally:
        for s in sockets:
            s.close()


def port_in_use(host: str, port: int) -> bool:
    """True when a process already listens on (or otherwise holds) ``host:port``."""
    error = bind_error(host, port)
    return error is not None and error.errno == errno.EADDRINUSE


def bind_error(host: str, port: int) -> OSError | None:
    """Why a server could not listen on ``host:port`` now, or ``None`` if it could.

    Binds with SO_REUSEADDR so a socket in TIME_WAIT from a previous run does not count
    as taken (the servers we start set it too), while a live listener does. An
    ``EADDRINUSE`` error reads "address already in use"; a host that is not one of this
    machine's addresses gives ``EADDRNOTAVAIL``.
    """
    try:
        s = socket.socket(_family(host), socket.SOCK_STREAM)
    except OSError as exc:
        return exc
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return OSError(exc.errno, f"address already in use (another process listens on {host}:{port})")
        return exc
    finally:
        s.close()
    return None


def wait_for_port(
    host: str,
    port: int,
    deadline: float,
    *,
    interval: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once a TCP connect to ``host:port`` succeeds; ``WaitTimeout`` at ``deadline``."""
    last: Exception | None = None
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(1.0, deadline - clock()))):
                return
        except OSError as exc:
            last = exc
        if clock() >= deadline:
            raise WaitTimeout(f"nothing listens on {host}:{port} (last error: {last})", last)
        sleep(interval)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """One HTTP answer: status code and the body parsed as JSON (``None`` if not JSON)."""

    status: int
    body: Any


def http_get_json(url: str, timeout: float = 2.0) -> HttpAnswer:
    """GET ``url`` and parse the body as JSON; non-2xx answers are returned, not raised.

    Connection failures raise ``OSError`` (``urllib.error.URLError`` is one).
    """
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return HttpAnswer(response.status, _json_or_none(response.read()))
    except urllib.error.HTTPError as exc:
        with exc:
            return HttpAnswer(exc.code, _json_or_none(exc.read()))


def wait_for_http(
    url: str,
    deadline: float,
    accept: Callable[[HttpAnswer], bool] = lambda a: a.status == 200,
    *,
    interval: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_poll: Callable[[HttpAnswer | None], None] | None = None,
) -> HttpAnswer:
    """Poll ``url`` until ``accept(answer)`` is true; ``WaitTimeout`` at ``deadline``.

    ``on_poll`` sees every answer (``None`` for a failed connection) and may raise to
    abort the wait early, e.g. when the process that should answer has died.
    """
    last: HttpAnswer | Exception | None = None
    while True:
        answer: HttpAnswer | None
        try:
            answer = http_get_json(url, timeout=max(0.1, min(2.0, deadline - clock())))
            last = answer
        except OSError as exc:
            answer, last = None, exc
        if on_poll is not None:
            on_poll(answer)
        if answer is not None and accept(answer):
            return answer
        if clock() >= deadline:
            raise WaitTimeout(f"{url} not ready (last: {_describe(last)})", last)
        sleep(interval)


def _describe(last: HttpAnswer | Exception | None) -> str:
    if isinstance(last, HttpAnswer):
        return f"HTTP {last.status} {json.dumps(last.body)}"
    return str(last)


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
