"""A minimal RM built only on the generated ``si.v1`` stubs, as any upstream-generated client is.

End-to-end tests use it to talk to a real stack exactly as a foreign RM would
(no Korral client library involved): register, open the three streams, send
requests, and read responses with a deadline.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import grpc

from common import si_pb2, si_pb2_grpc
from rmproxy.bench.cluster_rm import resource  # noqa: F401 (re-exported for tests)


@dataclass
class Stream:
    """One bidirectional stream: put requests in, read responses (or the ending error) out."""

    requests: queue.Queue = field(default_factory=queue.Queue)
    responses: queue.Queue = field(default_factory=queue.Queue)
    call: object = None

    def send(self, request) -> None:
        self.requests.put(request)

    def next(self, timeout: float = 10.0):
        item = self.responses.get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.requests.put(None)


class SIRM:
    def __init__(self, address: str, rm_id: str = "rm-test") -> None:
        self.rm_id = rm_id
        self.channel = grpc.insecure_channel(address)
        self.stub = si_pb2_grpc.SchedulerStub(self.channel)
        self.streams: dict[str, Stream] = {}

    def register(self, config: str = "", timeout: float = 20.0) -> None:
        self.stub.RegisterResourceManager(
            si_pb2.RegisterResourceManagerRequest(rmID=self.rm_id, version="test", policyGroup="queues",
                                                  config=config), timeout=timeout)

    def open(self, attach: bool = True) -> None:
        """Open the three update streams; attach each with an empty request carrying the rmID."""
        for name, method, req in (
            ("node", self.stub.UpdateNode, si_pb2.NodeRequest),
            ("application", self.stub.UpdateApplication, si_pb2.ApplicationRequest),
            ("allocation", self.stub.UpdateAllocation, si_pb2.AllocationRequest),
        ):
            self.streams[name] = self.open_stream(method, req(rmID=self.rm_id) if attach else None)

    @staticmethod
    def open_stream(method, first=None) -> Stream:
        s = Stream()
        if first is not None:
            s.send(first)

        def requests():
            while True:
                item = s.requests.get()
                if item is None:
                    return
                yield item

        s.call = method(requests())

        def read():
            try:
                for r in s.call:
                    s.responses.put(r)
            except grpc.RpcError as exc:
                s.responses.put(exc)

        threading.Thread(target=read, daemon=True).start()
        return s

    def nodes(self, *nodes: si_pb2.NodeInfo) -> None:
        self.streams["node"].send(si_pb2.NodeRequest(rmID=self.rm_id, nodes=list(nodes)))

    def apps(self, *apps: si_pb2.AddApplicationRequest) -> None:
        self.streams["application"].send(si_pb2.ApplicationRequest(rmID=self.rm_id, new=list(apps)))

    def asks(self, *asks: si_pb2.AllocationAsk) -> None:
        self.streams["allocation"].send(si_pb2.AllocationRequest(rmID=self.rm_id, asks=list(asks)))

    def next(self, stream: str, timeout: float = 10.0):
        return self.streams[stream].next(timeout)

    def wait_for(self, stream: str, predicate, timeout: float = 10.0):
        """Read responses of a stream until predicate(response) is true; return that response."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching {stream} response within {timeout}s")
            r = self.next(stream, left)
            if predicate(r):
                return r

    def close(self) -> None:
        for s in self.streams.values():
            s.close()
        self.channel.close()


def node(node_id: str, partition: str | None = None, **quantities: int) -> si_pb2.NodeInfo:
    attrs = {"si/node-partition": partition} if partition else {}
    return si_pb2.NodeInfo(nodeID=node_id, action=si_pb2.NodeInfo.CREATE, attributes=attrs,
                           schedulableResource=resource(**quantities))


def app(app_id: str, queue: str = "root.default", partition: str = "default", user: str = "alice",
        namespace: str = "default") -> si_pb2.AddApplicationRequest:
    return si_pb2.AddApplicationRequest(applicationID=app_id, queueName=queue, partitionName=partition,
                                        ugi=si_pb2.UserGroupInformation(user=user),
                                        tags={"namespace": namespace})


def ask(key: str, app_id: str, partition: str = "default", **quantities: int) -> si_pb2.AllocationAsk:
    return si_pb2.AllocationAsk(allocationKey=key, applicationID=app_id, partitionName=partition,
                                maxAllocations=1, resourceAsk=resource(**quantities))
