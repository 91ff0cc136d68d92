"""Handlers of YuniKorn's ``/ws/v1`` read paths (see /work/shared/REST_API.md for the contract).

Each handler asks the owning workers through ``ClusterReader`` and reshapes nothing the
worker already answers in YuniKorn DAO shape; cluster-wide answers are concatenated per
partition. Long lists (applications, nodes) are streamed page by page.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from rmproxy.server.webapi._http import (ALLOW_ORIGIN, ApiError, check_queue_path, int_query, json_response,
                                  stream_json_list)
from rmproxy.server.webapi.cluster import PAGE, ClusterReader, Target

__all__ = ["YuniKornApi", "cluster_info"]

LOG_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
              "WARNING": logging.WARNING, "ERROR": logging.ERROR, "DPANIC": logging.CRITICAL,
              "PANIC": logging.CRITICAL, "FATAL": logging.CRITICAL}
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN",
                logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}
_CLUSTER_COUNTS = ("totalApplications", "totalContainers", "totalNodes", "runningApplications",
                   "runningContainers", "activeNodes", "failedApplications", "pendingApplications",
                   "completedApplications", "failedContainers", "pendingContainers", "failedNodes")


def cluster_info(t: Target, part: dict, build_info: dict | None, start_ns: int) -> dict:
    """YuniKorn's ClusterInfo for one partition: counts as strings, as YuniKorn sends them."""
    info = {"startTime": start_ns, "rmBuildInformation": [build_info] if build_info else [],
            "partition": t.partition, "clusterName": t.rm_id}
    for k in _CLUSTER_COUNTS:
        info[k] = str(part.get(k, 0))
    return info


class YuniKornApi:
    def __init__(self, proxy: Any, reader: ClusterReader) -> None:
        self.proxy = proxy
        self.reader = reader

    def _target(self, request: web.Request) -> Target:
        return self.reader.resolve(request.match_info["partition"], request.query.get("rmID"))

    # -- cluster and partitions ------------------------------------------------------

    async def clusters(self, request: web.Request) -> web.Response:
        answers = await self.reader.query_all({"what": "partition"})
        out = []
        for t, part in answers:
            reg = await self._registration(t.rm_id)
            out.append(cluster_info(t, part, reg.build_info if reg else None,
                                    reg.registered_at_ns if reg else self.proxy.started_ns))
        return json_response(out)

    async def _registration(self, rm_id: str):
        try:
            return await self.proxy.store.load(rm_id)
        except Exception:  # Redis down: the answer goes on without build information
            return None

    async def partitions(self, request: web.Request) -> web.Response:
        answers = await self.reader.query_all({"what": "partition"})
        out = []
        for t, part in answers:
            out.append({k: part[k] for k in ("clusterId", "name", "state", "lastStateTransitionTime",
                                             "capacity", "nodeSortingPolicy", "applications")}
                       | {"rmID": t.rm_id, "totalNodes": part["totalNodes"],
                          "totalContainers": part["totalContainers"]})
        return json_response(out)

    # -- queues --------------------------------------------------------------------------

    async def queues(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(self._target(request), {"what": "queues"}))

    async def queue(self, request: web.Request) -> web.Response:
        """One queue of the tree (with its children): a Korral convenience for scripts."""
        path = check_queue_path(request.match_info["queue"])
        tree = await self.reader.query(self._target(request), {"what": "queues"})
        found = _find_queue(tree, path)
        if found is None:
            raise ApiError(400, "Queue not found", f"queue {path!r} does not exist")
        return json_response(found)

    # -- applications --------------------------------------------------------------------

    async def _stream(self, request: web.Request, target: Target, body: dict) -> web.StreamResponse:
        """A list answer streamed page by page; ``?offset=&limit=`` (Korral's) select a slice.
        The first page is read before answering, so errors keep their status code."""
        offset = int_query(request, "offset", 0) or 0
        limit = int_query(request, "limit", None)
        want = PAGE if limit is None else min(PAGE, limit)
        first = await self.reader.query(target, {**body, "offset": offset, "limit": want})
        return await stream_json_list(request, self.reader.pages(target, body, first, offset, limit))

    async def queue_apps(self, request: web.Request) -> web.StreamResponse:
        target = self._target(request)
        queue = check_queue_path(request.match_info["queue"])
        return await self._stream(request, target, {"what": "apps", "queue": queue})

    async def partition_apps(self, request: web.Request) -> web.StreamResponse:
        """Every application of the partition, active and finished (``?state=`` filters)."""
        target = self._target(request)
        body: dict = {"what": "apps"}
        states = [s for s in request.query.getall("state", []) if s]
        if states:
            body["states"] = states
        return await self._stream(request, target, body)

    async def queue_app(self, request: web.Request) -> web.Response:
        target = self._target(request)
        queue = check_queue_path(request.match_info["queue"])
        return json_response(await self.reader.query(
            target, {"what": "app", "queue": queue, "app": request.match_info["app"]}))

    async def app(self, request: web.Request) -> web.Response:
        target = self._target(request)
        return json_response(await self.reader.query(target, {"what": "app", "app": request.match_info["app"]}))

    # -- nodes ---------------------------------------------------------------------------

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, self._target(request), {"what": "nodes"})

    async def node(self, request: web.Request) -> web.Response:
        target = self._target(request)
        return json_response(await self.reader.query(target, {"what": "node", "node": request.match_info["node"]}))

    # -- usage ---------------------------------------------------------------------------

    async def users(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(self._target(request), {"what": "usage", "kind": "users"}))

    async def user(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(
            self._target(request), {"what": "usage", "kind": "user", "name": request.match_info["user"]}))

    async def groups(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(self._target(request), {"what": "usage", "kind": "groups"}))

    async def group(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(
            self._target(request), {"what": "usage", "kind": "group", "name": request.match_info["group"]}))

    # -- events --------------------------------------------------------------------------

    async def events(self, request: web.Request) -> web.Response:
        """Recent events of every partition (or ``?partition=``), oldest first; ``count`` caps it."""
        count = int_query(request, "count", 100)
        name = request.query.get("partition")
        if name:
            targets = [self.reader.resolve(name, request.query.get("rmID"))]
            answers = [(targets[0], await self.reader.query(targets[0], {"what": "events"}))]
        else:
            answers = await self.reader.query_all({"what": "events"})
        records = [e for _, page in answers for e in page["items"]]
        records.sort(key=lambda e: e["timestampNano"])
        records = records[-count:] if count else []
        return json_response({"InstanceUUID": self.proxy.name, "LowestID": 0,
                              "HighestID": len(records), "EventRecords": records})

    # -- log level -----------------------------------------------------------------------

    async def get_loglevel(self, request: web.Request) -> web.Response:
        level = logging.getLogger("korral").getEffectiveLevel()
        return web.Response(text=_LEVEL_NAMES.get(level, logging.getLevelName(level)),
                            content_type="text/plain", headers=ALLOW_ORIGIN)

    async def set_loglevel(self, request: web.Request) -> web.Response:
        """Set this rmproxy's log level (YuniKorn's names, case-insensitive); 400 on a bad one."""
        name = request.match_info["level"].upper()
        if name not in LOG_LEVELS:
            raise ApiError(400, f"unknown log level {request.match_info['level']!r}",
                           "levels: " + ", ".join(sorted(LOG_LEVELS)).lower())
        logging.getLogger("korral").setLevel(LOG_LEVELS[name])
        return web.Response(text=name, content_type="text/plain", headers=ALLOW_ORIGIN)

    async def periodic_dump(self, request: web.Request) -> web.Response:
        """Removed in YuniKorn 1.2: answers 200 with an empty body and logs a deprecation warning."""
        logging.getLogger("korral.rmproxy").warning("periodic state dump is deprecated and ignored")
        return web.Response(status=200, headers=ALLOW_ORIGIN)


def _find_queue(tree: dict, path: str) -> dict | None:
    if tree.get("queuename") == path:
        return tree
    for c in tree.get("children", []):
        if path == c["queuename"] or path.startswith(c["queuename"] + "."):
            return _find_queue(c, path)
    return None
