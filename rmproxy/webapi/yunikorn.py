"""Handlers of YuniKorn's ``/ws/v1`` read paths: v1.2's (/work/shared/REST_API.md) and those
added up to 1.9 (``applications/{state}``, ``placementrules``, ``scheduler/node-utilizations``;
docs/yunikorn-compat.md). Events are ``events``, the dump ``state``.

Each handler asks the owning workers through ``ClusterReader`` and reshapes nothing the
worker already answers in YuniKorn DAO shape; cluster-wide answers are concatenated per
partition. Long lists (applications, nodes) are streamed page by page.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from aiohttp import web

from common.messages import (AppQuery, AppsQuery, NodeQuery, NodesQuery, NodeUtilQuery, PagedQuery, PartitionQuery,
                             PlacementRulesQuery, QueuesQuery, UsageQuery)
from rmproxy.webapi._http import (ALLOW_ORIGIN, ApiError, check_queue_path, int_query, json_response,
                                         stream_json_list)
from rmproxy.webapi.cluster import PAGE, ClusterReader, Target
from rmproxy.webapi.seams import Registrations

__all__ = ["YuniKornApi", "cluster_info"]

LOG_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
              "WARNING": logging.WARNING, "ERROR": logging.ERROR, "DPANIC": logging.CRITICAL,
              "PANIC": logging.CRITICAL, "FATAL": logging.CRITICAL}
_LEVEL_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN",
                logging.ERROR: "ERROR", logging.CRITICAL: "FATAL"}
# YuniKorn's applications/{state} and ?status= (Korral's apps may also be Starting, the seed's state)
APP_CATEGORIES = ("active", "rejected", "completed")
ACTIVE_STATUSES = ("new", "accepted", "starting", "running", "completing", "failing", "resuming")
_CLUSTER_COUNTS = ("totalApplications", "totalContainers", "totalNodes", "runningApplications",
                   "runningContainers", "activeNodes", "failedApplications", "pendingApplications",
                   "completedApplications", "failedContainers", "pendingContainers", "failedNodes")


def cluster_info(t: Target, part: dict, build_info: dict | None, start_ns: int) -> dict:
    """YuniKorn's ClusterInfo for one partition: counts as strings, as YuniKorn sends them.
    ``rmBuildInformation`` is the partition's RM's ``buildInfo`` with its ``rmId``, and always a
    ``buildVersion`` and a ``buildDate`` (empty when the RM sent none, as from a shim built
    without them): YuniKorn's web UI shows the three."""
    build = {"buildVersion": "", "buildDate": "", **(build_info or {}), "rmId": t.rm_id}
    info = {"startTime": start_ns, "rmBuildInformation": [build],
            "partition": t.partition, "clusterName": t.rm_id}
    for k in _CLUSTER_COUNTS:
        info[k] = str(part.get(k, 0))
    return info


class YuniKornApi:
    def __init__(self, store: Registrations, reader: ClusterReader, started_ns: int) -> None:
        self.store = store
        self.reader = reader
        self.started_ns = started_ns  # this rmproxy's: the start time of a cluster without registration

    def _target(self, request: web.Request) -> Target:
        return self.reader.resolve(request.match_info["partition"], request.query.get("rmID"))

    # -- cluster and partitions ------------------------------------------------------

    async def clusters(self, request: web.Request) -> web.Response:
        answers = await self.reader.query_all(PartitionQuery())
        out = []
        for t, part in answers:
            reg = await self._registration(t.rm_id)
            out.append(cluster_info(t, part, reg.build_info if reg else None,
                                    reg.registered_at_ns if reg else self.started_ns))
        return json_response(out)

    async def _registration(self, rm_id: str):
        try:
            return await self.store.load(rm_id)
        except Exception:  # Redis down: the answer goes on without build information
            return None

    async def partitions(self, request: web.Request) -> web.Response:
        answers = await self.reader.query_all(PartitionQuery())
        out = []
        for t, part in answers:
            out.append({k: part[k] for k in ("clusterId", "name", "state", "lastStateTransitionTime",
                                             "capacity", "nodeSortingPolicy", "preemptionEnabled",
                                             "quotaPreemptionEnabled", "applications")}
                       | {"rmID": t.rm_id, "totalNodes": part["totalNodes"],
                          "totalContainers": part["totalContainers"]})
        return json_response(out)

    # -- queues --------------------------------------------------------------------------

    async def queues(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(self._target(request), QueuesQuery()))

    async def queue(self, request: web.Request) -> web.Response:
        """One queue; its ``children`` only with ``?subtree`` (YuniKorn 1.6), ``childNames`` always."""
        target = self._target(request)
        path = check_queue_path(request.match_info["queue"])
        tree = await self.reader.query(target, QueuesQuery())
        found = _find_queue(tree, path)
        if found is None:
            raise ApiError(404, "Queue not found", f"queue {path!r} not found in partition {target.full_name}")
        if "subtree" not in request.query:
            found = {k: v for k, v in found.items() if k != "children"}
        return json_response(found | {"partition": ""})

    async def placement_rules(self, request: web.Request) -> web.Response:
        """The partition's placement rules in effect (YuniKorn 1.6's RuleDAO list)."""
        return json_response(await self.reader.query(self._target(request), PlacementRulesQuery()))

    # -- applications --------------------------------------------------------------------

    async def _stream(self, request: web.Request, target: Target, query: PagedQuery) -> web.StreamResponse:
        """A list answer streamed page by page; ``?offset=&limit=`` (Korral's) select a slice.
        The first page is read before answering, so errors keep their status code."""
        offset = int_query(request, "offset", 0) or 0
        limit = int_query(request, "limit", None)
        want = PAGE if limit is None else min(PAGE, limit)
        first = await self.reader.query(target, replace(query, offset=offset, limit=want))
        return await stream_json_list(request, self.reader.pages(target, query, first, offset, limit))

    async def queue_apps(self, request: web.Request) -> web.StreamResponse:
        queue = check_queue_path(request.match_info["queue"])  # checked before the partition, as YuniKorn
        return await self._stream(request, self._target(request), AppsQuery(queue=queue))

    async def queue_apps_by_state(self, request: web.Request) -> web.StreamResponse:
        """A queue's applications in a state: only ``active`` (a queue holds no finished ones)."""
        target = self._target(request)
        queue = check_queue_path(request.match_info["queue"])
        return await self._stream(request, target, _app_filter(request, ("active",), AppsQuery(queue=queue)))

    async def partition_apps(self, request: web.Request) -> web.StreamResponse:
        """Every application of the partition, active and finished (``?state=`` filters)."""
        target = self._target(request)
        states = tuple(s for s in request.query.getall("state", []) if s)
        return await self._stream(request, target, AppsQuery(states=states))

    async def partition_apps_by_state(self, request: web.Request) -> web.StreamResponse:
        """YuniKorn 1.5's ``applications/{active|rejected|completed}``; ``?status=`` filters active."""
        target = self._target(request)
        return await self._stream(request, target, _app_filter(request, APP_CATEGORIES, AppsQuery()))

    async def queue_app(self, request: web.Request) -> web.Response:
        target = self._target(request)
        queue = check_queue_path(request.match_info["queue"])
        return json_response(await self.reader.query(
            target, AppQuery(app=request.match_info["app"], queue=queue)))

    async def app(self, request: web.Request) -> web.Response:
        target = self._target(request)
        return json_response(await self.reader.query(target, AppQuery(app=request.match_info["app"])))

    # -- nodes ---------------------------------------------------------------------------

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, self._target(request), NodesQuery())

    async def node(self, request: web.Request) -> web.Response:
        target = self._target(request)
        return json_response(await self.reader.query(target, NodeQuery(node=request.match_info["node"])))

    # -- usage ---------------------------------------------------------------------------

    async def users(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(self._target(request), UsageQuery(kind="users")))

    async def user(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(
            self._target(request), UsageQuery(kind="user", name=request.match_info["user"])))

    async def groups(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(self._target(request), UsageQuery(kind="groups")))

    async def group(self, request: web.Request) -> web.Response:
        return json_response(await self.reader.query(
            self._target(request), UsageQuery(kind="group", name=request.match_info["group"])))

    # -- nodes' utilisation -----------------------------------------------------------

    async def node_utilizations(self, request: web.Request) -> web.Response:
        """YuniKorn 1.5's node utilisation buckets, one entry per partition; each worker buckets
        its own nodes, so only node names cross the wire. ``[]`` (not ``null``) without partitions
        and ``utilizations: []`` without nodes: YuniKorn's web UI fails on either absence."""
        answers = await self.reader.query_all(NodeUtilQuery())
        return json_response([{"clusterId": t.rm_id, "partition": t.partition, "utilizations": u}
                              for t, u in answers])

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


def _app_filter(request: web.Request, allowed: tuple[str, ...], query: AppsQuery) -> AppsQuery:
    """``query`` with the ``{state}`` of the path as ``category`` and, for active applications, the
    ``?status=`` as a state filter; 400 with YuniKorn's messages for any other value."""
    state = request.match_info["state"]
    category = state.lower()
    if category not in allowed:
        raise ApiError(400, f"Only following application states are allowed: {', '.join(allowed)}",
                       f"application state {state!r} is not one of {', '.join(allowed)}")
    query = replace(query, category=category)
    status = request.query.get("status", "")
    if status and category == "active":
        if status.lower() not in ACTIVE_STATUSES:
            raise ApiError(400, f"Only following active statuses are allowed: {','.join(ACTIVE_STATUSES)}",
                           f"status {status!r} is not one of {','.join(ACTIVE_STATUSES)}")
        query = replace(query, states=(status.lower(),))
    return query


def _find_queue(tree: dict, path: str) -> dict | None:
    if tree.get("queuename") == path:
        return tree
    for c in tree.get("children", []):
        if path == c["queuename"] or path.startswith(c["queuename"] + "."):
            return _find_queue(c, path)
    return None
