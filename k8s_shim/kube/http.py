"""A lean HTTP/1.1 client for the API server: persistent connections, bytes in, bytes out.

The shim makes a few thousand small requests a second (bindings, events, status patches) and
reads a few long watch streams. A general client (aiohttp) spends about 0.4 ms of CPU on each
request in its layers (URL objects, header multidicts, tracing hooks, a task per timeout); this
one writes one pre-assembled buffer per request on a kept-alive connection and parses the answer
in place, a tenth of that. What it does:

- ``Pool.submit(method, target, body, content_type, timeout, done)``: the request is written
  on an idle connection of the pool at once, and ``done(response, None)`` (or ``done(None,
  HttpError)``) is called on the loop when its answer is in: no task and no coroutine per
  request, the shim's bindings and events cost a few calls each. Without an idle connection a
  new one is opened (at most ``limit``; requests queue beyond that, in order). A request whose
  kept-alive connection the server had closed before answering is sent once more on a new one.
  Connections idle for ``idle_seconds`` are closed instead of reused.
- ``Pool.request(...)`` -> ``Response(status, headers, body)``: the same, awaited.
- ``Pool.stream(target, read_timeout)``: a GET whose body is read as it comes, as batches of
  complete lines (a watch); on a connection of its own, closed at the end.
- Framing: ``Content-Length``, ``Transfer-Encoding: chunked``, or the body until the server
  closes; ``Connection: close`` is honoured. No redirects, no compression, no proxies, no
  pipelining: what a kube-apiserver needs.

Failures to reach or hear the server raise ``HttpError`` (the caller turns it into an
``ApiError`` of status 0).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import ssl as ssl_module
from typing import AsyncIterator, Callable
from urllib.parse import urlsplit

__all__ = ["HttpError", "Pool", "Response", "Stream"]

log = logging.getLogger(__name__)

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024
_PAUSE_AT = 8 * 1024 * 1024  # a stream's unread bytes beyond which reading pauses
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class HttpError(Exception):
    """The server could not be reached, closed the connection, answered garbage, or timed out."""


class Response:
    """An answer: ``status``, ``headers`` (names in lower case; read from the head only when asked
    for: the shim's requests seldom need them) and ``body``."""

    __slots__ = ("status", "head", "body", "_headers")

    def __init__(self, status: int, head: bytes, body: bytes) -> None:
        self.status, self.head, self.body = status, head, body
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = _parse_headers(self.head)
        return self._headers

    def __repr__(self) -> str:
        return f"Response(status={self.status}, body={self.body[:80]!r})"


def _parse_headers(head: bytes) -> dict[str, str]:
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


# the headers that frame a body, as (name, value) pairs of a head in lower case
_FRAMING = re.compile(rb"\r\n(connection|transfer-encoding|content-length):[ \t]*([^\r]*)").findall


class _Watchdog:
    """The timeouts of a pool's connections, with one timer for all of them: a request (or a
    stream's read) only notes its deadline, and the timer, set for the earliest deadline it knows
    of, fails the connections whose deadline passed. A timer per request (set, then cancelled
    when the answer comes, a few thousand times a second) cost more than the request's parsing."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.watched: set[_Connection] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._at = float("inf")

    def arm(self, conn: "_Connection", deadline: float) -> None:
        self.watched.add(conn)
        if deadline < self._at:
            if self._handle is not None:
                self._handle.cancel()
            self._at = deadline
            self._handle = self.loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._handle, self._at = None, float("inf")
        now = self.loop.time()
        nearest = float("inf")
        for conn in list(self.watched):
            deadline = conn.deadline
            if deadline is None or conn.closed:
                self.watched.discard(conn)
            elif deadline <= now:
                self.watched.discard(conn)
                conn.timed_out()
            elif deadline < nearest:
                nearest = deadline
        if nearest < float("inf"):
            self._at = nearest
            self._handle = self.loop.call_at(nearest, self._check)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._at = None, float("inf")
        self.watched.clear()


class _Connection(asyncio.Protocol):
    """One connection: one request at a time. The response is parsed as bytes arrive; its body
    goes to a buffer, or to a stream's line splitter."""

    def __init__(self, loop: asyncio.AbstractEventLoop, watchdog: _Watchdog) -> None:
        self.loop = loop
        self.watchdog = watchdog
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._buf = bytearray()
        self._state = _DONE
        self._left = 0  # bytes of the current body or chunk still to come
        self._status = 0
        self._head = b""
        self._keep_alive = True
        self._body = bytearray()
        self._stream: Stream | None = None
        self._waiter: asyncio.Future | None = None  # a stream's response head
        self._done: Callable[[Response | None, HttpError | None], None] | None = None  # a request's answer
        self._got_bytes = False
        self.deadline: float | None = None  # when the answer (a stream: its next bytes) is overdue
        self._timeout = 0.0
        self._error: HttpError | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self._state == _DONE:  # bytes nobody asked for: the connection cannot be trusted
            self._fail(HttpError("unexpected bytes from the server between requests"))
            return
        try:
            if self._state == _HEAD and not self._buf and self._stream is None:
                end = data.find(_HEAD_END)
                if end >= 0:  # the usual answer: its head (and often its whole body) in one read
                    self._read_head(data[:end])
                    if self._state == _LENGTH and len(data) - end - 4 == self._left:
                        self._body, self._state = data[end + 4:], _DONE
                        self._complete()
                        return
                    data = data[end + 4:]
            self._buf += data
            self._parse()
        except HttpError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self._complete()
        elif self._state != _DONE:
            what = "the server closed the connection" if exc is None else f"connection lost: {exc}"
            self._fail(HttpError(what), close=False)
        self.deadline = None

    # -- requests ----------------------------------------------------------------------------
    def send(self, data: bytes, timeout: float | None, done: Callable[[Response | None, HttpError | None], None]) -> None:
        """Write one request; ``done`` gets its ``Response`` or the ``HttpError``."""
        self._state, self._buf, self._body = _HEAD, bytearray(), bytearray()
        self._got_bytes, self._error, self._done = False, None, done
        self.rearm(timeout)
        self.transport.write(data)

    def send_stream(self, data: bytes, stream: "Stream", timeout: float | None) -> asyncio.Future:
        """Write a request whose body flows into ``stream``; the future resolves with a
        ``Response`` of its status and headers once the head is in."""
        self._state, self._buf, self._body = _HEAD, bytearray(), bytearray()
        self._stream, self._got_bytes, self._error = stream, False, None
        self._waiter = waiter = self.loop.create_future()
        self.rearm(timeout)
        self.transport.write(data)
        return waiter

    def rearm(self, timeout: float | None) -> None:
        """Restart the clock (a stream: the time allowed between two reads)."""
        if timeout is None or self.closed:
            self.deadline = None
            return
        self._timeout = timeout
        self.deadline = deadline = self.loop.time() + timeout
        self.watchdog.arm(self, deadline)

    def timed_out(self) -> None:
        self.deadline = None
        self._fail(HttpError(f"no answer within {self._timeout:g}s"))

    def close(self) -> None:
        self.closed = True
        self.deadline = None
        if self.transport is not None:
            self.transport.close()

    @property
    def silent(self) -> bool:
        """Nothing came back for the request (it may be sent again on a fresh connection)."""
        return not self._got_bytes

    # -- parsing -----------------------------------------------------------------------------
    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        pieces: list = []  # of the body, handed on together at the end of the pass (a watch: one feed, not one per chunk)
        try:
            while True:
                state = self._state
                if state == _HEAD:
                    end = buf.find(_HEAD_END, pos)
                    if end < 0:
                        if len(buf) - pos > _MAX_HEAD:
                            raise HttpError("response head too large")
                        break
                    self._read_head(bytes(buf[pos:end]))
                    pos = end + 4
                elif state == _LENGTH or state == _CHUNK_DATA:
                    take = min(self._left, len(buf) - pos)
                    if take:
                        pieces.append(buf[pos:pos + take])
                        pos += take
                        self._left -= take
                    if self._left:
                        break
                    self._state = _DONE if state == _LENGTH else _CHUNK_CRLF
                elif state == _CHUNK_SIZE:
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        break
                    size_text = bytes(buf[pos:end]).split(b";", 1)[0].strip()
                    try:
                        self._left = int(size_text, 16)
                    except ValueError:
                        raise HttpError(f"bad chunk size {size_text[:20]!r}") from None
                    pos = end + 2
                    self._state = _CHUNK_DATA if self._left else _TRAILER
                elif state == _CHUNK_CRLF:
                    if len(buf) - pos < 2:
                        break
                    if buf[pos:pos + 2] != b"\r\n":
                        raise HttpError("chunk not followed by CRLF")
                    pos += 2
                    self._state = _CHUNK_SIZE
                elif state == _TRAILER:  # trailer lines after the last chunk, then an empty line
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        break
                    if end == pos:
                        self._state = _DONE
                    pos = end + 2
                elif state == _UNTIL_CLOSE:
                    if pos < len(buf):
                        pieces.append(buf[pos:])
                        pos = len(buf)
                    break
                else:  # _DONE
                    break
        finally:
            if pieces:
                self._emit(pieces[0] if len(pieces) == 1 else b"".join(pieces))
        del buf[:pos]
        if self._state == _DONE:
            if buf:
                raise HttpError("more bytes than the response held")
            self._complete()

    def _read_head(self, head: bytes) -> None:
        end = head.find(b"\r\n")
        first = head[:end] if end >= 0 else head
        parts = first.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"not an HTTP/1.1 response: {first[:60]!r}")
        try:
            status = int(parts[1])
        except ValueError:
            raise HttpError(f"bad status line {first[:60]!r}") from None
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            return
        # only the headers that frame the body are read here (Response.headers), in one pass
        framing = dict(reversed(_FRAMING(head.lower())))  # the first of a repeated header counts
        self._status, self._head = status, head
        self._keep_alive = parts[0] == b"HTTP/1.1" and framing.get(b"connection", b"").strip() != b"close"
        encoding = framing.get(b"transfer-encoding")
        length = framing.get(b"content-length")
        if length is not None:
            length = length.strip()
        if encoding is not None and b"chunked" in encoding:
            self._state = _CHUNK_SIZE
        elif length is not None:
            try:
                self._left = int(length)
            except ValueError:
                raise HttpError(f"bad Content-Length {length[:20]!r}") from None
            self._state = _LENGTH if self._left else _DONE
        elif status in (204, 304):
            self._state = _DONE
        else:
            self._state, self._keep_alive = _UNTIL_CLOSE, False
        if self._stream is not None:
            waiter, self._waiter = self._waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(Response(status, head, b""))

    def _emit(self, data) -> None:
        if self._stream is not None:
            self._stream._feed(data)
        else:
            self._body += data

    def _complete(self) -> None:
        self.deadline = None
        if not self._keep_alive:
            self.close()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream._end(None)
            return
        done, self._done = self._done, None
        if done is not None:
            _answer(done, Response(self._status, self._head, bytes(self._body)), None)

    def _fail(self, exc: HttpError, close: bool = True) -> None:
        self._state = _DONE
        self._error = exc
        if close:
            self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        stream, self._stream = self._stream, None
        if stream is not None:
            stream._end(exc)
        done, self._done = self._done, None
        if done is not None:
            _answer(done, None, exc)


def _answer(done: Callable[[Response | None, HttpError | None], None], response: Response | None,
            error: HttpError | None) -> None:
    """Hand an answer to its request's callback (which runs inside the protocol's callback: what
    it raises must not break the connection)."""
    try:
        done(response, error)
    except Exception:
        log.exception("handling the answer of a request failed")


class Stream:
    """The body of a streamed response as batches of lines (``batches()``), read as it arrives."""

    def __init__(self, conn: _Connection, read_timeout: float | None,
                 on_close: Callable[[_Connection], None] = lambda conn: None) -> None:
        self._conn = conn
        self._on_close = on_close
        self._read_timeout = read_timeout
        self._pending = bytearray()  # the last, incomplete line
        self._lines: list[bytes] = []
        self._size = 0
        self._ended = False
        self._error: HttpError | None = None
        self._wake: asyncio.Future | None = None
        self._paused = False
        self.status = 0
        self.headers: dict[str, str] = {}

    def _feed(self, data) -> None:
        self._conn.rearm(self._read_timeout)
        if b"\n" not in data:
            self._pending += data
            return
        chunk = bytes(self._pending + data) if self._pending else bytes(data)
        *complete, rest = chunk.split(b"\n")
        self._pending = bytearray(rest)
        for line in complete:
            if line.strip():
                self._lines.append(line)
                self._size += len(line)
        if self._size > _PAUSE_AT and not self._paused and self._conn.transport is not None:
            self._paused = True
            self._conn.transport.pause_reading()
        self._wakeup()

    def _end(self, error: HttpError | None) -> None:
        if error is None and self._pending.strip():
            self._lines.append(bytes(self._pending))
        self._pending = bytearray()
        self._ended, self._error = True, error
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def batches(self) -> AsyncIterator[list[bytes]]:
        """Lists of complete, non-empty lines until the body ends; ``HttpError`` if it breaks."""
        while True:
            if self._lines:
                out, self._lines, self._size = self._lines, [], 0
                if self._paused and self._conn.transport is not None and not self._conn.closed:
                    self._paused = False
                    self._conn.transport.resume_reading()
                yield out
                continue
            if self._ended:
                if self._error is not None:
                    raise self._error
                return
            self._wake = self._conn.loop.create_future()
            await self._wake
            self._wake = None

    async def read(self) -> bytes:
        """The whole body (an error answer read as a stream)."""
        out = []
        async for batch in self.batches():
            out.extend(batch)
        return b"\n".join(out)

    def close(self) -> None:
        self._conn.close()
        self._on_close(self._conn)


class Pool:
    """Kept-alive connections to one server (``base_url``: ``http(s)://host[:port]``)."""

    def __init__(self, base_url: str, *, ssl: ssl_module.SSLContext | None = None, limit: int = 64,
                 headers: dict[str, str] | None = None, auth: Callable[[], str | None] | None = None,
                 idle_seconds: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl if parts.scheme == "https" else None
        if parts.scheme == "https" and self.ssl is None:
            self.ssl = ssl_module.create_default_context()
        host_header = f"[{self.host}]" if ":" in self.host else self.host
        if parts.port:
            host_header += f":{parts.port}"
        self.prefix = parts.path.rstrip("/")
        self._static = "".join(f"{k}: {v}\r\n" for k, v in {"Host": host_header, **(headers or {})}.items())
        self._auth = auth
        self._auth_value: str | None = None
        self._auth_line = ""
        self.limit = limit
        self.idle_seconds = idle_seconds
        self._idle: collections.deque[_Connection] = collections.deque()
        self._open = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._pooled: set[_Connection] = set()
        self._streams: set[_Connection] = set()
        self._acquiring: set[asyncio.Task] = set()  # requests waiting for a connection (``_later``)
        self.requests = 0  # counters for the state dump and the benchmark
        self.connects = 0
        self._watchdog: _Watchdog | None = None

    def _head(self, method: str, target: str, extra: str) -> str:
        if self._auth is not None:
            value = self._auth()
            if value != self._auth_value:
                self._auth_value = value
                self._auth_line = f"Authorization: {value}\r\n" if value else ""
        return f"{method} {self.prefix}{target} HTTP/1.1\r\n{self._static}{self._auth_line}{extra}\r\n"

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self._watchdog is None or self._watchdog.loop is not loop:
            self._watchdog = _Watchdog(loop)
        conn = _Connection(loop, self._watchdog)
        try:
            await loop.create_connection(lambda: conn, self.host, self.port, ssl=self.ssl,
                                         server_hostname=self.host if self.ssl else None)
        except (OSError, ssl_module.SSLError) as exc:
            raise HttpError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
        self.connects += 1
        return conn

    def _idle_connection(self) -> _Connection | None:
        """The connection used last, if one is idle and fresh enough."""
        if not self._idle:
            return None
        now = self._watchdog.loop.time()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self.idle_seconds:
                conn.reused = True
                return conn
            self._drop(conn)
        return None

    async def _acquire(self) -> _Connection:
        """An idle connection, a new one (a slot under ``limit`` taken first), or the next one
        released, in the order callers came."""
        conn = self._idle_connection()
        if conn is not None:
            return conn
        if self._open < self.limit:
            self._open += 1
            return await self._new()
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            conn = await waiter  # a released connection, or None: a slot reserved to open one
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                handed = waiter.result()
                if handed is None:
                    self._open -= 1
                    self._pass_slot()
                else:
                    self._release(handed)
            raise
        if conn is None:
            return await self._new()
        conn.reused = True
        return conn

    async def _new(self) -> _Connection:
        try:
            conn = await self._connect()
        except BaseException:
            self._open -= 1
            self._pass_slot()
            raise
        conn.reused = False
        self._pooled.add(conn)
        return conn

    def _release(self, conn: _Connection) -> None:
        if conn.closed:
            self._drop(conn)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.append(conn)

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        if conn in self._pooled:
            self._pooled.discard(conn)
            self._open -= 1
            self._pass_slot()

    def _pass_slot(self) -> None:
        while self._waiters and self._open < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._open += 1
                waiter.set_result(None)

    def submit(self, method: str, target: str, body: bytes | None = None, content_type: str = "",
               timeout: float | None = 30.0,
               done: Callable[[Response | None, HttpError | None], None] = lambda response, error: None) -> None:
        """One request; ``done(response, None)`` or ``done(None, HttpError)`` when it is answered
        (see module doc)."""
        extra = ""
        if body is not None:
            extra = f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n" if content_type else \
                f"Content-Length: {len(body)}\r\n"
        data = self._head(method, target, extra).encode()
        if body:
            data += body
        self.requests += 1
        conn = self._idle_connection()
        if conn is not None:
            self._send(conn, data, timeout, done, True)
        else:
            self._later(data, timeout, done, True)

    def _send(self, conn: _Connection, data: bytes, timeout: float | None,
              done: Callable[[Response | None, HttpError | None], None], again: bool) -> None:
        def answered(response: Response | None, error: HttpError | None) -> None:
            if error is None:
                self._release(conn)
            else:
                self._drop(conn)
                if again and conn.reused and conn.silent:  # the server had closed the kept-alive connection:
                    self._later(data, timeout, done, False)  # once more on a new one
                    return
            done(response, error)
        conn.send(data, timeout, answered)

    def _later(self, data: bytes, timeout: float | None, done: Callable[[Response | None, HttpError | None], None],
               again: bool) -> None:
        """Send once a connection is free or opened (in a task: the rare way)."""
        async def acquire() -> None:
            try:
                conn = await self._acquire()
            except HttpError as exc:
                _answer(done, None, exc)
                return
            self._send(conn, data, timeout, done, again)

        def finished(task: asyncio.Task) -> None:
            self._acquiring.discard(task)
            if task.cancelled():  # the pool was closed meanwhile
                _answer(done, None, HttpError("the client is closed"))
            elif task.exception() is not None:
                _answer(done, None, HttpError(f"cannot send the request: {task.exception()!r}"))
        task = asyncio.get_running_loop().create_task(acquire())
        self._acquiring.add(task)
        task.add_done_callback(finished)

    async def request(self, method: str, target: str, body: bytes | None = None, content_type: str = "",
                      timeout: float | None = 30.0) -> Response:
        """One request and its whole answer, awaited (``submit``)."""
        answer = asyncio.get_running_loop().create_future()

        def done(response: Response | None, error: HttpError | None) -> None:
            if not answer.done():
                answer.set_result(response) if error is None else answer.set_exception(error)
        self.submit(method, target, body, content_type, timeout, done)
        return await answer

    async def stream(self, target: str, read_timeout: float | None,
                     connect_timeout: float | None = 30.0) -> Stream:
        """A GET whose body is read as it comes (``Stream.batches()``), on a connection of its own
        (not counted in ``limit``); ``Stream.close()`` when done."""
        conn = await self._connect()
        self._streams.add(conn)
        stream = Stream(conn, read_timeout, self._streams.discard)
        try:
            head = await conn.send_stream(self._head("GET", target, "").encode(), stream, connect_timeout)
        except BaseException:
            stream.close()
            raise
        conn.rearm(read_timeout)
        stream.status, stream.headers = head.status, head.headers
        return stream

    async def close(self) -> None:
        for task in list(self._acquiring):
            task.cancel()
        for conn in [*self._pooled, *self._streams]:
            conn.close()
        self._pooled.clear()
        self._streams.clear()
        self._idle.clear()
        self._open = 0
        if self._watchdog is not None:
            self._watchdog.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(HttpError("the client is closed"))
        self._waiters.clear()
