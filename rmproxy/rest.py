"""The REST server of rmproxy (YuniKorn's ``/ws/v1`` paths and Korral's own).

This module holds the aiohttp application and Korral's own readiness and stack
endpoints; ``rmproxy.webapi`` adds the YuniKorn-compatible API, metrics and dashboard.
"""

from __future__ import annotations

from aiohttp import web

from rmproxy.proxy import Proxy
from rmproxy.webapi import install

JSON_TYPE = "application/json; charset=UTF-8"


def json_response(data, status: int = 200) -> web.Response:
    import json

    return web.Response(text=json.dumps(data), status=status, content_type="application/json",
                        charset="utf-8", headers={"Access-Control-Allow-Origin": "*"})


def build_app(proxy: Proxy) -> web.Application:
    app = web.Application()

    async def ready(request: web.Request) -> web.Response:
        """200 once connected to the broker and Redis; `korral up` waits on this."""
        state = proxy.ready()
        state["redis"] = await proxy.store.ping()
        state["ready"] = bool(state["broker"] and state["redis"])
        return json_response(state, 200 if state["ready"] else 503)

    async def cluster(request: web.Request) -> web.Response:
        """The stack as the broker sees it, plus this proxy's RMs."""
        return json_response({
            "broker": proxy.broker_connected,
            "cluster": proxy.cluster(),
            "rms": [{"rmID": rm.rm_id, "state": rm.state.value, "partitions": rm.partitions,
                     "epochs": rm.epochs} for rm in proxy.rms.values()],
        })

    app.router.add_get("/ws/v1/korral/ready", ready)
    app.router.add_get("/ws/v1/korral/stack", cluster)
    install(app, proxy)  # the YuniKorn-compatible API, metrics and the dashboard
    return app
