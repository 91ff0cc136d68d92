"""Run a plan against a scheduler: register, play the plan in real time, summarise.

``simulate`` is the library entry point (``korral sim`` and tests call it); it
returns the summary dict and never exits the process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import grpc

from rich.console import Console
from rich.live import Live

from common import si_pb2
from rmproxy.client import SchedulerAPI, channel_options
from rmproxy.sim.checks import Validator, config_limits
from rmproxy.sim.cluster import SimCluster
from rmproxy.sim.report import LiveView
from rmproxy.sim.stats import Stats
from rmproxy.sim.workload import Plan, default_config_text

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


@dataclass(slots=True)
class SimResult:
    summary: dict  # see Stats.summary
    timeline: list[dict]  # one row per second
    reconnects: int  # times the client re-registered and replayed


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

    Raises ``rmproxy.client.SchedulerError`` if registration fails and
    ``ConfigError`` if the workload's config is invalid.
    """
    console = console or Console()
    config = plan.workload.config or default_config_text(plan.workload)
    queue_max, ugm = config_limits(config)
    validator = Validator({n.node_id: dict(n.resources) for n in plan.nodes}, queue_max, ugm=ugm)
    stats = Stats(_capacity(plan))
    channel = None
    if options.credentials is not None:
        channel = grpc.secure_channel(options.si_address, options.credentials, options=channel_options())
    api = SchedulerAPI(options.si_address, channel=channel)
    cluster = SimCluster(plan, api, clock, validator, stats)
    duration = options.duration if options.duration is not None else plan.workload.duration
    try:
        api.register_resource_manager(
            si_pb2.RegisterResourceManagerRequest(
                rmID=options.rm_id, policyGroup="queues", config=config,
                buildInfo={"buildVersion": "korral-sim", "isPluginVersion": "false"}),
            cluster)
        stats.begin(clock())
        cluster.start()
        view = LiveView(plan.task_count, console) if options.progress else None
        deadline = clock() + duration
        with Live(console=console, refresh_per_second=4, transient=False) if view else _Null() as live:
            next_draw = 0.0
            while True:
                now = clock()
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
        return SimResult(stats.summary(cluster, clock()), stats.timeline, api.reconnects)
    finally:
        api.close()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
