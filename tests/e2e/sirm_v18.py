"""A minimal RM of SI v1.8 built only on the stubs generated from ``common/si_v18.proto``, as a
client generated from upstream's v1.8.0 si.proto is (no Korral client library involved).

Same shape as ``tests.e2e.sirm.SIRM`` (register, open the three streams, send, read with a
deadline), with v1.8's messages: asks and placed allocations in ``allocations``, releases by
allocationKey. It declares nothing at registration unless told to: Korral must tell its
revision from its messages.
"""

from __future__ import annotations

import functools

import grpc

from common import si_v18_pb2 as si18, si_v18_pb2_grpc
from tests.e2e.sirm import SIRM, Stream

__all__ = ["SIRM18", "node18", "app18", "alloc18", "res18", "raw_stream", "report"]

_STREAMS = {"node": ("UpdateNode", si18.NodeRequest), "application": ("UpdateApplication", si18.ApplicationRequest),
            "allocation": ("UpdateAllocation", si18.AllocationRequest)}


class SIRM18(SIRM):
    def __init__(self, address: str, rm_id: str = "rm-v18") -> None:
        super().__init__(address, rm_id)
        self.stub = si_v18_pb2_grpc.SchedulerStub(self.channel)

    def register(self, config: str = "", timeout: float = 20.0, build_info: dict[str, str] | None = None) -> None:
        self.stub.RegisterResourceManager(
            si18.RegisterResourceManagerRequest(rmID=self.rm_id, version="test-v1.8", policyGroup="queues",
                                                config=config, buildInfo=build_info or {}), timeout=timeout)

    def open(self, attach: bool = True) -> None:
        for name in _STREAMS:
            self.reopen(name, attach)

    def reopen(self, name: str, attach: bool = True) -> None:
        """Open (again) one update stream, e.g. after Korral ended it."""
        method, request = _STREAMS[name]
        self.streams[name] = self.open_stream(getattr(self.stub, method), request(rmID=self.rm_id) if attach else None)

    def send(self, name: str, **fields) -> None:
        """One request on stream ``name`` with ``fields`` (and the rmID)."""
        self.streams[name].send(_STREAMS[name][1](rmID=self.rm_id, **fields))

    def nodes(self, *nodes: si18.NodeInfo) -> None:
        self.send("node", nodes=nodes)

    def apps(self, *apps: si18.AddApplicationRequest) -> None:
        self.send("application", new=apps)

    def allocations(self, *allocations: si18.Allocation) -> None:
        self.send("allocation", allocations=allocations)

    def release(self, app_id: str, *keys: str, term: int = si18.STOPPED_BY_RM) -> None:
        self.send("allocation", releases=si18.AllocationReleasesRequest(allocationsToRelease=[
            si18.AllocationRelease(partitionName="default", applicationID=app_id, allocationKey=k, terminationType=term)
            for k in keys]))


def report(rm: SIRM, nodes: tuple = (), apps: tuple = ()) -> None:
    """Send ``nodes`` (one request), then each app, and wait until all are accepted: an RM of
    either revision, its streams open."""
    if nodes:
        rm.nodes(*nodes)
        rm.wait_for("node", lambda r: len(r.accepted) == len(nodes))
    for a in apps:
        rm.apps(a)
        rm.wait_for("application", lambda r: any(x.applicationID == a.applicationID for x in r.accepted))


def res18(**quantities: int) -> si18.Resource:
    r = si18.Resource()
    for name, value in quantities.items():
        r.resources[name].value = value
    return r


def node18(node_id: str, action: int = si18.NodeInfo.CREATE, **quantities: int) -> si18.NodeInfo:
    return si18.NodeInfo(nodeID=node_id, action=action, schedulableResource=res18(**quantities))


def app18(app_id: str, queue: str = "root.default", user: str = "alice") -> si18.AddApplicationRequest:
    return si18.AddApplicationRequest(applicationID=app_id, queueName=queue, partitionName="default",
                                      ugi=si18.UserGroupInformation(user=user), tags={"namespace": "default"})


def alloc18(key: str, app_id: str, node: str = "", **quantities: int) -> si18.Allocation:
    return si18.Allocation(allocationKey=key, applicationID=app_id, partitionName="default", nodeID=node,
                           resourcePerAlloc=res18(**quantities))


def raw_stream(channel: grpc.Channel, method: str, rm_id: str, *frames: bytes) -> Stream:
    """An si.v1 stream of raw request bytes (what no generated stub can build: garbage, or one
    message with both revisions' fields), bound to ``rm_id`` by metadata. It replaces the RM's
    stream of that kind; responses come back as bytes."""
    call = channel.stream_stream(f"/si.v1.Scheduler/{method}", request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    s = SIRM.open_stream(functools.partial(call, metadata=(("rmid", rm_id),)))
    for frame in frames:
        s.send(frame)
    return s
