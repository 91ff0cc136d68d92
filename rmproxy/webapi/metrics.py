"""``/ws/v1/metrics``: Prometheus text with YuniKorn's metric names, plus Korral's own.

Workers cannot serve HTTP, so each scrape asks every partition's worker for its ``metrics``
answer (plain data) and renders it through a ``prometheus_client`` Collector into a registry
of this module's own (never the process-global one). No double counting across processes:

- partition series come from the one worker owning the partition (labels ``rm``, ``partition``),
  so a scrape of any rmproxy holds each partition exactly once;
- rmproxy series (``korral_rmproxy_*``) describe only the answering rmproxy (label ``proxy``);
- broker series (``korral_broker_*``) are the broker's own counters as relayed in its STATUS.
Scraping several rmproxies therefore repeats partition and broker series per ``instance``;
aggregate them with ``max by (rm, partition)``, not ``sum``.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from common.messages import MetricsQuery
from rmproxy.webapi._http import CORS_HEADERS
from rmproxy.webapi.cluster import ClusterReader

__all__ = ["MetricsApi", "render_metrics", "ClusterCollector", "queue_metric_prefix", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NOT_METRIC = re.compile(r"[^a-zA-Z0-9_:]")
_USAGE_RANGES = ("[0,10%]", "(10%,20%]", "(20%,30%]", "(30%,40%]", "(40%,50%]", "(50%,60%]",
                 "(60%,70%]", "(70%,80%]", "(80%,90%]", "(90%,100%]")
_QUEUE_RESOURCE_STATES = ("guaranteed", "max", "allocated", "pending", "preempting")
_APP_TOTAL_STATES = {"running": ("Starting", "Running", "Completing"), "completed": ("Completed",),
                     "failed": ("Failed", "Rejected")}


class MetricsApi:
    """``proxy_view``: this rmproxy's own numbers (``KorralApi.proxy_view``), read at each scrape."""

    def __init__(self, reader: ClusterReader, proxy_view: Callable[[], dict]) -> None:
        self.reader = reader
        self.proxy_view = proxy_view

    async def metrics(self, request: web.Request) -> web.Response:
        """One scrape: every partition's worker asked at once, rendered with this rmproxy's numbers."""
        answers = await self.reader.query_all(MetricsQuery())
        body = render_metrics(answers, self.proxy_view())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE, **CORS_HEADERS})


def queue_metric_prefix(path: str) -> str:
    """YuniKorn's per-queue metric prefix: ``yunikorn_<path with non [A-Za-z0-9_:] as _>``."""
    return "yunikorn_" + _NOT_METRIC.sub("_", path)


class ClusterCollector:
    """A one-shot collector over data already gathered (Collector protocol: ``collect()``)."""

    def __init__(self, partitions: list[tuple[Any, dict]], proxy_view: dict) -> None:
        self.partitions = partitions  # [(Target, metrics answer)]
        self.proxy = proxy_view

    def collect(self) -> Iterable:
        yield from self._scheduler()
        yield from self._queues()
        yield from self._korral()

    # -- YuniKorn scheduler metrics -------------------------------------------------------

    def _scheduler(self) -> Iterable:
        pl = ["rm", "partition"]
        attempts = CounterMetricFamily("yunikorn_scheduler_container_allocation_attempt",
                                       "Allocation attempts by result", labels=pl + ["state"])
        submissions = CounterMetricFamily("yunikorn_scheduler_application_submission",
                                          "Applications submitted by result", labels=pl + ["result"])
        apps = GaugeMetricFamily("yunikorn_scheduler_application_total",
                                 "Applications by state (running, completed, failed)", labels=pl + ["state"])
        nodes = GaugeMetricFamily("yunikorn_scheduler_node", "Nodes by state", labels=pl + ["state"])
        latency = HistogramMetricFamily("yunikorn_scheduler_scheduling_latency_milliseconds",
                                        "Latency of the main scheduling routine (one worker step), ms",
                                        labels=pl)
        sorting = HistogramMetricFamily(
            "yunikorn_scheduler_node_sorting_latency_milliseconds",
            "Time per scheduling cycle spent ordering queues (level=queue), ordering apps (level=app) "
            "and selecting nodes from the incrementally kept node order (level=node), ms",
            labels=pl + ["level"])
        usage: dict[str, GaugeMetricFamily] = {}
        for t, m in self.partitions:
            lv = [t.rm_id, t.partition]
            obs = m.get("observed")
            if obs is not None:
                for state, n in obs["allocationAttempts"].items():
                    attempts.add_metric(lv + [state], n)
                for result, n in obs["appSubmissions"].items():
                    submissions.add_metric(lv + [result], n)
                latency.add_metric(lv, _buckets(obs), obs["stepSecondsSum"] * 1000)
                for level, counts in (obs.get("stageBuckets") or {}).items():
                    sorting.add_metric(lv + [level], _buckets(obs, counts=counts),
                                       obs["stageSecondsSum"][level] * 1000)
            for label, states in _APP_TOTAL_STATES.items():
                apps.add_metric(lv + [label], sum(m["apps"].get(s, 0) for s in states))
            for state in ("active", "draining", "unhealthy"):
                nodes.add_metric(lv + [state], m["nodes"].get(state, 0))
            for res, counts in m["nodeUsage"].items():
                name = "yunikorn_scheduler_" + _NOT_METRIC.sub("_", res) + "_node_usage_total"
                fam = usage.get(name)
                if fam is None:
                    fam = usage[name] = GaugeMetricFamily(name, f"Nodes by {res} utilisation range",
                                                          labels=pl + ["range"])
                for rng, n in zip(_USAGE_RANGES, counts):
                    fam.add_metric(lv + [rng], n)
        yield from (attempts, submissions, apps, nodes, latency, sorting)
        yield from usage.values()

    def _queues(self) -> Iterable:
        """YuniKorn's queue metrics: ``yunikorn_queue_app``, ``yunikorn_queue_resource`` (1.5) and
        the counter ``yunikorn_queue_app_total`` for every partition; the per-queue-name form
        ``yunikorn_<queue>_queue_app|resource`` (removed in 1.8) only for the partitions of RMs
        whose compatibility is below 1.8, so one scrape serves RMs of both kinds."""
        ql = ["rm", "partition", "queue", "state"]
        apps = GaugeMetricFamily("yunikorn_queue_app", "Applications of a queue by state: new, accepted, "
                                 "running, resuming, failing, completing (held now) and completed, failed, "
                                 "rejected (ended there since the partition started)", labels=ql)
        ended = CounterMetricFamily("yunikorn_queue_app_total", "Applications that ended in a queue (completed, "
                                    "failed, rejected), its removal and re-creation included", labels=ql)
        resources = GaugeMetricFamily("yunikorn_queue_resource", "Resources of a queue by state: guaranteed, max, "
                                      "allocated, pending, preempting, maxRunningApps (resource apps)",
                                      labels=ql + ["resource"])
        per_name: dict[str, GaugeMetricFamily] = {}
        for t, m in self.partitions:
            lv = [t.rm_id, t.partition]
            for q in m["queues"]:
                path = q["path"]
                for state, n in q["appStates"].items():
                    apps.add_metric(lv + [path, state], n)
                for state in _QUEUE_RESOURCE_STATES:
                    for name, v in q[state].items():
                        resources.add_metric(lv + [path, state, name], v)
                resources.add_metric(lv + [path, "maxRunningApps", "apps"], q["maxRunningApps"])
                if m["perQueueMetricNames"]:
                    _per_queue_name(per_name, lv, q)
            for path, state, n in m["appsEnded"]:
                ended.add_metric(lv + [path, state], n)
        yield from (apps, ended, resources)
        yield from per_name.values()

    # -- Korral's own ---------------------------------------------------------------------

    def _korral(self) -> Iterable:
        pl = ["rm", "partition", "worker"]
        cycles = CounterMetricFamily("korral_partition_cycles", "Scheduling cycles run", labels=pl)
        cycle = HistogramMetricFamily("korral_partition_cycle_seconds",
                                      "Time of one worker step (timers + one cycle), seconds", labels=pl)
        pending = GaugeMetricFamily("korral_partition_pending_asks", "Pending allocation repeats", labels=pl)
        containers = GaugeMetricFamily("korral_partition_allocations", "Live allocations", labels=pl)
        epoch = GaugeMetricFamily("korral_partition_epoch", "Epoch of the partition's current owner", labels=pl)
        wire = CounterMetricFamily("korral_worker_stage_seconds",
                                   "Worker time from request bytes to response bytes, by stage: decode, apply, "
                                   "cycle, respond (SI response build), send", labels=pl + ["stage"])
        for t, m in self.partitions:
            lv = [t.rm_id, t.partition, t.worker or ""]
            cycles.add_metric(lv, m["cycles"])
            obs = m.get("observed")
            if obs is not None:
                cycle.add_metric(lv, _buckets(obs, seconds=True), obs["stepSecondsSum"])
                for stage, spent in (obs.get("wireSecondsSum") or {}).items():
                    wire.add_metric(lv + [stage], spent)
            pending.add_metric(lv, m["pendingAsks"])
            containers.add_metric(lv, m["containers"])
            epoch.add_metric(lv, t.epoch or 0)
        yield from (cycles, cycle, pending, containers, epoch, wire)
        v = self.proxy
        name = [v["name"]]
        yield _gauge("korral_rmproxy_broker_connected", "1 when this rmproxy hears the broker",
                     ["proxy"], [(name, 1 if v["brokerConnected"] else 0)])
        yield _counter("korral_rmproxy_dropped", "Envelopes this rmproxy dropped (stale epoch, bad)",
                       ["proxy"], [(name, v["dropped"])])
        yield _counter("korral_rmproxy_resync", "RM re-registrations this rmproxy requested",
                       ["proxy"], [(name, v["resyncs"])])
        yield _counter("korral_rmproxy_resync_duration_seconds",
                       "Seconds from a resync request to the RM's re-registration (sum)",
                       ["proxy"], [(name, v["resyncSeconds"])])
        yield _gauge("korral_rmproxy_pending_queries", "Queries waiting for a worker answer",
                     ["proxy"], [(name, v["pendingQueries"])])
        rms = GaugeMetricFamily("korral_rm_state", "RMs held by this rmproxy by connection state",
                                labels=["proxy", "rm", "state"])
        for rm_id, state in v["rms"].items():
            for s in ("Running", "Paused", "Stopped"):
                rms.add_metric([v["name"], rm_id, s], 1 if s == state else 0)
        yield rms
        c = v["cluster"]
        yield _counter("korral_broker_envelopes_routed", "Envelopes the broker routed",
                       [], [([], c.get("routed", 0))])
        yield _counter("korral_broker_bad_frames", "Frames the broker dropped as malformed",
                       [], [([], c.get("badFrames", 0))])
        yield _gauge("korral_broker_workers", "Workers known to the broker", [],
                     [([], len(c.get("workers", [])))])
        yield _gauge("korral_broker_rmproxies", "rmproxies known to the broker", [], [([], c.get("proxies", 0))])
        if "queueDepth" in c:  # relayed once the broker reports it
            yield _gauge("korral_broker_queue_depth", "Envelopes waiting in the broker", [],
                         [([], c["queueDepth"])])
        proxies = [(rp, rp["heartbeatAge"]) for rp in c.get("rmproxies", []) if rp.get("heartbeatAge") is not None]
        if proxies:
            yield _gauge("korral_rmproxy_heartbeat_age_seconds", "Seconds since the broker heard the rmproxy",
                         ["rmproxy"], [([rp.get("name", "")], a) for rp, a in proxies])
        ages = [(w, w["heartbeatAge"]) for w in c.get("workers", []) if w.get("heartbeatAge") is not None]
        if ages:
            yield _gauge("korral_worker_heartbeat_age_seconds", "Seconds since the worker's last heartbeat",
                         ["worker", "partition"], [([w["name"], w.get("partition") or ""], a) for w, a in ages])


def _per_queue_name(fams: dict[str, GaugeMetricFamily], lv: list[str], q: dict) -> None:
    """YuniKorn's metrics named after the queue (before 1.8): ``yunikorn_<path>_queue_app`` and
    ``..._queue_resource``, with a ``queue`` label that keeps root.a-b and root.a_b apart (both
    map to root_a_b)."""
    prefix = queue_metric_prefix(q["path"])
    app = fams.get(prefix + "_queue_app")
    if app is None:
        app = fams[prefix + "_queue_app"] = GaugeMetricFamily(
            prefix + "_queue_app", f"Applications of queue {q['path']} by state",
            labels=["rm", "partition", "queue", "state"])
        fams[prefix + "_queue_resource"] = GaugeMetricFamily(
            prefix + "_queue_resource", f"Resources of queue {q['path']} by state",
            labels=["rm", "partition", "queue", "state", "resource"])
    ql = lv + [q["path"]]
    for state in ("accepted", "running", "rejected", "completed", "failed"):
        app.add_metric(ql + [state], q["apps"].get(state, 0))
    res = fams[prefix + "_queue_resource"]
    for state in ("guaranteed", "max", "allocated", "pending"):
        for name, v in q[state].items():
            res.add_metric(ql + [state, name], v)


def _gauge(name: str, doc: str, labels: list[str], rows) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=labels)
    for lv, v in rows:
        fam.add_metric(lv, v)
    return fam


def _counter(name: str, doc: str, labels: list[str], rows) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for lv, v in rows:
        fam.add_metric(lv, v)
    return fam


def _buckets(obs: dict, seconds: bool = False, counts: list[int] | None = None) -> list[tuple[str, int]]:
    """Cumulative histogram buckets from the worker's per-bucket counts (bounds in ms);
    ``counts`` defaults to the step latency's."""
    counts = obs["stepBuckets"] if counts is None else counts
    out, total = [], 0
    for bound, n in zip(obs["stepBucketsMs"], counts):
        total += n
        out.append((repr(bound / 1000 if seconds else float(bound)), total))
    total += counts[-1]
    out.append(("+Inf", total))
    return out


def render_metrics(partitions: list[tuple[Any, dict]], proxy_view: dict) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(partitions, proxy_view))
    return generate_latest(registry)
