"""A scripted API server for unit tests of the shim's client side: every request is answered by
the next answer queued for its (method, path, list-or-watch), and recorded.

Answers: ``reply(status, body)`` (a JSON body), ``lines(*objs, hold=None, drop=False)`` (a watch
stream of those lines, ended by the server, or held open until ``hold`` is set, or cut without
an end of stream with ``drop``). An unscripted request is answered 500 and recorded, so a test
sees it. The recordings of a real kube-apiserver (``recordings``) give the bodies where a test
wants the real thing.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict, deque
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from common.netutil import free_ports

__all__ = ["Scripted", "reply", "lines", "recording", "WIRE_DIR"]

REPO = Path(__file__).resolve().parents[2]


def _wire_dir() -> Path | None:
    env = os.environ.get("KORRAL_K8S_WIRE")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "k8s-wire", REPO.parent.parent / "shared" / "k8s-wire"]
    return next((c for c in candidates if (c / "README.md").exists()), None)


WIRE_DIR = _wire_dir()


def recording(name: str) -> dict:
    """A recording of the real API server (``NN-slug.json``); the caller skips when WIRE_DIR is None."""
    assert WIRE_DIR is not None
    return json.loads((WIRE_DIR / name).read_text())


Answer = Callable[[web.Request], Any]


def reply(status: int, body: Any) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status)
    return answer


def lines(*objs: dict, hold: asyncio.Event | None = None, drop: bool = False) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for obj in objs:
            await resp.write(json.dumps(obj).encode() + b"\n")
        if drop:
            request.transport.close()  # no end of stream: the connection is lost
            return resp
        if hold is not None:
            await hold.wait()
        await resp.write_eof()
        return resp
    return answer


class Scripted:
    def __init__(self) -> None:
        self.answers: dict[tuple[str, str, bool], deque[Answer]] = defaultdict(deque)
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    def on(self, method: str, path: str, *answers: Answer, watch: bool = False) -> None:
        self.answers[(method, path, watch)].extend(answers)

    def asked(self, method: str, path: str, watch: bool | None = None) -> list[dict[str, str]]:
        """The queries of the requests made to (method, path), list or watch or both."""
        return [q for m, p, q, _ in self.requests
                if m == method and p == path and (watch is None or (q.get("watch") == "true") == watch)]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        query = dict(request.query)
        self.requests.append((request.method, request.path, query, body))
        queue = self.answers.get((request.method, request.path, query.get("watch") == "true"))
        if not queue:
            return web.json_response({"kind": "Status", "status": "Failure", "message": "unscripted request",
                                      "reason": "InternalError", "code": 500}, status=500)
        return await queue.popleft()(request)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> "Scripted":
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        self.port = free_ports(1)[0]
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
