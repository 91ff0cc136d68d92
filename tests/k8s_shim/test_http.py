"""The shim's lean HTTP/1.1 client (``k8s_shim.kube.http``): framing (Content-Length, chunked with
trailers, until close), kept-alive connections reused and replaced when the server closed them,
the connection limit, timeouts, and streamed bodies read as batches of lines, against aiohttp's
server and against a raw socket server that splits its answers where it likes."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from k8s_shim.kube.http import HttpError, Pool


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 20))


class Server:
    """An aiohttp server with a few routes; counts connections and concurrent requests."""

    def __init__(self) -> None:
        self.connections = 0
        self._transports: set[int] = set()
        self.active = self.most_active = 0
        self.release = asyncio.Event()
        self.release.set()
        app = web.Application()
        app.router.add_route("*", "/echo", self.echo)
        app.router.add_get("/slow", self.slow)
        app.router.add_get("/lines", self.lines)
        app.router.add_get("/close", self.close)
        self.runner = web.AppRunner(app, access_log=None)
        self.url = ""

    async def __aenter__(self) -> "Server":
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()

    async def echo(self, request: web.Request) -> web.Response:
        if id(request.transport) not in self._transports:
            self._transports.add(id(request.transport))
            self.connections += 1
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await self.release.wait()
            body = await request.read()
            return web.json_response({"method": request.method, "path": request.path_qs, "body": body.decode(),
                                      "type": request.headers.get("Content-Type", ""),
                                      "auth": request.headers.get("Authorization", "")}, status=201)
        finally:
            self.active -= 1

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def lines(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b'{"n":1}\n{"n"')  # a line split across chunks
        await asyncio.sleep(0.05)
        await resp.write(b':2}\n\n{"n":3}\n')
        if request.query.get("cut"):
            request.transport.close()  # dropped midway: no end of stream
            return resp
        await resp.write(b'{"n":4}')  # the last line without a newline
        await resp.write_eof()
        return resp

    async def close(self, request: web.Request) -> web.Response:
        return web.Response(text="bye", headers={"Connection": "close"})


def test_requests_reuse_one_kept_alive_connection_and_carry_body_type_and_auth():
    async def main():
        async with Server() as server:
            tokens = iter(["Bearer a", "Bearer a", "Bearer b"])
            pool = Pool(server.url, auth=lambda: next(tokens), headers={"Accept": "application/json"})
            try:
                answers = [await pool.request("POST", "/echo?x=1", b'{"k":1}', "application/json") for _ in range(3)]
            finally:
                await pool.close()
        assert [a.status for a in answers] == [201, 201, 201]
        first = json.loads(answers[0].body)
        assert first == {"method": "POST", "path": "/echo?x=1", "body": '{"k":1}', "type": "application/json",
                         "auth": "Bearer a"}
        assert json.loads(answers[2].body)["auth"] == "Bearer b"  # the header follows a new token
        assert answers[0].headers["content-type"].startswith("application/json")
        assert pool.connects == 1 and server.connections == 1
    run(main())


def test_at_most_limit_connections_and_callers_queue_beyond_it():
    async def main():
        async with Server() as server:
            pool = Pool(server.url, limit=3)
            server.release.clear()
            try:
                calls = [asyncio.create_task(pool.request("GET", "/echo")) for _ in range(10)]
                for _ in range(50):
                    await asyncio.sleep(0.01)
                assert server.active == 3
                server.release.set()
                answers = await asyncio.gather(*calls)
            finally:
                await pool.close()
        assert all(a.status == 201 for a in answers)
        assert server.most_active == 3 and pool.connects == 3
    run(main())


def test_a_streamed_body_comes_as_batches_of_complete_lines():
    async def main():
        async with Server() as server:
            pool = Pool(server.url)
            try:
                stream = await pool.stream("/lines", read_timeout=5)
                got = [line async for batch in stream.batches() for line in batch]
                stream.close()
                cut = await pool.stream("/lines?cut=1", read_timeout=5)
                seen = []
                with pytest.raises(HttpError):
                    async for batch in cut.batches():
                        seen += batch
                cut.close()
            finally:
                await pool.close()
        assert stream.status == 200
        assert got == [b'{"n":1}', b'{"n":2}', b'{"n":3}', b'{"n":4}']  # empty lines skipped
        assert seen == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    run(main())


def test_a_request_without_an_answer_in_time_fails_and_its_connection_is_not_reused():
    async def main():
        async with Server() as server:
            pool = Pool(server.url)
            try:
                with pytest.raises(HttpError, match="no answer within 0.2s"):
                    await pool.request("GET", "/slow", timeout=0.2)
                ok = await pool.request("GET", "/echo")
            finally:
                await pool.close()
        assert ok.status == 201 and pool.connects == 2
    run(main())


def test_connection_close_is_honoured_and_an_unreachable_server_is_an_http_error():
    async def main():
        async with Server() as server:
            pool = Pool(server.url)
            try:
                bye = await pool.request("GET", "/close")
                again = await pool.request("GET", "/echo")
            finally:
                await pool.close()
        assert (bye.status, bye.body) == (200, b"bye") and again.status == 201 and pool.connects == 2
        dead = Pool(server.url)
        with pytest.raises(HttpError, match="cannot connect"):
            await dead.request("GET", "/echo")
        await dead.close()
    run(main())


class RawServer:
    """Answers each request with the next scripted list of byte pieces (written with pauses), then
    closes the connection when the script says so."""

    def __init__(self, *answers: tuple[list[bytes], bool]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0

    async def __aenter__(self) -> "RawServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                self.requests.append(head + await reader.readexactly(length))
                pieces, close = self.answers.pop(0)
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.01)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def test_answers_split_anywhere_chunked_with_trailers_interim_and_until_close():
    async def main():
        async with RawServer(
                ([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2", b"01 Created\r\nContent-Le", b"ngth: 5\r\n\r\nhe",
                  b"llo"], False),
                ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n", b"2\r\nde\r",
                  b"\n0\r\nX-Trailer: 1\r\n\r\n"], False),
                ([b"HTTP/1.0 200 OK\r\n\r\nuntil ", b"close"], True)) as server:
            pool = Pool(server.url)
            try:
                first = await pool.request("POST", "/a", b"x", "text/plain")
                second = await pool.request("GET", "/b")
                third = await pool.request("GET", "/c")
            finally:
                await pool.close()
        assert (first.status, first.body) == (201, b"hello")
        assert (second.status, second.body) == (200, b"abcde")
        assert (third.status, third.body) == (200, b"until close")
        assert server.connections == 1 and server.requests[0].endswith(b"\r\n\r\nx")
        assert b"Content-Type: text/plain\r\n" in server.requests[0]
    run(main())


def test_a_kept_alive_connection_the_server_closed_is_replaced_without_an_error():
    async def main():
        # the first answer closes the connection without saying so: the next request finds it dead
        async with RawServer(([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], True),
                             ([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain"], True)) as server:
            pool = Pool(server.url)
            try:
                first = await pool.request("GET", "/a")
                await asyncio.sleep(0.1)  # the close arrives while the connection is idle
                second = await pool.request("GET", "/b")
            finally:
                await pool.close()
        assert first.body == b"ok" and second.body == b"again" and server.connections == 2
    run(main())


def test_a_request_the_server_dropped_unanswered_on_a_reused_connection_is_sent_once_more():
    async def main():
        async with RawServer(([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], False),
                             ([], True),  # reads the second request and closes without a word
                             ([b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nagain"], True),
                             ([], True)) as server:
            pool = Pool(server.url)
            try:
                first = await pool.request("POST", "/a", b"1", "text/plain")
                second = await pool.request("POST", "/b", b"2", "text/plain")
                with pytest.raises(HttpError, match="closed the connection"):  # a new connection: not again
                    await pool.request("POST", "/c", b"3", "text/plain")
            finally:
                await pool.close()
        assert first.body == b"ok" and (second.status, second.body) == (201, b"again")
        assert [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b", b"/b", b"/c"]
    run(main())


def test_garbage_instead_of_http_is_an_error():
    async def main():
        async with RawServer(([b"SSH-2.0-OpenSSH\r\n\r\n"], True)) as server:
            pool = Pool(server.url)
            try:
                with pytest.raises(HttpError, match="not an HTTP/1.1 response"):
                    await pool.request("GET", "/a")
            finally:
                await pool.close()
    run(main())


def test_only_http_urls_are_accepted():
    with pytest.raises(ValueError, match="not an http"):
        Pool("ftp://example")


def test_submitted_requests_answer_through_their_callback_in_order_on_kept_alive_connections():
    async def main():
        async with Server() as server:
            pool = Pool(server.url, limit=2)
            answers: list = []
            try:
                await pool.request("GET", "/echo")  # one connection open and idle
                tasks_before = len(asyncio.all_tasks())
                pool.submit("POST", "/echo?n=1", b"1", "text/plain", 5.0, lambda r, e: answers.append((r, e)))
                assert len(asyncio.all_tasks()) == tasks_before  # on the idle connection: no task
                while not answers:
                    await asyncio.sleep(0.01)
                # a callback that fails is logged; the connection goes on serving
                pool.submit("GET", "/echo", done=lambda r, e: 1 / 0)
                for n in range(2, 6):
                    pool.submit("POST", f"/echo?n={n}", b"x", "", 5.0, lambda r, e: answers.append((r, e)))
                while len(answers) < 5:
                    await asyncio.sleep(0.01)
            finally:
                await pool.close()
        assert all(e is None and r.status == 201 for r, e in answers)
        assert sorted(json.loads(r.body)["path"] for r, _ in answers) == [f"/echo?n={n}" for n in range(1, 6)]
        assert pool.connects <= 2 and server.connections <= 2
    run(main())


def test_requests_waiting_for_a_connection_fail_when_the_pool_closes():
    async def main():
        async with Server() as server:
            pool = Pool(server.url, limit=1)
            server.release.clear()
            answers: list = []
            for _ in range(3):
                pool.submit("GET", "/echo", done=lambda r, e: answers.append((r, e)))
            while server.active < 1:
                await asyncio.sleep(0.01)
            await pool.close()
            while len(answers) < 3:
                await asyncio.sleep(0.01)
            server.release.set()
        assert all(r is None and isinstance(e, HttpError) for r, e in answers)
    run(main())
