"""HTTP plumbing shared by the REST handlers: JSON bodies, YuniKorn's error shape, CORS, streaming.

Every JSON answer is ``application/json; charset=UTF-8`` with CORS headers (``json_response``,
the one way a handler answers JSON); every error under ``/ws/`` is YuniKorn's
``{"status_code", "message", "description"}`` (``errors_middleware``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, AsyncIterator

from aiohttp import web

from rmproxy.webapi.compress import BufferedStream

__all__ = ["ALLOW_ORIGIN", "CORS_HEADERS", "JSON_CONTENT_TYPE", "json_response", "error_response", "ApiError",
           "check_queue_path", "INVALID_QUEUE_NAME", "stream_json_list", "int_query", "errors_middleware", "preflight"]

log = logging.getLogger("korral.rmproxy")

ALLOW_ORIGIN = {"Access-Control-Allow-Origin": "*"}  # the CORS header of the config, log level and dump answers
CORS_HEADERS = {
    **ALLOW_ORIGIN,
    "Access-Control-Allow-Methods": "GET,POST,PUT,HEAD,OPTIONS",
    "Access-Control-Allow-Headers": "X-Requested-With,Content-Type,Accept,Origin",
}
JSON_CONTENT_TYPE = "application/json; charset=UTF-8"
# YuniKorn's queue name (1.6+): REST checks every part of a queue path against it
_QUEUE_PART = re.compile(r"^[a-zA-Z0-9_:#/@-]{1,64}$")
INVALID_QUEUE_NAME = ("invalid queue name, max 64 characters consisting of alphanumeric characters and "
                      "'-', '_', '#', '@', '/', ':' allowed")
_STREAM_CHUNK = 500  # list items per write when streaming a large answer


class ApiError(Exception):
    """An error answer: raised by handlers, rendered by the middleware in YuniKorn's shape."""

    def __init__(self, status: int, message: str, description: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.description = description or message


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as compact JSON with CORS headers."""
    text = json.dumps(data, separators=(",", ":"))
    return web.Response(text=text, status=status, content_type="application/json", charset="UTF-8",
                        headers=CORS_HEADERS)


def error_response(status: int, message: str, description: str = "") -> web.Response:
    return json_response({"status_code": status, "message": message,
                          "description": description or message}, status)


def check_queue_path(path: str) -> str:
    """A full queue path ``root.a.b``; each part must be a YuniKorn queue name, else 400 with
    YuniKorn's message (the description names the path and the part)."""
    for part in path.split("."):
        if not _QUEUE_PART.match(part):
            raise ApiError(400, INVALID_QUEUE_NAME, f"queue {path!r}: part {part!r} is not a valid queue name")
    return path


INT_QUERY_MAX = 2**63 - 1  # what a worker's query (msgpack) and YuniKorn's int64 fields can carry


def int_query(request: web.Request, name: str, default: int | None) -> int | None:
    """An optional query parameter holding a whole number, 0 or more (ASCII digits only: no sign,
    space or ``_``); 400 naming the parameter and the value otherwise. The one parser of
    ``offset``, ``limit``, ``count`` and ``start``."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, f"parameter {name} must be a whole number, 0 or more, got {raw!r}")
    value = int(raw)
    if value > INT_QUERY_MAX:
        raise ApiError(400, f"parameter {name} is too large: {raw!r}, at most {INT_QUERY_MAX}")
    return value


async def stream_json_list(request: web.Request, items: AsyncIterator[list]) -> web.StreamResponse:
    """Write a JSON list as it arrives page by page, so a 50,000-item answer never sits whole
    in memory as one string and the first bytes leave before the last page is read (gzip as
    ``compress`` decides)."""
    resp = web.StreamResponse(status=200, headers=CORS_HEADERS)
    resp.content_type = "application/json"
    resp.charset = "UTF-8"
    out = BufferedStream(request, resp)
    await out.write(b"[")
    first = True
    async for page in items:
        for i in range(0, len(page), _STREAM_CHUNK):
            chunk = ",".join(json.dumps(x, separators=(",", ":")) for x in page[i:i + _STREAM_CHUNK])
            if not chunk:
                continue
            await out.write((chunk if first else "," + chunk).encode())
            first = False
    await out.write(b"]")
    return await out.finish()


@web.middleware
async def errors_middleware(request: web.Request, handler) -> web.StreamResponse:
    """YuniKorn's error shape for every failure under /ws/ (and CORS on it)."""
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.message, exc.description)
    except web.HTTPException as exc:
        if not request.path.startswith("/ws/"):
            raise
        if exc.status < 400:
            raise
        if isinstance(exc, web.HTTPMethodNotAllowed) and set(exc.allowed_methods) <= {"OPTIONS"}:
            exc = web.HTTPNotFound()  # only the CORS preflight route matched: the path is unknown
        return error_response(exc.status, exc.reason, f"{request.method} {request.path}: {exc.reason}")
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:  # a bug must still answer in the documented shape, and be logged
        log.exception("REST %s %s failed", request.method, request.path)
        return error_response(500, "internal error", f"{type(exc).__name__}: {exc}")


async def preflight(request: web.Request) -> web.Response:
    """The CORS preflight (OPTIONS) of any /ws/v1 path."""
    return web.Response(status=200, headers=CORS_HEADERS)
