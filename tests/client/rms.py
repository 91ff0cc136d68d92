"""Test RMs and builders for client tests (fake scheduler and real stack)."""

from __future__ import annotations

import random
import threading
import time

from common import si_pb2
from common.si_resource import fill_si_resource
from rmproxy.client import (
    Backoff,
    RecoverableState,
    RecoverySnapshot,
    ResourceManagerCallback,
    SchedulerAPI,
    StateDumpPlugin,
)


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def res(**values):
    return fill_si_resource(si_pb2.Resource(), values)


def node(node_id, vcore=4000, memory=4096, existing=()):
    return si_pb2.NodeInfo(nodeID=node_id, action=si_pb2.NodeInfo.CREATE,
                           schedulableResource=res(vcore=vcore, memory=memory), existingAllocations=existing)


def app(app_id):
    return si_pb2.AddApplicationRequest(applicationID=app_id, queueName="root.a", partitionName="default",
                                        ugi=si_pb2.UserGroupInformation(user="alice"))


def ask(key, app_id="app-1", vcore=1000, memory=1024):
    return si_pb2.AllocationAsk(allocationKey=key, applicationID=app_id, partitionName="default",
                                resourceAsk=res(vcore=vcore, memory=memory), maxAllocations=1)


class Recorder(ResourceManagerCallback):
    """Records every callback and fails the test if two of one stream ever overlap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.allocations: list[si_pb2.Allocation] = []
        self.accepted_apps: list[str] = []
        self.accepted_nodes: list[str] = []
        self.events: list[si_pb2.EventRecord] = []
        self.states: list = []
        self.lost: list[str] = []
        self.restored = 0
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

    def connection_restored(self):
        self.restored += 1


class StatefulRM(Recorder, RecoverableState, StateDumpPlugin):
    """A minimal RM that keeps its own truth: apps, nodes, running allocations, pending asks."""

    def __init__(self):
        super().__init__()
        self.state_lock = threading.RLock()
        self.apps: dict[str, si_pb2.AddApplicationRequest] = {}
        self.nodes: dict[str, si_pb2.NodeInfo] = {}
        self.pending: dict[str, si_pb2.AllocationAsk] = {}
        self.running: dict[str, si_pb2.Allocation] = {}

    def update_allocation(self, response):
        super().update_allocation(response)
        with self.state_lock:
            for a in response.new:
                self.pending.pop(a.allocationKey, None)
                self.running[a.allocationKey] = a

    def recoverable_state(self):
        with self.state_lock:
            nodes = []
            for node_id, info in self.nodes.items():
                copy = si_pb2.NodeInfo()
                copy.CopyFrom(info)
                copy.existingAllocations.extend(
                    a for a in self.running.values() if a.nodeID == node_id)
                nodes.append(copy)
            return RecoverySnapshot(applications=list(self.apps.values()), nodes=nodes,
                                    asks=list(self.pending.values()))

    def get_state_dump(self):
        return '{"nodes": %d}' % len(self.nodes)

    # RM-side helpers: change state first, then send (the hook's contract)
    def add_app(self, api, a):
        with self.state_lock:
            self.apps[a.applicationID] = a
            api.update_application(si_pb2.ApplicationRequest(new=[a]))

    def add_node(self, api, n):
        with self.state_lock:
            self.nodes[n.nodeID] = n
            api.update_node(si_pb2.NodeRequest(nodes=[n]))

    def add_ask(self, api, k):
        with self.state_lock:
            self.pending[k.allocationKey] = k
            api.update_allocation(si_pb2.AllocationRequest(asks=[k]))


def is_attach(request):
    return [f.name for f, _ in request.ListFields()] == ["rmID"]


def fast_api(address, **kw):
    return SchedulerAPI(address, backoff=Backoff(base=0.02, cap=0.2, rng=random.Random(7)), **kw)


def register(api, callback, rm_id="rm-test", **kw):
    return api.register_resource_manager(
        si_pb2.RegisterResourceManagerRequest(rmID=rm_id, policyGroup="queues"), callback, **kw)
