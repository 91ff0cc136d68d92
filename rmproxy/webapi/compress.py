"""gzip as YuniKorn (1.9+) answers: only when the client lists ``gzip`` in ``Accept-Encoding``
(not with ``q=0``), only for bodies of at least ``GZIP_MIN`` bytes (smaller ones go out as they
are, without ``Vary``), never for the event stream; a compressed answer has
``Content-Encoding: gzip`` and ``Vary: Accept-Encoding``.

One layer compresses, whatever the handler: ``gzip_middleware`` for answers built whole
(``web.Response``: JSON, Prometheus text, YAML, errors), ``BufferedStream`` and ``start_sized``
for answers a handler streams itself (long lists, the state dump). Nothing else in rmproxy
compresses (``prometheus_client`` only does when its own HTTP handler is used, which rmproxy
does not), so no answer is compressed twice.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["GZIP_MIN", "STREAM_PATH", "accepts_gzip", "gzip_middleware", "BufferedStream", "start_sized"]

GZIP_MIN = 1400  # bytes: YuniKorn's threshold (about one TCP segment)
STREAM_PATH = "/ws/v1/events/stream"  # the one path never compressed


def accepts_gzip(request: web.Request) -> bool:
    """Whether ``Accept-Encoding`` lists gzip (case-insensitive) without ``q=0``."""
    if request.path == STREAM_PATH:
        return False
    for token in request.headers.get("Accept-Encoding", "").split(","):
        name, _, params = token.partition(";")
        if name.strip().lower() == "gzip":
            return params.strip() != "q=0"
    return False


def _enable(resp: web.StreamResponse) -> None:
    resp.enable_compression(web.ContentCoding.gzip)
    resp.headers["Vary"] = "Accept-Encoding"


@web.middleware
async def gzip_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Compress a whole answer (``web.Response``) of ``GZIP_MIN`` bytes or more."""
    resp = await handler(request)
    if (type(resp) is web.Response and not resp.prepared and isinstance(resp.body, bytes)
            and len(resp.body) >= GZIP_MIN and accepts_gzip(request)):
        _enable(resp)
    return resp


async def start_sized(request: web.Request, resp: web.StreamResponse, size: int) -> None:
    """Prepare a streamed answer of known ``size``: gzip (chunked) when it is due, else with
    its ``Content-Length``."""
    if size >= GZIP_MIN and accepts_gzip(request):
        _enable(resp)
    else:
        resp.content_length = size
    await resp.prepare(request)


class BufferedStream:
    """Writes a streamed answer of unknown size: the first ``GZIP_MIN`` bytes are held until it
    is known whether the answer reaches that size, then it starts compressed or not."""

    def __init__(self, request: web.Request, resp: web.StreamResponse) -> None:
        self.request = request
        self.resp = resp
        self._held: list[bytes] | None = []
        self._size = 0

    async def write(self, data: bytes) -> None:
        if self._held is None:
            await self.resp.write(data)
            return
        self._held.append(data)
        self._size += len(data)
        if self._size >= GZIP_MIN:
            await self._start(accepts_gzip(self.request))

    async def finish(self) -> web.StreamResponse:
        if self._held is not None:
            self.resp.content_length = self._size
            await self._start(False)
        await self.resp.write_eof()
        return self.resp

    async def _start(self, compress: bool) -> None:
        held, self._held = self._held or [], None
        if compress:
            _enable(self.resp)
        await self.resp.prepare(self.request)
        await self.resp.write(b"".join(held))
