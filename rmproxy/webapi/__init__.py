"""YuniKorn's REST API, Prometheus metrics and the dashboard, served by rmproxy.

``install(app, proxy)`` adds to rmproxy's aiohttp app (called by ``rmproxy.rest.build_app``):

- every ``/ws/v1`` path of /work/shared/REST_API.md, aggregated over all partitions of the
  stack by querying their workers through the broker (any rmproxy answers for the cluster);
- ``/ws/v1/metrics`` (Prometheus text), ``/ws/v1/korral/processes`` (the stack view);
- the dashboard at ``/`` (static files of ``rmproxy/web``);
- CORS on every answer, OPTIONS preflight, trailing slashes tolerated, and YuniKorn's error
  body ``{"status_code", "message", "description"}`` for every error under ``/ws/v1``.

Public: ``install``, ``ClusterReader`` (for other rmproxy code needing cluster reads).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from rmproxy.webapi._http import CORS_HEADERS, ApiError, error_response
from rmproxy.webapi.cluster import ClusterReader
from rmproxy.webapi.korral import KorralApi, ResyncObserver
from rmproxy.webapi.metrics import CONTENT_TYPE, render_metrics
from rmproxy.webapi.state import History, StateApi
from rmproxy.webapi.yunikorn import YuniKornApi

__all__ = ["install", "ClusterReader"]

log = logging.getLogger("korral.rmproxy")
WEB_DIR = Path(__file__).resolve().parent.parent / "web"


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    """YuniKorn's error shape for every failure under /ws/v1 (and CORS on it)."""
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


def install(app: web.Application, proxy: Any) -> None:
    """Add the API, metrics and dashboard routes and the middleware to rmproxy's app."""
    reader = ClusterReader(proxy)
    resyncs = ResyncObserver()
    resyncs.attach(proxy)
    history = History(reader)
    korral = KorralApi(proxy, reader, resyncs)
    state = StateApi(proxy, reader, korral.stack_view, history, korral.partition_health)
    yk = YuniKornApi(proxy, reader)

    async def metrics(request: web.Request) -> web.Response:
        answers = await reader.query_all({"what": "metrics"})
        body = render_metrics(answers, korral.proxy_view())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE, **CORS_HEADERS})

    async def preflight(request: web.Request) -> web.Response:
        return web.Response(status=200, headers=CORS_HEADERS)

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(WEB_DIR / "index.html")

    routes = yk.routes() + state.routes() + korral.routes() + [
        ("GET", "/ws/v1/metrics", metrics),
        ("GET", "/ws/v1/history/apps", history.apps),
        ("GET", "/ws/v1/history/containers", history.containers),
    ]
    for method, path, handler in routes:
        # a trailing slash is tolerated (a second route, not a redirect: POST bodies survive)
        for p in (path,) if path.endswith(".*}") else (path, path + "/"):
            if method == "GET":
                app.router.add_get(p, handler)  # HEAD too
            else:
                app.router.add_route(method, p, handler)
    app.router.add_route("OPTIONS", "/ws/v1/{tail:.*}", preflight)
    app.router.add_get("/", index)
    app.router.add_static("/ui/", WEB_DIR, show_index=False)
    app.middlewares.append(_errors)

    async def start_history(app: web.Application) -> None:
        app["korral_history"] = asyncio.create_task(history.run())

    async def stop_history(app: web.Application) -> None:
        task = app.get("korral_history")
        if task is not None:
            task.cancel()

    app.on_startup.append(start_history)
    app.on_cleanup.append(stop_history)
