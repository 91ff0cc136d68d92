"""``/ws/v1/scheduler/healthcheck``: YuniKorn's checks from every partition, plus the checks of a
distributed stack (the broker link, Redis, a worker per partition, worker heartbeats, RM
connections): 200 ``{"Healthy": bool, "HealthChecks": [...]}`` whether healthy or not, as YuniKorn
answers since 1.5 (its web UI reads the body; v1.2 answered 503 when unhealthy).

The partition checks walk every node and allocation (~40-90 ms of a worker's time at 5,000
nodes / 50,000 allocations) and a dashboard polls every 2 s, so each answer is reused for
``HEALTH_TTL`` (YuniKorn, too, serves its last periodic run); the state dump reuses them.
"""

from __future__ import annotations

import time

from aiohttp import web

from common.health import health_check
from common.heartbeat import EXPIRY
from common.messages import HealthQuery
from rmproxy.webapi._http import json_response
from rmproxy.webapi.cluster import ClusterReader, Target
from rmproxy.webapi.seams import Registrations

__all__ = ["HealthApi", "HEALTH_TTL"]

HEALTH_TTL = 5.0  # seconds a partition's health answer is reused (YuniKorn serves its last periodic run)


class HealthApi:
    def __init__(self, store: Registrations, reader: ClusterReader) -> None:
        self.store = store
        self.reader = reader
        self._health: tuple[float, list, list] | None = None  # (monotonic time, answers, errors)

    async def healthcheck(self, request: web.Request) -> web.Response:
        """YuniKorn's checks from every partition, plus the checks of a distributed stack."""
        checks = await self.health_checks()
        return json_response({"Healthy": all(c["Succeeded"] for c in checks), "HealthChecks": checks})

    async def partition_health(self) -> tuple[list[tuple[Target, list[dict]]], list[str]]:
        """Each partition's health checks as its worker answered them (at most HEALTH_TTL old),
        and the partitions that could not answer."""
        cached = self._health
        if cached is not None and time.monotonic() - cached[0] < HEALTH_TTL:
            return cached[1], cached[2]
        answers, errors = await self.reader.query_all_with_errors(HealthQuery())
        self._health = (time.monotonic(), answers, errors)
        return answers, errors

    async def health_checks(self) -> list[dict]:
        """The partitions' checks merged by name (a failure names its partition), then the stack's."""
        targets = self.reader.targets()
        answers, errors = await self.partition_health()
        merged: dict[tuple[str, str], list[str]] = {}
        for t, checks in answers:
            for c in checks:
                problems = merged.setdefault((c["Name"], c["Description"]), [])
                if not c["Succeeded"]:
                    problems.append(f"{t.full_name}: {c['DiagnosisMessage']}")
        return ([health_check(name, description, problems) for (name, description), problems in merged.items()]
                + await self._stack_checks(targets, errors))

    async def _stack_checks(self, targets: list[Target], partition_errors: list[str]) -> list[dict]:
        broker = self.reader.broker
        try:
            redis_ok = await self.store.ping()
            redis_msg = "" if redis_ok else "Redis does not answer PING"
        except Exception as exc:
            redis_msg = f"Redis unreachable: {exc}"
        workers = broker.view.status.get("workers", []) if broker.connected else []
        late = [f"worker {w['name']} last heartbeat {w['heartbeatAge']:.1f}s ago"
                for w in workers if (w.get("heartbeatAge") or 0) > EXPIRY]
        no_worker = [f"partition {t.full_name} has no worker" for t in targets if t.epoch is None]
        states = {rm_id: info.get("state") for rm_id, (_, info) in self.reader.remote_rms().items()}
        states.update({rm.rm_id: rm.state.value for rm in self.reader.rms.values()})  # this proxy's: freshest
        paused = [f"RM {rm_id} is {state}" for rm_id, state in sorted(states.items()) if state != "Running"]
        return [
            health_check("Broker link", "Check that this rmproxy hears the broker",
                         [] if broker.connected else [f"no message from the broker at {broker.address} "
                                                      f"for more than {EXPIRY:.0f}s"]),
            health_check("Redis", "Check that Redis (RM registrations) answers", [redis_msg] if redis_msg else []),
            health_check("Partition workers", "Check that every partition has a worker", no_worker),
            health_check("Worker heartbeats", "Check that every partition's worker answers and heartbeats",
                         late + [e for e in partition_errors if "has no worker" not in e]),
            health_check("RM connections", "Check that every registered RM is Running", paused),
        ]
