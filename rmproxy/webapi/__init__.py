"""rmproxy's REST server: YuniKorn's REST API, Korral's own views, Prometheus metrics and the
dashboard, on one aiohttp app (``build_app``, run by ``rmproxy.main``).

- every ``/ws/v1`` path of YuniKorn v1.2 (/work/shared/REST_API.md) and those added up to 1.9
  (docs/yunikorn-compat.md), aggregated over all partitions of the stack by querying their
  workers through the broker (``cluster.ClusterReader``); events batched and streamed
  (``events``); the state dump and the stack under ``/debug`` (``state``, ``debug``);
- ``/ws/v1/metrics`` (Prometheus text), ``/ws/v1/scheduler/healthcheck``, ``/ws/v1/korral/*``;
- the admin endpoint ``/ws/v1/korral/admin/config/{rmID}`` (``admin``: authenticated config changes);
- the dashboard at ``/`` (static files of ``rmproxy/web``), or a web UI directory there
  (``--ui-dir``) with the dashboard at ``/ui/``; the dashboard's trends over the last hour
  (``trends``: a ring buffer sampled every ``--trends-interval`` seconds);
- CORS on every answer, OPTIONS preflight, trailing slashes tolerated, gzip as YuniKorn
  (``compress``), and YuniKorn's error body ``{"status_code", "message", "description"}`` for
  every error under ``/ws/``.

Every path is a row of ``routes.route_table``; each handler lives in the module of its concern.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from common.config import MAX_CONFIG_BYTES
from rmproxy.webapi._http import errors_middleware
from rmproxy.webapi.admin import AdminApi, AdminAuth
from rmproxy.webapi.cluster import ClusterReader
from rmproxy.webapi.compress import gzip_middleware
from rmproxy.webapi.config import ConfigApi
from rmproxy.webapi.events import EventsApi
from rmproxy.webapi.health import HealthApi
from rmproxy.webapi.history import History
from rmproxy.webapi.korral import KorralApi, ResyncObserver
from rmproxy.webapi.metrics import MetricsApi
from rmproxy.webapi.routes import Handlers, add_routes, route_table
from rmproxy.webapi.seams import RMProxy
from rmproxy.webapi.state import StateApi
from rmproxy.webapi.trends import TRENDS_INTERVAL, Trends
from rmproxy.webapi.yunikorn import YuniKornApi

__all__ = ["build_app"]


def build_app(rmproxy: RMProxy, admin: AdminAuth | None = None, trends_interval: float = TRENDS_INTERVAL,
              ui_dir: Path | None = None) -> web.Application:
    """The REST app of ``rmproxy`` (its parts: ``rmproxy.proxy.Proxy``): every route, the
    error shape, and the samplers of the history and the dashboard's trends (started and stopped
    with the app). Each handler is given the parts it reads (``seams``). ``admin`` says who may
    use the admin endpoint (default: nobody, it is disabled); ``ui_dir``: a web UI served at ``/``."""
    store, held = rmproxy.store, rmproxy.registry
    reader = ClusterReader(rmproxy.broker, held.rms)
    resyncs = ResyncObserver()
    held.listeners.append(resyncs)
    history = History(reader)
    trends = Trends(reader, trends_interval)
    korral = KorralApi(rmproxy, store, reader, resyncs)
    health = HealthApi(store, reader)
    events = EventsApi(store, reader)
    handlers = Handlers(
        yunikorn=YuniKornApi(store, reader, rmproxy.started_ns), events=events, config=ConfigApi(store, reader),
        state=StateApi(held, store, reader, korral.stack_view, history, health.partition_health,
                       events.streams_info),
        history=history, health=health, metrics=MetricsApi(reader, korral.proxy_view), korral=korral,
        admin=AdminApi(store, rmproxy.config_changes, held.rms, reader, admin or AdminAuth()), trends=trends)
    # gzip outermost: error answers are compressed like any other; a config may be as large as
    # the SI allows (4 MiB): the admin endpoint says so past that
    app = web.Application(middlewares=[gzip_middleware, errors_middleware],
                          client_max_size=MAX_CONFIG_BYTES + 64 * 1024)
    add_routes(app, route_table(handlers), ui_dir)

    async def start_samplers(app: web.Application) -> None:
        app["korral_samplers"] = [asyncio.create_task(history.run()), asyncio.create_task(trends.run())]

    async def stop_samplers(app: web.Application) -> None:
        for task in app.get("korral_samplers", ()):
            task.cancel()

    app.on_startup.append(start_samplers)
    app.on_cleanup.append(stop_samplers)
    return app
