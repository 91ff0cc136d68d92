"""The double's own HTTP/1.1 server (k8s_shim/fake/httpd.py) on the wire: keep-alive and
pipelining, request bodies by length and chunked, ``Expect: 100-continue``, the limits and the
errors they give, HEAD, watches to a slow reader (bounded memory), shutdown with open watches,
and TLS with the clients the tests use (aiohttp, urllib, the shim's own)."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.fake.httpd import MAX_HEAD
from k8s_shim.fake.server import MAX_BODY
from k8s_shim.kube.http import Pool
from tests.conftest import wait_until_async

pytestmark = pytest.mark.timeout(60)

POD = json.dumps({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}).encode()


@asynccontextmanager
async def served(**options: Any):
    cluster = FakeCluster(ClusterOptions(kubelet=False, garbage_collector=False, **options))
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


class Raw:
    """A bare connection: what is sent is exactly what the test writes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, cluster: FakeCluster) -> "Raw":
        return cls(*await asyncio.open_connection(cluster.host, cluster.port))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        """One answer, framed by its Content-Length or chunked encoding."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int((await asyncio.wait_for(self.reader.readline(), 10)).strip(), 16)
                chunk = await asyncio.wait_for(self.reader.readexactly(size + 2), 10)
                if size == 0:
                    return status, headers, body
                body += chunk[:-2]
        length = int(headers.get("content-length", "0"))
        return status, headers, await asyncio.wait_for(self.reader.readexactly(length), 10)

    async def closed(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 10) == b""

    def close(self) -> None:
        self.writer.close()


def post(body: bytes, extra: str = "") -> bytes:
    return (f"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_keep_alive_answers_pipelined_requests_in_order_and_close_is_honoured():
    async def scenario():
        async with served() as cluster:
            raw = await Raw.open(cluster)
            await raw.send(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n" + post(POD)
                           + b"GET /api/v1/namespaces/default/pods/p HTTP/1.1\r\nHost: x\r\n\r\n"
                           + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, headers, body = await raw.answer()
            assert status == 200 and headers["content-type"] == "application/json" and b"gitVersion" in body
            assert "date" in headers
            status, _, body = await raw.answer()
            assert status == 201 and json.loads(body)["metadata"]["name"] == "p"
            status, _, body = await raw.answer()
            assert status == 200 and json.loads(body)["kind"] == "Pod"
            status, headers, body = await raw.answer()
            assert (status, body, headers["connection"]) == (200, b"ok", "close")
            assert headers["content-type"] == "text/plain; charset=utf-8"
            assert await raw.closed()
    asyncio.run(scenario())


def test_http_1_0_closes_unless_asked_to_keep_alive():
    async def scenario():
        async with served() as cluster:
            raw = await Raw.open(cluster)
            await raw.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            assert (await raw.answer())[0] == 200
            await raw.send(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert (await raw.answer())[0] == 200
            assert await raw.closed()
    asyncio.run(scenario())


def test_a_chunked_body_and_expect_100_continue():
    async def scenario():
        async with served() as cluster:
            raw = await Raw.open(cluster)
            await raw.send(b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            half = len(POD) // 2
            await raw.send(b"%x;ext=1\r\n%s\r\n" % (half, POD[:half]))
            await raw.send(b"%x\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (len(POD) - half, POD[half:]))
            status, _, body = await raw.answer()
            assert status == 201 and json.loads(body)["metadata"]["name"] == "p"
            second = POD.replace(b'"p"', b'"q"')
            await raw.send(post(b"", "Expect: 100-continue\r\n")[:-2].replace(b"Content-Length: 0",
                           b"Content-Length: %d" % len(second)) + b"\r\n")
            assert await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
            await raw.send(second)
            status, _, body = await raw.answer()
            assert status == 201 and json.loads(body)["metadata"]["name"] == "q"
            raw.close()
    asyncio.run(scenario())


def test_limits_and_malformed_requests_get_a_real_servers_errors_and_a_closed_connection():
    async def scenario():
        async with served() as cluster:
            raw = await Raw.open(cluster)
            await raw.send(b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
                           % (MAX_BODY + 1))
            status, headers, body = await raw.answer()
            assert status == 413 and headers["connection"] == "close"
            assert json.loads(body) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                        "message": f"Request entity too large: limit is {MAX_BODY}",
                                        "reason": "RequestEntityTooLarge", "code": 413}
            assert await raw.closed()

            raw = await Raw.open(cluster)  # a chunked body over the limit
            await raw.send(b"POST /api/v1/namespaces/default/pods HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"%x\r\n" % (MAX_BODY + 1))
            assert (await raw.answer())[0] == 413 and await raw.closed()

            raw = await Raw.open(cluster)
            await raw.send(b"GET /version HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD + 10))
            status, _, body = await raw.answer()
            assert (status, body) == (431, b"431 Request Header Fields Too Large") and await raw.closed()

            for bad in (b"GARBAGE\r\n\r\n", b"GET /version HTTP/1.1\r\nno colon here\r\n\r\n",
                        b"POST /version HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"GET /version SPDY/3\r\n\r\n"):
                raw = await Raw.open(cluster)
                await raw.send(bad)
                status, headers, body = await raw.answer()
                assert status == 400 and body.startswith(b"400 Bad Request"), bad
                assert headers["content-type"] == "text/plain; charset=utf-8" and await raw.closed()

            raw = await Raw.open(cluster)  # the server is still fine; the absolute form is understood
            await raw.send(b"HEAD /version HTTP/1.1\r\n\r\nGET http://x:1/healthz HTTP/1.1\r\n\r\n")
            head = await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 405 ") and b"Content-Length: " in head
            assert (await raw.answer())[2] == b"ok"  # HEAD's answer had no body
            raw.close()
    asyncio.run(scenario())


def test_a_watcher_that_does_not_read_holds_no_unbounded_memory_and_others_go_on():
    async def scenario():
        async with served(history=200) as cluster:
            pods = cluster.api.kind("v1", "pods")
            slow = await Raw.open(cluster)
            slow.writer.transport.set_write_buffer_limits(0)
            slow.writer.transport.pause_reading()  # a client that never reads its watch
            await slow.send(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            async with aiohttp.ClientSession(cluster.url) as http:
                async with http.get("/api/v1/pods?watch=1") as resp:
                    big = {"big": "x" * 20_000}
                    for i in range(400):  # ~8 MB of lines: more than the socket buffers hold
                        cluster.api.create(pods, "default", {"metadata": {"name": f"p{i}", "annotations": big},
                                                             "spec": {"containers": [{"name": "c", "image": "b"}]}})
                        if i % 20 == 0:
                            await asyncio.sleep(0)
                    seen = 0
                    while seen < 400:
                        line = await asyncio.wait_for(resp.content.readline(), 10)
                        assert json.loads(line)["type"] == "ADDED"
                        seen += 1
            conns = [c for c in cluster.server.http.connections if c.transport is not None]

            def buffered() -> int:
                return max(c.transport.get_write_buffer_size() for c in conns)
            await wait_until_async(lambda: not cluster.store.buckets["pods"].watchers or buffered() < 4 << 20,
                                   10, "the slow watcher's buffer to stay bounded")
            assert buffered() < 4 << 20  # paused at the high-water mark, the queue ends it with a 410
            slow.close()
    asyncio.run(scenario())


def test_stop_ends_open_watches_and_closes_idle_connections():
    async def scenario():
        cluster = FakeCluster(ClusterOptions(kubelet=False, garbage_collector=False))
        await cluster.start()
        idle = await Raw.open(cluster)
        await idle.send(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert (await idle.answer())[0] == 200
        watcher = await Raw.open(cluster)
        await watcher.send(b"GET /api/v1/namespaces?watch=1 HTTP/1.1\r\n\r\n")
        head = await asyncio.wait_for(watcher.reader.readuntil(b"\r\n\r\n"), 10)
        assert b"Transfer-Encoding: chunked" in head
        await wait_until_async(lambda: cluster.server._open_watches, 10, "the watch to start")
        loop = asyncio.get_running_loop()
        started = loop.time()
        await cluster.stop()
        assert loop.time() - started < 2.0  # the watch ended at once, not after the grace period
        rest = await asyncio.wait_for(watcher.reader.read(), 10)
        assert rest.endswith(b"0\r\n\r\n")  # a clean end of the chunked stream
        assert await idle.closed()
    asyncio.run(scenario())


def test_tls_with_the_clients_the_tests_and_the_shim_use(tmp_path):
    from k8s_shim.fake.tls import self_signed
    cert, key = self_signed(tmp_path, "127.0.0.1")

    async def scenario():
        async with served(tls=(str(cert), str(key)), token="t") as cluster:
            context = ssl.create_default_context(cafile=str(cert))
            async with aiohttp.ClientSession(cluster.url, headers={"Authorization": "Bearer t"}) as http:
                async with http.post("/api/v1/namespaces/default/pods", data=POD, ssl=context,
                                     headers={"Content-Type": "application/json"}) as resp:
                    assert resp.status == 201
            pool = Pool(cluster.url, headers={"Authorization": "Bearer t"}, ssl=context)
            try:
                answer = await pool.request("GET", "/api/v1/namespaces/default/pods/p")
                assert answer.status == 200 and json.loads(answer.body)["metadata"]["name"] == "p"
            finally:
                await pool.close()

            def urllib_get(path: str, headers: dict[str, str]) -> tuple[int, bytes]:
                request = urllib.request.Request(cluster.url + path, headers=headers)
                try:
                    with urllib.request.urlopen(request, context=context, timeout=10) as got:
                        return got.status, got.read()
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read()
            status, body = await asyncio.to_thread(urllib_get, "/api/v1/namespaces/default/pods",
                                                   {"Authorization": "Bearer t"})
            assert status == 200 and [i["metadata"]["name"] for i in json.loads(body)["items"]] == ["p"]
            status, body = await asyncio.to_thread(urllib_get, "/api/v1/pods", {})
            assert status == 401 and json.loads(body)["reason"] == "Unauthorized"
    asyncio.run(scenario())


def test_watches_of_one_resource_share_lines_but_each_gets_its_own_event_type():
    async def scenario():
        async with served() as cluster:
            pods = cluster.api.kind("v1", "pods")
            cluster.api.create(pods, "default", {"metadata": {"name": "a", "labels": {"v": "1"}},
                                                 "spec": {"containers": [{"name": "c", "image": "b"}]}})
            streams = []
            for query in ("", "", "&labelSelector=v%3D2"):
                raw = await Raw.open(cluster)
                await raw.send(f"GET /api/v1/namespaces/default/pods?watch=1&resourceVersion="
                               f"{cluster.store.rv}{query} HTTP/1.1\r\n\r\n".encode())
                await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 10)
                streams.append(raw)
            await wait_until_async(lambda: len(cluster.server._open_watches) == 3, 10, "three watches")
            cluster.api.patch(pods, "default", "a", "merge", {"metadata": {"labels": {"v": "2"}}})

            async def line(raw: Raw) -> bytes:
                size = int((await asyncio.wait_for(raw.reader.readline(), 10)).strip(), 16)
                return (await asyncio.wait_for(raw.reader.readexactly(size + 2), 10))[:-2]
            plain, again, selected = [await line(raw) for raw in streams]
            assert plain == again and json.loads(plain)["type"] == "MODIFIED"
            assert json.loads(selected)["type"] == "ADDED"  # moved into its selector
            assert json.loads(selected)["object"] == json.loads(plain)["object"]
            for raw in streams:
                raw.close()
    asyncio.run(scenario())


def test_a_client_that_half_closes_gets_its_answer_and_an_incomplete_request_a_closed_connection():
    async def scenario():
        async with served() as cluster:
            raw = await Raw.open(cluster)
            await raw.send(b"GET /version HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n")
            raw.writer.write_eof()
            assert (await raw.answer())[0] == 200 and (await raw.answer())[2] == b"ok"
            assert await raw.closed()
            raw = await Raw.open(cluster)
            await raw.send(post(POD)[:-10])
            raw.writer.write_eof()
            assert await raw.closed()
    asyncio.run(scenario())


def test_a_kept_alive_connection_without_requests_is_closed_but_not_a_watch():
    async def scenario():
        async with served(idle_timeout=0.6) as cluster:
            idle, watching = await Raw.open(cluster), await Raw.open(cluster)
            await idle.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await idle.answer())[0] == 200
            await watching.send(b"GET /api/v1/namespaces/default/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(watching.reader.readuntil(b"\r\n\r\n"), 10)
            assert b" 200 " in head.split(b"\r\n")[0]
            assert await idle.closed()  # within the sweep after 0.6 s without a request
            await watching.send(b"")
            raw = await Raw.open(cluster)  # the watch still streams: a pod created is seen on it
            await raw.send(post(POD))
            assert (await raw.answer())[0] == 201
            line = await asyncio.wait_for(watching.reader.readline(), 10)  # the chunk size
            assert int(line.strip(), 16) > 0
            assert b'"ADDED"' in await asyncio.wait_for(watching.reader.readline(), 10)
            for conn in (watching, raw):
                conn.close()
    asyncio.run(scenario())
