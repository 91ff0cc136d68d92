"""A small resource manager with real state, on ``si_client``: for benchmarks and tests.

It keeps what a shim keeps — nodes, applications, pending asks, running
allocations — answers the client's replay hook and state dump from that state,
and records every violation of the scheduler's contract it sees (an allocation
for an unknown ask, an allocation key allocated twice, a duplicate UUID, a
rejected node, application or ask). ``scheduler_view`` reads the partition back
through the REST API, so a test can assert that the scheduler holds exactly
what the RM holds. ``korral bench recovery`` drives it, and it is the
one client-based RM of the tests.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from common import si_pb2
from common.constants import APP_TAG_NAMESPACE, NODE_PARTITION
from common.si_resource import fill_si_resource
from si_client import (
    RecoverableState,
    RecoverySnapshot,
    ResourceManagerCallback,
    SchedulerAPI,
    StateDumpPlugin,
)

__all__ = ["ClusterRM", "resource", "scheduler_view"]


def resource(**quantities: int) -> si_pb2.Resource:
    return fill_si_resource(si_pb2.Resource(), quantities)


@dataclass
class ClusterRM(ResourceManagerCallback, RecoverableState, StateDumpPlugin):
    rm_id: str
    node_memory: int = 10_000
    node_vcore: int = 10_000
    lock: threading.RLock = field(default_factory=threading.RLock)
    changed: threading.Condition = field(init=False)
    nodes: dict[str, si_pb2.NodeInfo] = field(default_factory=dict)
    apps: dict[str, si_pb2.AddApplicationRequest] = field(default_factory=dict)
    pending: dict[str, si_pb2.AllocationAsk] = field(default_factory=dict)
    running: dict[str, si_pb2.Allocation] = field(default_factory=dict)  # allocationKey -> allocation
    uuids_seen: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    accepted_nodes: set[str] = field(default_factory=set)
    accepted_apps: set[str] = field(default_factory=set)
    lost: list[str] = field(default_factory=list)  # the reason of each lost connection
    restored: int = 0  # replays finished
    partition_replays: list[str] = field(default_factory=list)  # partitions rebuilt alone, in order
    api: SchedulerAPI | None = None
    # rebuild one lost partition alone (korral.v1 partitionResync) instead of re-registering whole
    partition_resync: bool = False

    @property
    def recoveries(self) -> int:
        return len(self.lost)

    # -- driving: state first, then the send, under the lock (RecoverableState's contract) --

    def register(self, api: SchedulerAPI, config: str = "") -> None:
        """Register through ``api`` (e.g. one with a faster backoff) and keep it."""
        self.api = api
        api.register_resource_manager(
            si_pb2.RegisterResourceManagerRequest(rmID=self.rm_id, policyGroup="queues", config=config), self)

    def connect(self, si_address: str, config: str = "") -> None:
        self.register(SchedulerAPI(si_address), config)

    def report_nodes(self, *nodes: si_pb2.NodeInfo) -> None:
        with self.lock:
            self.nodes.update((n.nodeID, n) for n in nodes)
            self.api.update_node(si_pb2.NodeRequest(rmID=self.rm_id, nodes=list(nodes)))

    def report_apps(self, *apps: si_pb2.AddApplicationRequest) -> None:
        with self.lock:
            self.apps.update((a.applicationID, a) for a in apps)
            self.api.update_application(si_pb2.ApplicationRequest(rmID=self.rm_id, new=list(apps)))

    def report_asks(self, *asks: si_pb2.AllocationAsk) -> None:
        self.send_asks(si_pb2.AllocationRequest(rmID=self.rm_id, asks=list(asks)))

    def add_nodes(self, count: int, partition: str = "default") -> None:
        """``count`` more nodes of ``node_memory`` and ``node_vcore`` in ``partition``."""
        with self.lock:
            self.report_nodes(*[
                si_pb2.NodeInfo(nodeID=f"{self.rm_id}-node-{i}", action=si_pb2.NodeInfo.CREATE,
                                attributes={NODE_PARTITION: partition},
                                schedulableResource=resource(memory=self.node_memory, vcore=self.node_vcore))
                for i in range(len(self.nodes), len(self.nodes) + count)])

    def add_app(self, app_id: str, queue: str = "root.default", partition: str = "default") -> None:
        self.report_apps(si_pb2.AddApplicationRequest(
            applicationID=app_id, queueName=queue, partitionName=partition,
            ugi=si_pb2.UserGroupInformation(user="tester"), tags={APP_TAG_NAMESPACE: "default"}))

    def submit(self, app_id: str, keys: list[str], memory: int = 10, vcore: int = 1) -> None:
        self.send_asks(self.asks_for(app_id, keys, memory, vcore))

    def asks_for(self, app_id: str, keys: list[str], memory: int = 10, vcore: int = 1) -> si_pb2.AllocationRequest:
        """The request for these asks, not sent yet (benchmarks build it before starting the clock)."""
        part = self.apps[app_id].partitionName
        return si_pb2.AllocationRequest(rmID=self.rm_id, asks=[
            si_pb2.AllocationAsk(allocationKey=k, applicationID=app_id, partitionName=part, maxAllocations=1,
                                 resourceAsk=resource(memory=memory, vcore=vcore)) for k in keys])

    def send_asks(self, request: si_pb2.AllocationRequest) -> None:
        with self.lock:
            for a in request.asks:
                self.pending[a.allocationKey] = a
            self.api.update_allocation(request)

    def release(self, count: int) -> int:
        """Finish up to count running tasks (STOPPED_BY_RM); returns how many."""
        with self.lock:
            done = list(self.running.values())[:count]
            for a in done:
                del self.running[a.allocationKey]
            if done:
                self.api.update_allocation(si_pb2.AllocationRequest(
                    rmID=self.rm_id, releases=si_pb2.AllocationReleasesRequest(allocationsToRelease=[
                        si_pb2.AllocationRelease(partitionName=a.partitionName, applicationID=a.applicationID,
                                                 UUID=a.UUID, allocationKey=a.allocationKey,
                                                 terminationType=si_pb2.STOPPED_BY_RM, message="task completed")
                        for a in done])))
            return len(done)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)  # notified by every callback

    def wait(self, predicate, timeout: float = 30.0) -> None:
        """Until predicate(self) holds, checked after each callback (and every 0.1 s)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while time.monotonic() < deadline:
                if predicate(self):
                    return
                self.changed.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            raise TimeoutError(f"condition not met in {timeout}s: pending={len(self.pending)} "
                               f"running={len(self.running)} violations={self.violations[:3]}")

    def close(self) -> None:
        if self.api is not None:
            self.api.close()

    # -- callbacks ----------------------------------------------------------------------

    def update_allocation(self, response: si_pb2.AllocationResponse) -> None:
        with self.changed:
            self.changed.notify_all()
            for a in response.new:
                if a.UUID in self.uuids_seen:
                    self.violations.append(f"duplicate UUID {a.UUID}")
                self.uuids_seen.add(a.UUID)
                if a.allocationKey in self.running:
                    self.violations.append(f"allocation key {a.allocationKey} allocated twice")
                    continue
                if self.pending.pop(a.allocationKey, None) is None:
                    self.violations.append(f"allocation for unknown ask {a.allocationKey}")
                    continue
                self.running[a.allocationKey] = a
            for r in response.released:
                if r.terminationType != si_pb2.STOPPED_BY_RM:  # made by the scheduler
                    self.running.pop(r.allocationKey, None)
            for r in response.rejected:
                self.pending.pop(r.allocationKey, None)
                self.violations.append(f"ask {r.allocationKey} rejected: {r.reason}")

    def update_node(self, response: si_pb2.NodeResponse) -> None:
        self._verdicts(self.accepted_nodes, (n.nodeID for n in response.accepted),
                       (f"node {n.nodeID} rejected: {n.reason}" for n in response.rejected))

    def update_application(self, response: si_pb2.ApplicationResponse) -> None:
        self._verdicts(self.accepted_apps, (a.applicationID for a in response.accepted),
                       (f"application {a.applicationID} rejected: {a.reason}" for a in response.rejected))

    def _verdicts(self, accepted: set[str], ids, rejections) -> None:
        with self.changed:
            self.changed.notify_all()
            accepted.update(ids)
            self.violations.extend(rejections)

    def connection_lost(self, reason: str) -> None:
        with self.changed:
            self.changed.notify_all()
            self.lost.append(reason)

    def connection_restored(self) -> None:
        with self.changed:
            self.changed.notify_all()
            self.restored += 1

    # -- replay hook ----------------------------------------------------------------------

    def recoverable_state(self) -> RecoverySnapshot:
        return self._snapshot(None)

    def recoverable_partition_state(self, partition: str) -> RecoverySnapshot:
        """One partition's state: its apps (``partitionName``), its nodes (the ``si/node-partition``
        attribute, "default" without one) with their running allocations, its pending asks."""
        with self.lock:
            self.partition_replays.append(partition)
            return self._snapshot(partition)

    def _snapshot(self, partition: str | None) -> RecoverySnapshot:
        with self.lock:
            by_node: dict[str, list[si_pb2.Allocation]] = {}
            for a in self.running.values():
                by_node.setdefault(a.nodeID, []).append(a)
            nodes = []
            for node_id, n in self.nodes.items():
                if partition is not None and n.attributes.get(NODE_PARTITION, "default") != partition:
                    continue
                copy = si_pb2.NodeInfo()
                copy.CopyFrom(n)
                copy.existingAllocations.extend(by_node.get(node_id, []))
                nodes.append(copy)
            return RecoverySnapshot(
                applications=[a for a in self.apps.values() if partition in (None, a.partitionName)], nodes=nodes,
                asks=[a for a in self.pending.values() if partition in (None, a.partitionName)])

    def get_state_dump(self) -> str:
        with self.lock:
            return json.dumps({"nodes": len(self.nodes), "applications": len(self.apps),
                               "pending": len(self.pending), "running": len(self.running)})

    # -- checks ----------------------------------------------------------------------------

    def rm_view(self) -> dict[str, tuple[str, str]]:
        with self.lock:
            return {k: (a.UUID, a.nodeID) for k, a in self.running.items()}


def scheduler_view(rest_address: str, partition: str = "default") -> dict[str, tuple[str, str]]:
    """allocationKey -> (uuid, nodeID) as the scheduler holds them, from /ws/v1/partition/{p}/nodes."""
    with urllib.request.urlopen(f"http://{rest_address}/ws/v1/partition/{partition}/nodes", timeout=10) as r:
        nodes = json.load(r)
    view: dict[str, tuple[str, str]] = {}
    for n in nodes:
        for a in n.get("allocations") or []:
            if a["allocationKey"] in view:
                raise AssertionError(f"scheduler holds allocation key {a['allocationKey']} twice")
            view[a["allocationKey"]] = (a["uuid"], a["nodeId"])
    return view
