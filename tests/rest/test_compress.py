"""gzip as YuniKorn answers (``rmproxy.webapi.compress``): only when asked, only from 1,400
bytes, once, never on the event stream; whole answers and streamed ones alike."""

from __future__ import annotations

import asyncio
import gzip

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from rmproxy.webapi._http import json_response, stream_json_list
from rmproxy.webapi.compress import GZIP_MIN, STREAM_PATH, gzip_middleware, start_sized

BIG = [{"name": f"node-{i:04d}"} for i in range(200)]  # ~4 KB of JSON


async def pages(items):
    for i in range(0, len(items), 50):
        yield items[i:i + 50]


def app() -> web.Application:
    async def small(request):
        return json_response({"ok": True})

    async def big(request):
        return json_response(BIG)

    async def listed(request):
        return await stream_json_list(request, pages(BIG if request.query.get("n") != "1" else BIG[:1]))

    async def sized(request):
        body = b"x" * int(request.query["size"])
        resp = web.StreamResponse()
        await start_sized(request, resp, len(body))
        await resp.write(body)
        await resp.write_eof()
        return resp

    a = web.Application(middlewares=[gzip_middleware])
    for path, handler in (("/small", small), ("/big", big), ("/list", listed), ("/sized", sized),
                          (STREAM_PATH, big)):
        a.router.add_get(path, handler)
    return a


def fetch(path: str, accept: str | None) -> tuple[dict, bytes]:
    """Headers and the raw (still compressed) body of ``path``."""
    async def run():
        async with TestClient(TestServer(app())) as client:
            headers = {"Accept-Encoding": accept} if accept is not None else {"Accept-Encoding": ""}
            r = await client.get(path, headers=headers, auto_decompress=False)
            return dict(r.headers), await r.read()
    return asyncio.run(run())


@pytest.mark.parametrize("path", ["/big", "/list", "/sized?size=5000"])
@pytest.mark.parametrize("accept", ["gzip", "deflate, gzip;q=0.5", "GZIP"])
def test_a_large_answer_is_gzipped_when_asked(path: str, accept: str) -> None:
    headers, body = fetch(path, accept)
    assert headers["Content-Encoding"] == "gzip" and headers["Vary"] == "Accept-Encoding"
    plain = gzip.decompress(body)  # one layer
    assert len(plain) >= GZIP_MIN and not plain.startswith(b"\x1f\x8b")


@pytest.mark.parametrize("path,accept", [
    ("/big", None), ("/big", "deflate"), ("/big", "gzip;q=0"), ("/small", "gzip"), ("/list?n=1", "gzip"),
    ("/sized?size=1399", "gzip"), (STREAM_PATH, "gzip"),
], ids=["not asked", "other coding", "refused with q=0", "small", "small streamed list", "just below",
        "the event stream"])
def test_otherwise_the_answer_is_sent_as_it_is(path: str, accept: str | None) -> None:
    headers, body = fetch(path, accept)
    assert "Content-Encoding" not in headers and "Vary" not in headers
    assert not body.startswith(b"\x1f\x8b")


def test_a_small_streamed_answer_has_its_length() -> None:
    headers, body = fetch("/list?n=1", "gzip")
    assert int(headers["Content-Length"]) == len(body) and body == b'[{"name":"node-0000"}]'
