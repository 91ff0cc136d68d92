"""Korral's own views under ``/ws/v1/korral/``: readiness, the processes of the stack, RM connection
states, resyncs, and the dashboard's compact reads (heat map, application rows, explain).

The stack view joins the broker's STATUS (workers, partitions, proxies) with what this rmproxy
holds (its RMs and their streams). Resyncs are observed by ``ResyncObserver``, a listener of
the RM registry's lifecycle events (an observer: behaviour is unchanged).
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field

from aiohttp import web

from common.messages import AppStatusQuery, AppSummariesQuery, ExplainQuery, HeatmapQuery
from rmproxy.webapi._http import int_query, json_response
from rmproxy.webapi.cluster import ClusterReader
from rmproxy.webapi.seams import Identity, Registrations

__all__ = ["ResyncObserver", "KorralApi"]

RESYNC_HISTORY = 100


@dataclass(slots=True)
class ResyncObserver:
    """Counts RM resyncs and measures each one until the RM has registered again."""

    count: int = 0
    seconds: float = 0.0
    started: dict[str, tuple[float, str]] = field(default_factory=dict)
    history: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RESYNC_HISTORY))

    def resync_started(self, rm_id: str, reason: str) -> None:
        self.count += 1
        self.started[rm_id] = (time.monotonic(), reason)
        self.history.append({"rmID": rm_id, "reason": reason, "time": time.time_ns(), "durationSeconds": None})

    def registered(self, rm_id: str) -> None:
        began = self.started.pop(rm_id, None)
        if began is None:
            return
        took = time.monotonic() - began[0]
        self.seconds += took
        for h in reversed(self.history):
            if h["rmID"] == rm_id and h["durationSeconds"] is None:
                h["durationSeconds"] = round(took, 3)
                break


class KorralApi:
    def __init__(self, me: Identity, store: Registrations, reader: ClusterReader, resyncs: ResyncObserver) -> None:
        self.me = me
        self.store = store
        self.reader = reader
        self.broker = reader.broker
        self.resyncs = resyncs

    def proxy_view(self) -> dict:
        """This rmproxy's own numbers (the metrics' ``korral_rmproxy_*`` series)."""
        broker = self.broker
        return {"name": self.me.name, "pid": os.getpid(), "brokerConnected": broker.connected,
                "dropped": self.me.dropped, "resyncs": self.resyncs.count, "resyncSeconds": self.resyncs.seconds,
                "pendingQueries": len(broker.requests.pending), "cluster": broker.cluster(),
                "rms": {rm.rm_id: rm.state.value for rm in self.reader.rms.values()}}

    async def ready(self, request: web.Request) -> web.Response:
        """200 once connected to the broker and Redis; `korral up` waits on this."""
        connected = self.broker.connected
        workers = self.broker.view.status.get("workers", []) if connected else []
        state = {"broker": connected, "workers": len(workers), "redis": await self.store.ping()}
        state["ready"] = bool(state["broker"] and state["redis"])
        return json_response(state, 200 if state["ready"] else 503)

    async def stack(self, request: web.Request) -> web.Response:
        """The stack as the broker sees it, plus this proxy's RMs (``korral status``)."""
        return json_response({
            "broker": self.broker.connected,
            "cluster": self.broker.cluster(),
            "rms": [{"rmID": rm.rm_id, "state": rm.state.value, "partitions": rm.partitions,
                     "epochs": rm.epochs, "compatibility": rm.compatibility().as_dict()}
                    for rm in self.reader.rms.values()],
        })

    async def processes(self, request: web.Request) -> web.Response:
        return json_response(await self.stack_view())

    async def stack_view(self) -> dict:
        """Every process of the stack, partition, RM and resync (the dashboard's Stack view)."""
        me, broker = self.me, self.broker
        cluster = broker.cluster()
        held = {rm.rm_id: rm for rm in self.reader.rms.values()}
        rms = [{"rmID": rm.rm_id, "state": rm.state.value, "proxy": me.name, "partitions": rm.partitions,
                "epochs": rm.epochs, "streams": sorted(rm.streams), "subscribers": len(rm.subscribers),
                "droppedResponses": rm.dropped_responses, "compatibility": rm.compatibility().as_dict()}
               for rm in held.values()]
        remote = self.reader.remote_rms()
        targets = self.reader.targets()
        for rm_id in sorted(({t.rm_id for t in targets} | set(remote)) - set(held)):
            holder, info = remote.get(rm_id, (None, {}))
            rms.append({"rmID": rm_id, "state": info.get("state", "Unknown"), "proxy": holder,
                        "partitions": info.get("partitions") or [t.partition for t in targets if t.rm_id == rm_id],
                        "epochs": {}, "streams": [], "subscribers": 0, "droppedResponses": 0,
                        "compatibility": info.get("compatibility")})
        return {
            "time": time.time_ns(),
            "rmproxy": {"name": me.name, "pid": os.getpid(), "brokerConnected": broker.connected,
                        "broker": broker.address, "dropped": me.dropped, "startTime": me.started_ns},
            "broker": {"connected": broker.connected, "routed": cluster.get("routed"),
                       "badFrames": cluster.get("badFrames"), "rmproxies": cluster.get("proxies"),
                       "queueDepth": cluster.get("queueDepth"), "viewAgeMs": cluster.get("viewAgeMs")},
            "rmproxies": [{"name": rp.get("name"), "host": rp.get("host"), "pid": rp.get("pid"),
                           "heartbeatAge": rp.get("heartbeatAge"), "rms": sorted(rp.get("rms") or {}),
                           "self": rp.get("name") == me.name}
                          for rp in cluster.get("rmproxies", [])],
            "workers": [dict(w) | {"heartbeatAge": w.get("heartbeatAge")} for w in cluster.get("workers", [])],
            "partitions": [{"rmID": t.rm_id, "partition": t.partition, "worker": t.worker, "epoch": t.epoch,
                            "state": t.state} for t in targets],
            "rms": rms,
            "resyncs": list(self.resyncs.history),
        }

    async def heatmap(self, request: web.Request) -> web.Response:
        """Every node as ``[nodeID, utilisation %, schedulable, ready]`` (the dashboard's heat map)."""
        target = self.reader.resolve(request.match_info["partition"], request.query.get("rmID"))
        return json_response(await self.reader.query(target, HeatmapQuery()))

    async def explain(self, request: web.Request) -> web.Response:
        """Why a pending ask waits: ``{state, reason, reservedNode, queueHeadroomBlockedBy,
        limitBlockedBy, nodes: {rejection stage: node count}}`` (``PartitionSession.explain``)."""
        m = request.match_info
        target = self.reader.resolve(m["partition"], request.query.get("rmID"))
        return json_response(await self.reader.query(target, ExplainQuery(app=m["application"], key=m["key"])))

    async def app_status(self, request: web.Request) -> web.Response:
        """Where an application stands (``korral explain APP``): active with its pending asks'
        keys, or how and when it ended (finished, removed by the RM, expired)."""
        m = request.match_info
        target = self.reader.resolve(m["partition"], request.query.get("rmID"))
        return json_response(await self.reader.query(target, AppStatusQuery(
            app=m["application"], limit=int_query(request, "limit", 50))))

    async def app_summaries(self, request: web.Request) -> web.Response:
        """One small row per application, ``?offset=&limit=`` (default 1,000): ``{total, items}``."""
        target = self.reader.resolve(request.match_info["partition"], request.query.get("rmID"))
        offset = int_query(request, "offset", 0) or 0
        limit = int_query(request, "limit", 1000)
        items: list = []
        total = 0
        async for page in self.reader.pages(target, AppSummariesQuery(), None, offset, limit):
            items.extend(page)
        page0 = await self.reader.query(target, AppSummariesQuery(offset=0, limit=0))
        total = page0["total"]
        return json_response({"total": total, "offset": offset, "items": items})
