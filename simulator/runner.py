"""Run a plan against a scheduler: register, play the plan in real time, summarise.

``simulate`` is the library entry point (``korral sim`` and tests call it); it
returns the summary dict and never exits the process.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import grpc

from rich.console import Console
from rich.live import Live

from si_client import SchedulerAPI, channel_options
from simulator.checks import Validator, config_limits
from simulator.cluster import SimCluster
from simulator.report import LiveView
from simulator.served import ServedConfig
from simulator.stats import Stats
from simulator.wire import wire_for
from simulator.workload import Plan, default_config_text

__all__ = ["SimOptions", "SimResult", "simulate"]

log = logging.getLogger(__name__)

TICK = 0.02  # seconds between ticks: task ends are released at most this late


@dataclass(slots=True)
class SimOptions:
    si_address: str = "127.0.0.1:9090"
    rm_id: str = "korral-sim"
    duration: float | None = None  # None: the workload's
    progress: bool = True
    drain: float = 5.0  # after the last task is over, wait this long for stragglers
    credentials: Any = None  # grpc.ChannelCredentials for rmproxy's TLS; None: plaintext
    rest_address: str = ""  # when set, the cluster view is read at the end, before the RM unregisters
    si_revision: str = "seed"  # the SI revision the sim's RM speaks: seed | v1.8


@dataclass(slots=True)
class SimResult:
    summary: dict  # see Stats.summary
    timeline: list[dict]  # one row per second
    reconnects: int  # times the client re-registered and replayed
    final_view: dict | None = None  # see ViewSampler.result


def cluster_view(rest_address: str, rm_id: str) -> dict:
    """The RM's partitions as the REST API shows them now:
    ``{"partitions": [{"name", "capacity", "applications", "queues"}]}`` or ``{"error"}``."""
    from common.restclient import RestClient, RestError, path_part

    client = RestClient(rest_address, timeout=10)
    try:
        parts = [p for p in client.get("/ws/v1/partitions") if p.get("rmID") == rm_id]
        return {"partitions": [
            {"name": p["name"], "capacity": p.get("capacity") or {}, "applications": p.get("applications") or {},
             "queues": client.get(f"/ws/v1/partition/{path_part(p['name'])}/queues", rmID=rm_id)}
            for p in parts]}
    except RestError as exc:
        return {"error": str(exc)}


def busy_share(part: dict) -> float:
    """How busy a partition view is: the largest share of its capacity its queues use, over
    resource types. The root queue's usage, not the partition's: the queue tree is one answer of
    the partition's worker, so its usage and its child queues are of the same moment (the
    partition list is read before it, and a short task may end in between)."""
    total = part["capacity"].get("capacity") or {}
    used = (part.get("queues") or {}).get("allocatedResource") or {}
    return max((v / total[k] for k, v in used.items() if total.get(k)), default=0.0)


class ViewSampler:
    """Reads the cluster view every ``every`` seconds (a few small REST reads) while the sim runs,
    keeping each partition's busiest view, so that what ran can be shown afterwards: the run ends
    with every task over, when (dynamic) queues are empty or gone. Each partition has its own
    busiest moment: one that finished early is not shown as it was while another still worked."""

    def __init__(self, rest_address: str, rm_id: str, clock: Callable[[], float], every: float = 0.5) -> None:
        self.rest_address, self.rm_id, self.clock, self.every = rest_address, rm_id, clock, every
        self.started = clock()
        self.busiest: dict[str, tuple[float, dict]] = {}  # partition -> (seconds into the run, its view)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-view-sampler", daemon=True)

    def start(self) -> "ViewSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> dict:
        view = cluster_view(self.rest_address, self.rm_id)
        at = self.clock() - self.started
        for part in view.get("partitions", []):
            share, best = busy_share(part), self.busiest.get(part["name"])
            if share > 0 and (best is None or share >= busy_share(best[1])):
                self.busiest[part["name"]] = (at, part)
        return view

    def result(self) -> dict:
        """``{"busiest": {partition: (seconds into the run, its busiest view)}, "end": the view at
        the end, read while the RM is still registered}``."""
        self._stop.set()
        self._thread.join(15)
        end = self.sample()
        return {"busiest": dict(self.busiest), "end": end}


def _capacity(plan: Plan) -> dict[str, dict[str, int]]:
    total: dict[str, dict[str, int]] = {}
    for n in plan.nodes:
        part = total.setdefault(n.partition, {})
        for k, v in n.resources.items():
            part[k] = part.get(k, 0) + v
    return total


def simulate(plan: Plan, options: SimOptions, console: Console | None = None,
             clock: Callable[[], float] = time.monotonic) -> SimResult:
    """Play ``plan`` against the scheduler at ``options.si_address``.

    Raises ``si_client.SchedulerError`` if registration fails and
    ``ConfigError`` if the workload's config is invalid.
    """
    console = console or Console()
    config = plan.workload.config or default_config_text(plan.workload)
    queue_max, ugm = config_limits(config)
    # a node's room for this scheduler: its capacity less its foreign allocation
    validator = Validator({n.node_id: {k: v - (n.foreign or {}).get(k, 0) for k, v in n.resources.items()}
                           for n in plan.nodes}, queue_max, ugm=ugm)
    stats = Stats(_capacity(plan))
    channel = None
    if options.credentials is not None:
        channel = grpc.secure_channel(options.si_address, options.credentials, options=channel_options())
    api = SchedulerAPI(options.si_address, channel=channel, si_revision=options.si_revision)
    wire = wire_for(options.si_revision)
    cluster = SimCluster(plan, api, clock, validator, stats, wire)
    duration = options.duration if options.duration is not None else plan.workload.duration
    try:
        api.register_resource_manager(
            wire.pb.RegisterResourceManagerRequest(
                rmID=options.rm_id, policyGroup="queues", config=config,
                buildInfo={"buildVersion": "korral-sim", "isPluginVersion": "false"}),
            cluster)
        stats.begin(clock())
        served = ServedConfig(options.rest_address, options.rm_id, config, cluster.lock, clock, clock())
        cluster.served = served.start(cluster.limits_changed)
        sampler = ViewSampler(options.rest_address, options.rm_id, clock).start() if options.rest_address else None
        cluster.start()
        view = LiveView(plan.task_count, console) if options.progress else None
        deadline = clock() + duration
        with Live(console=console, refresh_per_second=4, transient=False) if view else _Null() as live:
            next_draw = 0.0
            updates = list(plan.workload.config_updates)
            while True:
                now = clock()
                while updates and now - cluster.t0 >= updates[0][0]:
                    _, text = updates.pop(0)  # a new max holds for the allocations that follow it
                    api.update_configuration(wire.pb.UpdateConfigurationRequest(
                        rmID=options.rm_id, policyGroup="queues", config=text))
                    served.workload_update(text, cluster.limits_changed)
                cluster.tick()
                if view is not None and now >= next_draw:
                    live.update(view.renderable(cluster, stats, now))
                    next_draw = now + 0.25
                if cluster.finished or now >= deadline:
                    break
                time.sleep(TICK)
            if view is not None:
                live.update(view.renderable(cluster, stats, clock()))
        api.flush(options.drain)
        served.stop()
        views = sampler.result() if sampler is not None else None
        summary = stats.summary(cluster, clock()) | {"config_changes": served.changes}
        return SimResult(summary, stats.timeline, api.reconnects, views)
    finally:
        if cluster.served is not None:
            cluster.served.stop()
        api.close()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
