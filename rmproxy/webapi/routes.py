"""Every HTTP path rmproxy serves, in one table: (method, path, handler), grouped by concern.

A new endpoint is one row here and one handler in the module of its concern:
``yunikorn`` (YuniKorn's read paths), ``events``, ``config``, ``state`` (the full dump),
``debug``, ``history``, ``health``, ``metrics``, ``korral`` (Korral's own views), ``trends``
(the dashboard's charts), ``admin`` (config changes), ``dashboard``. ``add_routes`` puts the
table on the aiohttp app: every path also answers with a trailing slash (a second route, not a
redirect, so POST bodies survive), and GET routes answer HEAD too. With a UI directory
(``korral rmproxy --ui-dir``), its files are served at ``/`` after every other route, and
Korral's dashboard moves to ``/ui/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from aiohttp import web

from rmproxy.webapi._http import preflight
from rmproxy.webapi.admin import AdminApi
from rmproxy.webapi.config import ConfigApi
from rmproxy.webapi.dashboard import STATIC_PREFIX, WEB_DIR, UiDir, index
from rmproxy.webapi.debug import stack
from rmproxy.webapi.events import EventsApi
from rmproxy.webapi.health import HealthApi
from rmproxy.webapi.history import History
from rmproxy.webapi.korral import KorralApi
from rmproxy.webapi.metrics import MetricsApi
from rmproxy.webapi.state import StateApi
from rmproxy.webapi.trends import Trends
from rmproxy.webapi.yunikorn import YuniKornApi

__all__ = ["Handlers", "Route", "route_table", "add_routes"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Route = tuple[str, str, Handler]  # (method, path, handler)
V1 = "/ws/v1"
P = V1 + "/partition/{partition}"
ADMIN = V1 + "/korral/admin/config/{rmID}"


@dataclass(frozen=True, slots=True)
class Handlers:
    """The handler objects of one rmproxy, one per concern."""

    yunikorn: YuniKornApi
    events: EventsApi
    config: ConfigApi
    state: StateApi
    history: History
    health: HealthApi
    metrics: MetricsApi
    korral: KorralApi
    admin: AdminApi
    trends: Trends


def route_table(h: Handlers) -> list[Route]:
    yk, k = h.yunikorn, h.korral
    return [
        # YuniKorn's read paths (v1.2: /work/shared/REST_API.md; later ones: docs/yunikorn-compat.md)
        ("GET", f"{V1}/clusters", yk.clusters),
        ("GET", f"{V1}/partitions", yk.partitions),
        ("GET", f"{P}/queues", yk.queues),
        ("GET", f"{P}/queue/{{queue}}", yk.queue),
        ("GET", f"{P}/placementrules", yk.placement_rules),
        ("GET", f"{P}/nodes", yk.nodes),
        ("GET", f"{P}/node/{{node}}", yk.node),
        ("GET", f"{P}/applications", yk.partition_apps),
        ("GET", f"{P}/applications/{{state}}", yk.partition_apps_by_state),
        ("GET", f"{P}/queue/{{queue}}/applications", yk.queue_apps),
        ("GET", f"{P}/queue/{{queue}}/applications/{{state}}", yk.queue_apps_by_state),
        ("GET", f"{P}/queue/{{queue}}/application/{{app}}", yk.queue_app),
        ("GET", f"{P}/application/{{app}}", yk.app),
        ("GET", f"{P}/usage/users", yk.users),
        ("GET", f"{P}/usage/user/{{user}}", yk.user),
        ("GET", f"{P}/usage/groups", yk.groups),
        ("GET", f"{P}/usage/group/{{group}}", yk.group),
        ("GET", f"{V1}/scheduler/node-utilizations", yk.node_utilizations),
        ("GET", f"{V1}/events/batch", h.events.batch),
        ("GET", f"{V1}/events/stream", h.events.stream),
        # removed from YuniKorn in 1.4 and 1.5; Korral keeps them (docs/yunikorn-compat.md)
        ("GET", f"{V1}/loglevel", yk.get_loglevel),
        ("PUT", f"{V1}/loglevel/{{level}}", yk.set_loglevel),
        ("POST", f"{V1}/loglevel/{{level}}", yk.set_loglevel),
        ("GET", f"{V1}/loglevel/{{level}}", yk.set_loglevel),
        ("PUT", f"{V1}/periodicstatedump/{{tail:.*}}", yk.periodic_dump),
        # the active config and its validation
        ("GET", f"{V1}/config", h.config.config),
        ("POST", f"{V1}/validate-conf", h.config.validate),
        # the full state dump (today's path and keys; v1.2's path with v1.2's keys), the stack
        ("GET", "/debug/fullstatedump", h.state.dump),
        ("GET", f"{V1}/fullstatedump", h.state.dump_v12),
        ("GET", "/debug/stack", stack),
        ("GET", f"{V1}/stack", stack),
        # the history of totals
        ("GET", f"{V1}/history/apps", h.history.apps),
        ("GET", f"{V1}/history/containers", h.history.containers),
        # health checks and Prometheus metrics
        ("GET", f"{V1}/scheduler/healthcheck", h.health.healthcheck),
        ("GET", f"{V1}/metrics", h.metrics.metrics),
        # Korral's own views
        ("GET", f"{V1}/korral/ready", k.ready),
        ("GET", f"{V1}/korral/stack", k.stack),
        ("GET", f"{V1}/korral/processes", k.processes),
        ("GET", f"{V1}/korral/partition/{{partition}}/heatmap", k.heatmap),
        ("GET", f"{V1}/korral/partition/{{partition}}/trends", h.trends.partition),
        ("GET", f"{V1}/korral/partition/{{partition}}/applications", k.app_summaries),
        ("GET", f"{V1}/korral/partition/{{partition}}/application/{{application}}/explain", k.app_status),
        ("GET", f"{V1}/korral/partition/{{partition}}/application/{{application}}/allocation/{{key}}/explain",
         k.explain),
        # the admin endpoint (authenticated): an RM's config changed by an operator
        ("GET", f"{ADMIN}", h.admin.get),
        ("PUT", f"{ADMIN}", h.admin.apply),
        ("POST", f"{ADMIN}/dry-run", h.admin.dry_run),
        ("GET", f"{ADMIN}/history", h.admin.history),
        ("POST", f"{ADMIN}/rollback/{{id}}", h.admin.rollback),
        # CORS preflight of every /ws/v1 path; the dashboard (its files: STATIC_PREFIX)
        ("OPTIONS", f"{V1}/{{tail:.*}}", preflight),
        ("GET", STATIC_PREFIX, index),
    ]


def add_routes(app: web.Application, table: list[Route], ui_dir: Path | None = None) -> None:
    """The table's routes, the dashboard's files, and ``/``: the dashboard, or with ``ui_dir``
    that UI's files (matched last, so they never shadow a route)."""
    for method, path, handler in table:
        for p in (path,) if path.endswith(("/", ".*}")) else (path, path + "/"):
            if method == "GET":
                app.router.add_get(p, handler)  # HEAD too
            else:
                app.router.add_route(method, p, handler)
    app.router.add_static(STATIC_PREFIX, WEB_DIR, show_index=False)
    if ui_dir is None:
        app.router.add_get("/", index)
    else:
        ui = UiDir(ui_dir)
        app.router.add_get("/", ui.file)
        app.router.add_get("/{tail:.+}", ui.file)
