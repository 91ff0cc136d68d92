"""A lean HTTP/1.1 server on asyncio for the fake API server: one ``asyncio.Protocol`` per
connection, one handler for every request, bytes in, bytes out.

The double answers a few thousand small requests a second (pod creations, bindings, events) and
streams watches. A general server (aiohttp) spent 110-160 us of CPU on each request in its layers
(router, request and response objects, middlewares, a task per request, header encoding); this one
parses the head in place, calls the handler directly (a task only for a handler that has to wait:
lists and watches) and writes each answer as one buffer. What it does:

- keep-alive (HTTP/1.1 by default, HTTP/1.0 with ``Connection: keep-alive``), requests on one
  connection answered in order; ``Connection: close`` is honoured both ways;
- request bodies by ``Content-Length`` or ``Transfer-Encoding: chunked``; ``Expect: 100-continue``
  is answered before the body is read;
- limits: a request head of at most ``MAX_HEAD`` bytes (431 beyond, as Go's server answers) and a
  body of at most ``max_body`` bytes (413 with a Status, as kube-apiserver answers); a malformed
  head is a plain-text 400; each closes the connection;
- streamed answers (watches) in chunked encoding; a write waits while the transport's buffer is
  above its high-water mark, so a slow reader holds its lines in the watch's bounded queue, not
  in this process's memory;
- a kept-alive connection with no request for ``idle_timeout`` seconds (90, kube-apiserver's) is
  closed, as Go's server does, so that a client that vanished without closing does not keep it;
- TLS through the ``ssl.SSLContext`` given to ``start``; ``stop`` closes the listener, lets
  running handlers end (watches end their streams cleanly) for a grace period, then closes every
  connection.
"""

from __future__ import annotations

import asyncio
import email.utils
import http
import ssl
import time
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, unquote

import orjson

from k8s_shim.fake.errors import status_body

__all__ = ["HttpServer", "Request", "Response", "Stream", "MAX_HEAD"]

MAX_HEAD = 1 << 20  # request line and headers (Go's DefaultMaxHeaderBytes)
_HEAD_END = b"\r\n\r\n"
_PAUSE_READING_AT = 1 << 20  # buffered bytes beyond a request in progress: stop reading


class Request:
    """What a handler reads of a request: ``method``, ``path`` (percent-decoded), ``query`` (first
    value of each name), ``headers`` (names in lower case), ``body`` (read whole before the handler
    runs) and ``path_qs`` (the target as sent)."""

    __slots__ = ("method", "path_qs", "path", "query_string", "headers", "body", "_query", "_conn")

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes,
                 conn: "_Connection | None" = None) -> None:
        self.method = method
        self.path_qs = target
        path, _, self.query_string = target.partition("?")
        self.path = unquote(path) if "%" in path else path
        self.headers = headers
        self.body = body
        self._query: dict[str, str] | None = None
        self._conn = conn

    @property
    def query(self) -> dict[str, str]:
        if self._query is None:
            query: dict[str, str] = {}
            if self.query_string:
                for name, value in parse_qsl(self.query_string, keep_blank_values=True):
                    query.setdefault(name, value)
            self._query = query
        return self._query

    @property
    def gone(self) -> bool:
        """The client closed the connection (or the server is closing it)."""
        return self._conn is None or self._conn.closed

    def on_gone(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the connection is lost; returns what undoes that."""
        conn = self._conn
        if conn is None:
            return lambda: None
        conn.lost_callbacks.append(callback)
        return lambda: callback in conn.lost_callbacks and conn.lost_callbacks.remove(callback)

    def stream(self, content_type: str, status: int = 200) -> "Stream":
        """Start a streamed (chunked) answer; the handler returns the stream when it is done."""
        if self._conn is None:
            raise ConnectionResetError("no connection to stream to")
        return Stream(self._conn, status, content_type, self.method != "HEAD")


class Response:
    """A whole answer: status, body, content type (with its charset when it has one)."""

    __slots__ = ("status", "body", "content_type", "headers")

    def __init__(self, status: int, body: bytes, content_type: str, headers: bytes = b"") -> None:
        self.status, self.body, self.content_type = status, body, content_type
        self.headers = headers  # more header lines, each ending in CRLF (a 429's Retry-After)


Handler = Callable[[Request], "Response | Awaitable[Response | Stream]"]

_heads: dict[tuple[int, str], bytes] = {}


def _head_prefix(status: int, content_type: str) -> bytes:
    head = _heads.get((status, content_type))
    if head is None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Unknown"
        head = _heads[(status, content_type)] = \
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: {content_type}\r\n".encode("latin-1")
    return head


_date_second = -1
_date_line = b""


def _date() -> bytes:
    """The Date header line, formatted once a second."""
    global _date_second, _date_line
    now = time.time()
    second = int(now)
    if second != _date_second:
        _date_second = second
        _date_line = b"Date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
    return _date_line


class _BadRequest(Exception):
    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        super().__init__(status)
        self.answer = Response(status, body, content_type)


class Stream:
    """A chunked answer written piece by piece (a watch)."""

    __slots__ = ("_conn", "_body", "started", "finished")

    def __init__(self, conn: "_Connection", status: int, content_type: str, body: bool) -> None:
        self._conn = conn
        self._body = body
        self.finished = False
        self.started = True
        conn.write(_head_prefix(status, content_type) + b"Transfer-Encoding: chunked\r\n" + _date() + b"\r\n")

    async def write(self, data: bytes | list[bytes]) -> None:
        """Send ``data`` (or the pieces of it) as one chunk; waits while the client is slow to
        read (raises ConnectionResetError when it is gone)."""
        conn = self._conn
        if conn.closed:
            raise ConnectionResetError("the client closed the connection")
        if data and self._body:
            if type(data) is list:
                size = 0
                for piece in data:
                    size += len(piece)
                conn.write(b"".join([b"%x\r\n" % size, *data, b"\r\n"]))
            else:
                conn.write(b"".join((b"%x\r\n" % len(data), data, b"\r\n")))
        if conn.write_paused:
            await conn.drained()

    async def write_eof(self) -> None:
        if self.finished:
            return
        self.finished = True
        if not self._conn.closed and self._body:
            self._conn.write(b"0\r\n\r\n")


class _Connection(asyncio.Protocol):
    def __init__(self, server: "HttpServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.closed = False
        self.busy = False  # a handler is running for this connection's current request
        self.eof = False
        self.write_paused = False
        self.read_paused = False
        self.continued = False  # 100 Continue sent for the request being read
        self.last_active = time.monotonic()  # when a request last arrived or was answered
        self.lost_callbacks: list[Callable[[], None]] = []
        self._drain_waiters: list[asyncio.Future] = []

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("the client closed the connection"))
        self._drain_waiters.clear()
        callbacks, self.lost_callbacks = self.lost_callbacks, []
        for callback in callbacks:
            callback()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    def eof_received(self) -> bool:
        self.eof = True
        if not self.busy:
            self._process()  # what is buffered is answered; an incomplete request closes
        return not self.closed  # keep the write side open for the answer in progress

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.last_active = time.monotonic()
        if self.busy:
            if len(self.buf) > _PAUSE_READING_AT + self.server.max_body and not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
            return
        self._process()

    # -- writing ---------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def drained(self) -> asyncio.Future:
        waiter = asyncio.get_running_loop().create_future()
        if self.closed:
            waiter.set_exception(ConnectionResetError("the client closed the connection"))
        elif not self.write_paused:
            waiter.set_result(None)
        else:
            self._drain_waiters.append(waiter)
        return waiter

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.close()
        self.closed = True

    def _send(self, answer: Response, with_body: bool, keep: bool) -> None:
        body = answer.body
        head = _head_prefix(answer.status, answer.content_type) + b"Content-Length: %d\r\n" % len(body) + _date()
        if answer.headers:
            head += answer.headers
        if not keep:
            head += b"Connection: close\r\n"
        self.write(head + b"\r\n" + body if with_body else head + b"\r\n")
        if not keep:
            self.close()

    # -- reading ---------------------------------------------------------------------------------

    def _process(self) -> None:
        """Parse and answer the requests in the buffer, one at a time."""
        while not self.busy and not self.closed:
            try:
                parsed = self._parse()
            except _BadRequest as bad:
                self._send(bad.answer, True, keep=False)
                return
            if parsed is None:
                if self.eof:
                    self.close()
                elif self.read_paused:
                    self.read_paused = False
                    self.transport.resume_reading()
                return
            request, keep = parsed
            try:
                result = self.server.handler(request)
            except Exception:  # noqa: BLE001 - the handler answers its own errors; this is a last guard
                self.server.log_failure(request)
                self.close()
                return
            if type(result) is Response:
                self._send(result, request.method != "HEAD", keep)
            else:
                self.busy = True
                task = asyncio.get_running_loop().create_task(self._finish(result, request, keep))
                self.server.tasks.add(task)
                task.add_done_callback(self.server.tasks.discard)

    async def _finish(self, pending: Awaitable[Any], request: Request, keep: bool) -> None:
        try:
            result = await pending
        except BaseException:
            self.close()
            raise
        if type(result) is Response:
            self._send(result, request.method != "HEAD", keep)
        elif not (isinstance(result, Stream) and result.finished and keep):
            self.close()  # a stream cut short (its end cannot be told but by closing), or the last one
        self.busy = False
        self.last_active = time.monotonic()
        if not self.closed:
            self._process()

    def _parse(self) -> tuple[Request, bool] | None:
        buf = self.buf
        while buf[:2] == b"\r\n":  # stray line ends between requests (RFC 9112 2.2)
            del buf[:2]
        end = buf.find(_HEAD_END)
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise _BadRequest(431, "text/plain; charset=utf-8", b"431 Request Header Fields Too Large")
            return None
        if end > MAX_HEAD:
            raise _BadRequest(431, "text/plain; charset=utf-8", b"431 Request Header Fields Too Large")
        lines = buf[:end].decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ")
        except ValueError:
            raise _bad("malformed HTTP request line") from None
        if target.startswith(("http://", "https://")):  # absolute form (RFC 9112 3.2.2): the path is what counts
            target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        if not version.startswith("HTTP/1.") or not method or not target.startswith(("/", "*")):
            raise _bad("malformed HTTP request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise _bad("malformed MIME header line")
            name = name.lower()
            if name not in headers:
                headers[name] = value.strip()
        body_at = end + 4
        coding = headers.get("transfer-encoding")
        max_body = self.server.max_body
        if coding is not None:
            if coding.lower() != "chunked":
                raise _BadRequest(501, "text/plain; charset=utf-8", b"501 Not Implemented: unsupported "
                                  b"transfer encoding")
            parsed = _chunked(buf, body_at, max_body)
            if parsed is None:
                self._continue(headers, version)
                return None
            body, consumed = parsed
        else:
            length_text = headers.get("content-length", "0")
            if not length_text.isdigit():
                raise _bad("bad Content-Length")
            length = int(length_text)
            if length > max_body:
                raise _too_large(max_body)
            if len(buf) - body_at < length:
                self._continue(headers, version)
                return None
            body = bytes(buf[body_at:body_at + length])
            consumed = body_at + length
        del buf[:consumed]
        self.continued = False
        connection = headers.get("connection", "").lower()
        keep = ("close" not in connection) if version != "HTTP/1.0" else ("keep-alive" in connection)
        return Request(method, target, headers, body, self), keep

    def _continue(self, headers: dict[str, str], version: str) -> None:
        if not self.continued and version != "HTTP/1.0" and headers.get("expect", "").lower() == "100-continue":
            self.continued = True
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")


def _bad(why: str) -> _BadRequest:
    return _BadRequest(400, "text/plain; charset=utf-8", b"400 Bad Request: " + why.encode())


def _too_large(limit: int) -> _BadRequest:
    return _BadRequest(413, "application/json", orjson.dumps(status_body(
        413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")))


def _chunked(buf: bytearray, at: int, limit: int) -> tuple[bytes, int] | None:
    """A chunked body starting at ``at``: (body, bytes consumed), or None while incomplete."""
    parts = []
    size_total = 0
    while True:
        line_end = buf.find(b"\r\n", at)
        if line_end < 0:
            if len(buf) - at > 1024:
                raise _bad("bad chunk size line")
            return None
        size_text = bytes(buf[at:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _bad("bad chunk size") from None
        if size < 0:
            raise _bad("bad chunk size")
        size_total += size
        if size_total > limit:
            raise _too_large(limit)
        at = line_end + 2
        if size == 0:
            break
        if len(buf) < at + size + 2:
            return None
        if buf[at + size:at + size + 2] != b"\r\n":
            raise _bad("chunk not followed by CRLF")
        parts.append(bytes(buf[at:at + size]))
        at += size + 2
    while True:  # trailer fields, up to the empty line
        line_end = buf.find(b"\r\n", at)
        if line_end < 0:
            if len(buf) - at > MAX_HEAD:
                raise _BadRequest(431, "text/plain; charset=utf-8", b"431 Request Header Fields Too Large")
            return None
        empty = line_end == at
        at = line_end + 2
        if empty:
            return b"".join(parts), at


class HttpServer:
    """Serves ``handler`` on host:port. ``handler(request)`` returns a :class:`Response`, or an
    awaitable of a Response or of a finished :class:`Stream`."""

    def __init__(self, handler: Handler, max_body: int, on_stopping: Callable[[], None] | None = None,
                 failure_log: Callable[[Request], None] | None = None, idle_timeout: float = 90.0) -> None:
        self.handler = handler
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self._sweep: asyncio.TimerHandle | None = None
        self.on_stopping = on_stopping
        self._failure_log = failure_log
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task] = set()
        self._server: asyncio.base_events.Server | None = None

    def log_failure(self, request: Request) -> None:
        if self._failure_log is not None:
            self._failure_log(request)

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, ssl=ssl_context,
                                                reuse_address=True, backlog=1024)
        self._sweep = loop.call_later(self._sweep_every(), self._close_idle)

    def _sweep_every(self) -> float:
        return min(10.0, self.idle_timeout / 3)

    def _close_idle(self) -> None:
        """Close the kept-alive connections that waited ``idle_timeout`` for a request (a
        connection with a request in progress or a watch streaming is busy, never idle)."""
        now = time.monotonic()
        for conn in list(self.connections):
            if not conn.busy and not conn.buf and now - conn.last_active >= self.idle_timeout:
                conn.close()
        self._sweep = asyncio.get_running_loop().call_later(self._sweep_every(), self._close_idle)

    async def stop(self, grace: float = 2.0) -> None:
        """Stop listening, let running handlers finish for ``grace`` seconds (``on_stopping`` tells
        watches to end), then close every connection."""
        if self._server is None:
            return
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        self._server.close()
        if self.on_stopping is not None:
            self.on_stopping()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=grace)
        for conn in list(self.connections):
            conn.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=grace)
        await self._server.wait_closed()
        self._server = None
