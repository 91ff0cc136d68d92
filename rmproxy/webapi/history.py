"""``GET /ws/v1/history/apps|containers``: totals of applications and containers over time, one
sample a minute, 1440 kept, as YuniKorn's internal metrics history does."""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from aiohttp import web

from common.messages import PartitionQuery
from rmproxy.webapi._http import json_response
from rmproxy.webapi.cluster import ClusterReader

__all__ = ["History", "HISTORY_SIZE", "HISTORY_INTERVAL"]

log = logging.getLogger("korral.rmproxy")

HISTORY_SIZE = 1440  # records kept (one day at one a minute), YuniKorn's size
HISTORY_INTERVAL = 60.0  # seconds between history samples
HISTORY_FIRST = 5.0  # seconds after start for the first sample


class History:
    """Totals of applications and containers over time (YuniKorn's internal metrics history)."""

    def __init__(self, reader: ClusterReader) -> None:
        self.reader = reader
        self.records: collections.deque = collections.deque(maxlen=HISTORY_SIZE)

    async def sample(self) -> None:
        answers = await self.reader.query_all(PartitionQuery())
        self.records.append((time.time_ns(), sum(p["totalApplications"] for _, p in answers),
                             sum(p["totalContainers"] for _, p in answers)))

    async def run(self) -> None:
        await asyncio.sleep(HISTORY_FIRST)  # the broker link is up by then: the first point counts
        while True:
            try:
                await self.sample()
            except Exception as exc:  # a history gap is better than a dead sampler
                log.warning("history sample failed: %s", exc)
            await asyncio.sleep(HISTORY_INTERVAL)

    async def apps(self, request: web.Request) -> web.Response:
        return json_response([{"timestamp": t, "totalApplications": str(a)} for t, a, _ in self.records])

    async def containers(self, request: web.Request) -> web.Response:
        return json_response([{"timestamp": t, "totalContainers": str(c)} for t, _, c in self.records])
