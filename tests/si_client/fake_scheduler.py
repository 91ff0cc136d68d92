"""A fake Korral for client and sim tests: si.v1.Scheduler + korral.v1.Korral in-process.

It honours rmproxy's contract as far as the RM can see it (registration,
stream attach by metadata/first rmID, FAILED_PRECONDITION for unknown RMs,
accept/reject of apps and nodes, first-fit allocation, release echoes,
re-register notices) with a deliberately simple scheduler. ``overcommit=True``
makes it ignore node capacity: a broken scheduler the sim must catch.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from common import korral_pb2, korral_pb2_grpc, si_pb2, si_pb2_grpc
from common.si_resource import resource_from_si

_END = object()


@dataclass
class _Abort:
    code: grpc.StatusCode
    details: str


@dataclass
class _Node:
    capacity: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)


def _next(out: queue.SimpleQueue, context):
    """Next item for a response stream; _END once the client went away (frees the server thread)."""
    while True:
        try:
            return out.get(timeout=0.1)
        except queue.Empty:
            if not context.is_active():
                return _END


def _stream(out: queue.SimpleQueue, context):
    """Yield what ``out`` holds until its end or an abort (whose code ends the call)."""
    while True:
        item = _next(out, context)
        if item is _END:
            return
        if isinstance(item, _Abort):
            context.set_code(item.code)
            context.set_details(item.details)
            return
        yield item


class FakeScheduler(si_pb2_grpc.SchedulerServicer, korral_pb2_grpc.KorralServicer):
    def __init__(self, port: int = 0, *, overcommit: bool = False) -> None:
        self.overcommit = overcommit
        self.lock = threading.RLock()
        self.registered: dict[str, si_pb2.RegisterResourceManagerRequest] = {}
        self.register_count = 0
        self.shutdowns: list[str] = []
        self.config_updates: list[si_pb2.UpdateConfigurationRequest] = []
        self.dumps: list[korral_pb2.StateDump] = []
        self.subscriptions: list[korral_pb2.SubscribeRequest] = []
        self.received: dict[str, list] = {"allocation": [], "application": [], "node": []}
        self.log: list[tuple[str, object]] = []  # every request of every stream, in arrival order
        self.refuse_register: str | None = None
        self._outs: dict[tuple[str, str], queue.SimpleQueue] = {}
        self._notices: dict[str, queue.SimpleQueue] = {}
        self._uuid = itertools.count(1)
        self._wipe()
        self._server = None
        self.port = port
        self.start()

    # ---------------------------------------------------------------- lifecycle
    def _wipe(self) -> None:
        self.apps: dict[str, str] = {}
        self.nodes: dict[str, _Node] = {}
        self.pending: dict[str, si_pb2.AllocationAsk] = {}
        self.allocs: dict[str, tuple[str, str, dict[str, int], str]] = {}  # uuid -> node, app, res, key

    def start(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
        si_pb2_grpc.add_SchedulerServicer_to_server(self, self._server)
        korral_pb2_grpc.add_KorralServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        with self.lock:
            for out in list(self._outs.values()) + list(self._notices.values()):
                out.put(_Abort(grpc.StatusCode.UNAVAILABLE, "server stopping"))
            self._outs.clear()
            self._notices.clear()
        self._server.stop(grace=0.2).wait()

    def restart(self) -> None:
        """rmproxy + workers restarted: connections drop, everything is forgotten."""
        self.stop()
        with self.lock:
            self.registered.clear()
            self._wipe()
        self.start()

    def request_reregister(self, rm_id: str, reason: str = "partition default got a new worker") -> None:
        """Resync as rmproxy does it: notice first, then end the streams UNAVAILABLE."""
        with self.lock:
            notices = self._notices.get(rm_id)
            if notices is not None:
                notices.put(korral_pb2.SchedulerNotice(reRegister=korral_pb2.ReRegisterRequest(reason=reason)))
            self._wipe()
            for kind in ("allocation", "application", "node"):
                out = self._outs.pop((rm_id, kind), None)
                if out is not None:
                    out.put(_Abort(grpc.StatusCode.UNAVAILABLE, f"korral: re-register: {reason}"))

    def push_notice(self, rm_id: str, notice: korral_pb2.SchedulerNotice) -> None:
        with self.lock:
            self._notices[rm_id].put(notice)

    # ---------------------------------------------------------------- si.v1
    def RegisterResourceManager(self, request, context):
        if not request.rmID:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "registration of RM failed: empty rmID")
        if self.refuse_register:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse_register)
        with self.lock:
            self.registered[request.rmID] = request
            self.register_count += 1
            self._wipe()
        return si_pb2.RegisterResourceManagerResponse()

    def UpdateAllocation(self, request_iterator, context):
        return self._serve("allocation", "AllocationRequest", request_iterator, context)

    def UpdateApplication(self, request_iterator, context):
        return self._serve("application", "ApplicationRequest", request_iterator, context)

    def UpdateNode(self, request_iterator, context):
        return self._serve("node", "NodeRequest", request_iterator, context)

    def _serve(self, kind, type_name, requests, context):
        rm_id = dict(context.invocation_metadata()).get("rmid", "")
        out: queue.SimpleQueue = queue.SimpleQueue()
        first = next(requests, None)
        if first is None:
            return
        rm_id = rm_id or first.rmID
        with self.lock:
            if rm_id not in self.registered:
                context.set_code(grpc.StatusCode.FAILED_PRECONDITION)
                context.set_details(f'received {type_name}, but RmID="{rm_id}" not registered')
                return
            self._outs[(rm_id, kind)] = out
        handler = getattr(self, f"_on_{kind}")

        def read():
            try:
                for req in itertools.chain([first], requests):
                    with self.lock:  # recorded as it is handled: the log is in handling order
                        self.received[kind].append(req)
                        self.log.append((kind, req))
                        handler(rm_id, req)
            except Exception:
                pass
            out.put(_END)

        threading.Thread(target=read, daemon=True).start()
        yield from _stream(out, context)

    def _emit(self, rm_id: str, kind: str, response) -> None:
        out = self._outs.get((rm_id, kind))
        if out is not None:
            out.put(response)

    def _on_application(self, rm_id: str, req: si_pb2.ApplicationRequest) -> None:
        with self.lock:
            resp = si_pb2.ApplicationResponse()
            for app in req.new:
                if app.applicationID in self.apps:
                    resp.rejected.add(applicationID=app.applicationID, reason="already existed")
                else:
                    self.apps[app.applicationID] = app.queueName
                    resp.accepted.add(applicationID=app.applicationID)
            released = si_pb2.AllocationResponse()
            for rem in req.remove:
                self.apps.pop(rem.applicationID, None)
                for key in [k for k, a in self.pending.items() if a.applicationID == rem.applicationID]:
                    del self.pending[key]
                for uuid in [u for u, a in self.allocs.items() if a[1] == rem.applicationID]:
                    self._free(uuid, released, f"Application {rem.applicationID} Removed")
            if resp.accepted or resp.rejected:
                self._emit(rm_id, "application", resp)
            if released.released:
                self._emit(rm_id, "allocation", released)

    def _on_node(self, rm_id: str, req: si_pb2.NodeRequest) -> None:
        with self.lock:
            resp = si_pb2.NodeResponse()
            for info in req.nodes:
                if info.action != si_pb2.NodeInfo.CREATE:
                    continue
                if info.nodeID in self.nodes:
                    resp.rejected.add(nodeID=info.nodeID, reason="node name must be unique")
                    continue
                node = _Node(resource_from_si(info.schedulableResource))
                self.nodes[info.nodeID] = node
                for alloc in info.existingAllocations:
                    self._place(alloc.UUID, info.nodeID, alloc.applicationID, resource_from_si(alloc.resourcePerAlloc),
                                alloc.allocationKey)
                resp.accepted.add(nodeID=info.nodeID)
            if resp.accepted or resp.rejected:
                self._emit(rm_id, "node", resp)
            self._schedule(rm_id)

    def _on_allocation(self, rm_id: str, req: si_pb2.AllocationRequest) -> None:
        with self.lock:
            resp = si_pb2.AllocationResponse()
            for ask in req.asks:
                if ask.applicationID not in self.apps:
                    resp.rejected.add(allocationKey=ask.allocationKey, applicationID=ask.applicationID,
                                      reason=f"failed to find application {ask.applicationID}")
                else:
                    self.pending[ask.allocationKey] = ask
            for rel in req.releases.allocationsToRelease:
                if rel.UUID in self.allocs:
                    self._free(rel.UUID, resp, "allocation remove as per RM request")
            for rel in req.releases.allocationAsksToRelease:
                self.pending.pop(rel.allocationKey, None)
            if resp.rejected or resp.released:
                self._emit(rm_id, "allocation", resp)
            self._schedule(rm_id)

    def _place(self, uuid, node_id, app_id, res, key) -> None:
        node = self.nodes[node_id]
        for k, v in res.items():
            node.used[k] = node.used.get(k, 0) + v
        self.allocs[uuid] = (node_id, app_id, res, key)

    def _free(self, uuid, resp, message) -> None:
        node_id, app_id, res, key = self.allocs.pop(uuid)
        node = self.nodes.get(node_id)
        if node is not None:
            for k, v in res.items():
                node.used[k] -= v
        resp.released.add(applicationID=app_id, UUID=uuid, allocationKey=key,
                          terminationType=si_pb2.STOPPED_BY_RM, message=message)

    def _fits(self, node: _Node, res: dict[str, int]) -> bool:
        return self.overcommit or all(node.used.get(k, 0) + v <= node.capacity.get(k, 0) for k, v in res.items())

    def _schedule(self, rm_id: str) -> None:
        resp = si_pb2.AllocationResponse()
        for key, ask in list(self.pending.items()):
            res = resource_from_si(ask.resourceAsk)
            for node_id, node in self.nodes.items():
                if self._fits(node, res):
                    uuid = f"uuid-{next(self._uuid)}"
                    self._place(uuid, node_id, ask.applicationID, res, key)
                    resp.new.add(allocationKey=key, UUID=uuid, nodeID=node_id,
                                 applicationID=ask.applicationID, resourcePerAlloc=ask.resourceAsk)
                    del self.pending[key]
                    break
        if resp.new:
            self._emit(rm_id, "allocation", resp)

    # ---------------------------------------------------------------- korral.v1
    def UpdateConfiguration(self, request, context):
        if "invalid" in request.config:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "update of configuration failed: invalid")
        self.config_updates.append(request)
        return korral_pb2.UpdateConfigurationResponse()

    def Subscribe(self, request, context):
        out: queue.SimpleQueue = queue.SimpleQueue()
        with self.lock:
            self._notices[request.rmID] = out
            self.subscriptions.append(request)
        yield from _stream(out, context)

    def ProvideStateDump(self, request, context):
        self.dumps.append(request)
        return korral_pb2.Ack()

    def Shutdown(self, request, context):
        self.shutdowns.append(request.rmID)
        with self.lock:
            self.registered.pop(request.rmID, None)
        return korral_pb2.Ack()
