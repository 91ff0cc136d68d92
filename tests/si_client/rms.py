"""What the client tests add to the one client-based RM (``benchmarks.cluster_rm.ClusterRM``).

``Recorder`` is a callback with no state and no replay hook: it records every callback and
counts callbacks of one stream that overlap (the client's ordering contract). The tests that
need an RM with state use ``ClusterRM`` (``rm_with_node_and_app`` starts one).
"""

from __future__ import annotations

import json
import random
import threading
import time

from common import si_pb2
from benchmarks.cluster_rm import ClusterRM
from si_client import Backoff, ResourceManagerCallback, SchedulerAPI, StateDumpPlugin
from tests.conftest import wait_until
from tests.si_builders import app, node

__all__ = ["Recorder", "fast_api", "register", "is_attach", "rm_with_node_and_app"]


class Recorder(ResourceManagerCallback, StateDumpPlugin):
    """Records every callback and counts any two of one stream that overlap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.allocations: list[si_pb2.Allocation] = []
        self.accepted_apps: list[str] = []
        self.accepted_nodes: list[str] = []
        self.events: list[si_pb2.EventRecord] = []
        self.states: list = []
        self.lost: list[str] = []
        self.active = {"allocation": 0, "application": 0, "node": 0}
        self.overlaps = 0

    def _enter(self, kind):
        with self.lock:
            self.active[kind] += 1
            if self.active[kind] > 1:
                self.overlaps += 1

    def _leave(self, kind):
        with self.lock:
            self.active[kind] -= 1

    def update_allocation(self, response):
        self._enter("allocation")
        time.sleep(0.0005)  # widen the window in which an overlap would show
        with self.lock:
            self.allocations.extend(response.new)
        self._leave("allocation")

    def update_application(self, response):
        self._enter("application")
        with self.lock:
            self.accepted_apps.extend(a.applicationID for a in response.accepted)
        self._leave("application")

    def update_node(self, response):
        self._enter("node")
        with self.lock:
            self.accepted_nodes.extend(n.nodeID for n in response.accepted)
        self._leave("node")

    def send_event(self, events):
        self.events.extend(events)

    def update_container_scheduling_state(self, request):
        self.states.append(request)

    def connection_lost(self, reason):
        self.lost.append(reason)

    def get_state_dump(self):
        return json.dumps({"nodes": len(self.accepted_nodes)})


def is_attach(request):
    return [f.name for f, _ in request.ListFields()] == ["rmID"]


def fast_api(address, **kw):
    """A ``SchedulerAPI`` that retries within tenths of a second (seeded backoff)."""
    return SchedulerAPI(address, backoff=Backoff(base=0.02, cap=0.2, rng=random.Random(7)), **kw)


def register(api, callback, rm_id="rm-test", **kw):
    return api.register_resource_manager(
        si_pb2.RegisterResourceManagerRequest(rmID=rm_id, policyGroup="queues"), callback, **kw)


def rm_with_node_and_app(api: SchedulerAPI, rm_id: str = "rm-test") -> ClusterRM:
    """A ``ClusterRM`` registered through ``api`` whose node n1 and application app-1 were accepted."""
    rm = ClusterRM(rm_id)
    rm.register(api)
    rm.report_nodes(node("n1"))
    rm.report_apps(app("app-1"))
    wait_until(lambda: rm.accepted_apps and rm.accepted_nodes, 10, "n1 and app-1 accepted")
    return rm
