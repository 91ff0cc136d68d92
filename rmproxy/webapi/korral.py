"""Korral's own views: the processes of the stack, RM connection states, resyncs, health.

The stack view joins the broker's STATUS (workers, partitions, proxies) with what this rmproxy
holds (its RMs and their streams). Resyncs are observed by wrapping ``proxy.resync`` and
``proxy.register`` on this one Proxy instance (an observer: behaviour is unchanged).
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from common.heartbeat import EXPIRY
from rmproxy.webapi._http import int_query, json_response
from rmproxy.webapi.cluster import ClusterReader

__all__ = ["ResyncObserver", "KorralApi"]

RESYNC_HISTORY = 100
HEALTH_TTL = 5.0  # seconds a partition's health answer is reused (YuniKorn serves its last periodic run)


@dataclass(slots=True)
class ResyncObserver:
    """Counts RM resyncs and measures each one until the RM has registered again."""

    count: int = 0
    seconds: float = 0.0
    started: dict[str, tuple[float, str]] = field(default_factory=dict)
    history: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RESYNC_HISTORY))

    def attach(self, proxy: Any) -> None:
        proxy.listeners.append(self)

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
    def __init__(self, proxy: Any, reader: ClusterReader, resyncs: ResyncObserver) -> None:
        self.proxy = proxy
        self.reader = reader
        self.resyncs = resyncs
        self._health: tuple[float, list, list] | None = None  # (monotonic time, answers, errors)

    def routes(self) -> list[tuple[str, str, Any]]:
        return [
            ("GET", "/ws/v1/korral/processes", self.processes),
            ("GET", "/ws/v1/korral/partition/{partition}/heatmap", self.heatmap),
            ("GET", "/ws/v1/korral/partition/{partition}/applications", self.app_summaries),
            ("GET", "/ws/v1/korral/partition/{partition}/application/{application}/allocation/{key}/explain",
             self.explain),
            ("GET", "/ws/v1/scheduler/healthcheck", self.healthcheck),
        ]

    def proxy_view(self) -> dict:
        """This rmproxy's own numbers (for metrics and the stack view)."""
        p = self.proxy
        return {"name": p.name, "pid": os.getpid(), "brokerConnected": p.broker_connected,
                "dropped": p.dropped, "resyncs": self.resyncs.count, "resyncSeconds": self.resyncs.seconds,
                "pendingQueries": len(p.requests.pending), "cluster": p.cluster(),
                "rms": {rm.rm_id: rm.state.value for rm in p.rms.values()}}

    def _remote_rms(self) -> dict[str, tuple[str, dict]]:
        """RM states reported by every rmproxy through the broker: rmID -> (rmproxy, info)."""
        out: dict[str, tuple[str, dict]] = {}
        cluster = self.proxy.cluster()
        for rp in cluster.get("rmproxies", []):
            for rm_id, info in (rp.get("rms") or {}).items():
                if isinstance(info, dict):
                    out[rm_id] = (rp.get("name", ""), info)
        return out

    async def stack_view(self) -> dict:
        p = self.proxy
        cluster = p.cluster()
        held = {rm.rm_id: rm for rm in p.rms.values()}
        rms = [{"rmID": rm.rm_id, "state": rm.state.value, "proxy": p.name, "partitions": rm.partitions,
                "epochs": rm.epochs, "streams": sorted(rm.streams), "subscribers": len(rm.subscribers),
                "droppedResponses": rm.dropped_responses} for rm in held.values()]
        remote = self._remote_rms()
        targets = self.reader.targets()
        for rm_id in sorted(({t.rm_id for t in targets} | set(remote)) - set(held)):
            holder, info = remote.get(rm_id, (None, {}))
            rms.append({"rmID": rm_id, "state": info.get("state", "Unknown"), "proxy": holder,
                        "partitions": info.get("partitions") or [t.partition for t in targets if t.rm_id == rm_id],
                        "epochs": {}, "streams": [], "subscribers": 0, "droppedResponses": 0})
        return {
            "time": time.time_ns(),
            "rmproxy": {"name": p.name, "pid": os.getpid(), "brokerConnected": p.broker_connected,
                        "broker": p.broker_address, "dropped": p.dropped, "startTime": p.started_ns},
            "broker": {"connected": p.broker_connected, "routed": cluster.get("routed"),
                       "badFrames": cluster.get("badFrames"), "rmproxies": cluster.get("proxies"),
                       "queueDepth": cluster.get("queueDepth"), "viewAgeMs": cluster.get("viewAgeMs")},
            "rmproxies": [{"name": rp.get("name"), "host": rp.get("host"), "pid": rp.get("pid"),
                           "heartbeatAge": rp.get("heartbeatAge"), "rms": sorted(rp.get("rms") or {}),
                           "self": rp.get("name") == p.name}
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
        return json_response(await self.reader.query(target, {"what": "heatmap"}))

    async def explain(self, request: web.Request) -> web.Response:
        """Why a pending ask waits: ``{state, reason, reservedNode, queueHeadroomBlockedBy,
        limitBlockedBy, nodes: {rejection stage: node count}}`` (``PartitionSession.explain``)."""
        m = request.match_info
        target = self.reader.resolve(m["partition"], request.query.get("rmID"))
        return json_response(await self.reader.query(target, {"what": "explain", "app": m["application"],
                                                              "key": m["key"]}))

    async def app_summaries(self, request: web.Request) -> web.Response:
        """One small row per application, ``?offset=&limit=`` (default 1,000): ``{total, items}``."""
        target = self.reader.resolve(request.match_info["partition"], request.query.get("rmID"))
        offset = int_query(request, "offset", 0) or 0
        limit = int_query(request, "limit", 1000)
        items: list = []
        total = 0
        async for page in self.reader.pages(target, {"what": "app_summaries"}, None, offset, limit):
            items.extend(page)
        page0 = await self.reader.query(target, {"what": "app_summaries", "offset": 0, "limit": 0})
        total = page0["total"]
        return json_response({"total": total, "offset": offset, "items": items})

    async def processes(self, request: web.Request) -> web.Response:
        return json_response(await self.stack_view())

    async def healthcheck(self, request: web.Request) -> web.Response:
        """YuniKorn's checks from every partition, plus the checks of a distributed stack."""
        checks = await self.health_checks()
        healthy = all(c["Succeeded"] for c in checks)
        doc = {"Healthy": healthy, "HealthChecks": checks}
        if healthy:
            return json_response(doc)
        failed = "; ".join(f"{c['Name']}: {c['DiagnosisMessage']}" for c in checks if not c["Succeeded"])
        return json_response({"status_code": 503, "message": "Scheduler is not healthy",
                              "description": failed} | doc, 503)

    async def partition_health(self) -> tuple[list, list]:
        """Each partition's health checks as its worker answered them, reused for HEALTH_TTL:
        the checks walk every node and allocation (~40-90 ms of a worker's time at 5,000 nodes
        / 50,000 allocations), and a dashboard polls every 2 s. The state dump reuses them too."""
        cached = self._health
        if cached is not None and time.monotonic() - cached[0] < HEALTH_TTL:
            return cached[1], cached[2]
        answers, errors = await self.reader.query_all_with_errors({"what": "health"})
        self._health = (time.monotonic(), answers, errors)
        return answers, errors

    async def health_checks(self) -> list[dict]:
        p = self.proxy
        targets = self.reader.targets()
        answers, errors = await self.partition_health()
        merged: dict[tuple[str, str], dict] = {}
        for t, checks in answers:
            for c in checks:
                m = merged.setdefault((c["Name"], c["Description"]), dict(c, DiagnosisMessage=""))
                if not c["Succeeded"]:
                    m["Succeeded"] = False
                    m["DiagnosisMessage"] = "; ".join(x for x in (m["DiagnosisMessage"],
                                                                  f"{t.full_name}: {c['DiagnosisMessage']}") if x)
        try:
            redis_ok = await p.store.ping()
            redis_msg = "" if redis_ok else "Redis does not answer PING"
        except Exception as exc:
            redis_msg = f"Redis unreachable: {exc}"
        workers = p.view.status.get("workers", []) if p.broker_connected else []
        late = [f"worker {w['name']} last heartbeat {w['heartbeatAge']:.1f}s ago"
                for w in workers if (w.get("heartbeatAge") or 0) > EXPIRY]
        no_worker = [f"partition {t.full_name} has no worker" for t in targets if t.epoch is None]
        states = {rm_id: info.get("state") for rm_id, (_, info) in self._remote_rms().items()}
        states.update({rm.rm_id: rm.state.value for rm in p.rms.values()})  # this proxy's: freshest
        paused = [f"RM {rm_id} is {state}" for rm_id, state in sorted(states.items()) if state != "Running"]
        return list(merged.values()) + [
            _check("Broker link", "Check that this rmproxy hears the broker",
                   [] if p.broker_connected else [f"no message from the broker at {p.broker_address} "
                                                  f"for more than {EXPIRY:.0f}s"]),
            _check("Redis", "Check that Redis (RM registrations) answers", [redis_msg] if redis_msg else []),
            _check("Partition workers", "Check that every partition has a worker", no_worker),
            _check("Worker heartbeats", "Check that every partition's worker answers and heartbeats",
                   late + [e for e in errors if "has no worker" not in e]),
            _check("RM connections", "Check that every registered RM is Running", paused),
        ]


def _check(name: str, description: str, problems: list[str]) -> dict:
    return {"Name": name, "Succeeded": not problems, "Description": description,
            "DiagnosisMessage": "; ".join(problems)}
