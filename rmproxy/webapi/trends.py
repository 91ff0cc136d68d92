"""The dashboard over time: allocations/s, pending asks and per-queue usage against guaranteed and
max, for every partition, sampled every ``interval`` seconds over the last ``TRENDS_WINDOW``.

A ring buffer in this rmproxy (``Trends``): each sample is one ``metrics`` query per partition
(the numbers ``/ws/v1/metrics`` shows: the worker's count of allocations made, the pending asks,
each queue's allocated, guaranteed and max). It lives as long as the rmproxy does; a restarted
rmproxy starts an empty one.

``GET /ws/v1/korral/partition/{partition}/trends`` answers columns ready to chart, one value per
sample time (``null`` where there is none):
``{"partition", "rmID", "interval", "window", "times": [seconds], "allocationsPerSecond": [...],
"pendingAsks": [...], "queues": {path: {resource: {"used": [...], "guaranteed": [...],
"max": [...]}}}}`` with at most ``TRENDS_QUEUES`` queues (the shallowest first, then by path).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from typing import Any

from aiohttp import web

from common.messages import MetricsQuery
from rmproxy.webapi._http import json_response
from rmproxy.webapi.cluster import ClusterReader

__all__ = ["Trends", "TRENDS_INTERVAL", "TRENDS_WINDOW", "TRENDS_QUEUES", "columns"]

log = logging.getLogger("korral.rmproxy")

TRENDS_INTERVAL = 10.0  # seconds between samples (korral rmproxy --trends-interval)
TRENDS_WINDOW = 3600.0  # seconds of samples kept
TRENDS_QUEUES = 50  # queues charted per partition
_USED, _GUARANTEED, _MAX = "used", "guaranteed", "max"


class Trends:
    """The ring buffer of samples and its sampler (see module doc)."""

    def __init__(self, reader: ClusterReader, interval: float = TRENDS_INTERVAL) -> None:
        self.reader = reader
        self.interval = interval
        # (time ns, {(rmID, partition): sample}); a sample: {"allocated", "pendingAsks", "queues"}
        self.samples: collections.deque = collections.deque(maxlen=max(2, math.ceil(TRENDS_WINDOW / interval)))

    async def sample(self) -> None:
        answers = await self.reader.query_all(MetricsQuery())
        if not answers:
            return  # nothing registered, or the broker link not up yet: no point in the charts
        parts = {}
        for target, m in answers:
            observed = m.get("observed") or {}
            parts[(target.rm_id, target.partition)] = {
                "allocated": (observed.get("allocationAttempts") or {}).get("allocated"),
                "pendingAsks": m.get("pendingAsks"),
                "queues": {q["path"]: (q["allocated"], q["guaranteed"], q["max"]) for q in m.get("queues", [])}}
        self.samples.append((time.time_ns(), parts))

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception as exc:  # a gap in the charts is better than a dead sampler
                log.warning("trends sample failed: %s", exc)
            await asyncio.sleep(self.interval)

    async def partition(self, request: web.Request) -> web.Response:
        target = self.reader.resolve(request.match_info["partition"], request.query.get("rmID"))
        doc = columns([(t, parts.get((target.rm_id, target.partition))) for t, parts in self.samples])
        return json_response({"partition": target.partition, "rmID": target.rm_id, "interval": self.interval,
                              "window": TRENDS_WINDOW, **doc})


def columns(samples: list[tuple[int, dict | None]]) -> dict[str, Any]:
    """The samples of one partition (None: it did not answer then) as chart columns."""
    samples = [(t, s) for t, s in samples if s is not None]
    times = [t / 1e9 for t, _ in samples]
    rates: list[float | None] = []
    for i, (t, s) in enumerate(samples):
        prev = samples[i - 1] if i else None
        if prev is None or s["allocated"] is None or prev[1]["allocated"] is None:
            rates.append(None)
            continue
        made = s["allocated"] - prev[1]["allocated"]
        if made < 0:  # the worker's count restarted (a new worker, a re-registration)
            made = s["allocated"]
        rates.append(round(made / max((t - prev[0]) / 1e9, 1e-9), 3))
    last = samples[-1][1]["queues"] if samples else {}
    paths = sorted(last, key=lambda p: (p.count("."), p))[:TRENDS_QUEUES]
    queues: dict[str, dict] = {}
    for path in sorted(paths):
        kinds = sorted({k for _, s in samples for part in s["queues"].get(path, ({}, {}, {})) for k in part})
        queues[path] = {k: {name: [_value(s["queues"].get(path), i, k) for _, s in samples]
                            for i, name in enumerate((_USED, _GUARANTEED, _MAX))} for k in kinds}
    return {"times": times, "allocationsPerSecond": rates, "pendingAsks": [s["pendingAsks"] for _, s in samples],
            "queues": queues}


def _value(queue: tuple | None, which: int, kind: str) -> int | None:
    """Used (0 when the type is not in use), guaranteed or max (None when not set) of ``kind``."""
    if queue is None:
        return None
    value = queue[which].get(kind)
    return value if value is not None or which else 0
