"""The gRPC front door: ``si.v1.Scheduler`` exactly as specified, plus ``korral.v1.Korral``.

The three update streams are bidirectional. A stream is bound to the RM named
by the gRPC metadata ``rmid``, or else by the ``rmID`` of its first request (an
RM may send an empty request carrying only its rmID to attach). Responses are
written as the bytes the worker serialized: rmproxy never re-encodes them.
"""

from __future__ import annotations

import asyncio
import functools
import logging

import grpc

from common import korral_pb2, korral_pb2_grpc, si_pb2
from rmproxy.server.proxy import RESYNC_DETAILS, Proxy, RegistrationError
from rmproxy.server.rms import Close

__all__ = ["SchedulerService", "KorralService"]

log = logging.getLogger("korral.rmproxy.grpc")

_REQUEST_NAMES = {"allocation": "AllocationRequest", "application": "ApplicationRequest", "node": "NodeRequest"}
_END = object()  # the RM closed its side of the stream


def _raw(payload: bytes) -> bytes:
    return payload


def _not_registered(stream: str, rm_id: str) -> str:
    return f'received {_REQUEST_NAMES[stream]}, but RmID="{rm_id}" not registered'


class SchedulerService:
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    def handler(self) -> grpc.GenericRpcHandler:
        def stream(name: str, request_type) -> grpc.RpcMethodHandler:
            return grpc.stream_stream_rpc_method_handler(
                functools.partial(self.stream, name),
                request_deserializer=request_type.FromString,
                response_serializer=_raw)

        return grpc.method_handlers_generic_handler("si.v1.Scheduler", {
            "RegisterResourceManager": grpc.unary_unary_rpc_method_handler(
                self.register,
                request_deserializer=si_pb2.RegisterResourceManagerRequest.FromString,
                response_serializer=si_pb2.RegisterResourceManagerResponse.SerializeToString),
            "UpdateAllocation": stream("allocation", si_pb2.AllocationRequest),
            "UpdateApplication": stream("application", si_pb2.ApplicationRequest),
            "UpdateNode": stream("node", si_pb2.NodeRequest),
        })

    async def register(self, request, context):
        try:
            await self.proxy.register(request)
        except RegistrationError as exc:
            log.warning("%s", exc)
            await context.abort(exc.code, str(exc))
        return si_pb2.RegisterResourceManagerResponse()

    async def stream(self, name: str, request_iterator, context):
        proxy = self.proxy
        rm_id = dict(context.invocation_metadata()).get("rmid", "")
        requests = request_iterator.__aiter__()
        first = None
        if not rm_id:
            try:
                first = await requests.__anext__()
            except StopAsyncIteration:
                return
            rm_id = first.rmID
        if rm_id not in proxy.rms:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, _not_registered(name, rm_id))
        if proxy.rms[rm_id].resync_reason is not None:  # the RM was asked to re-register first
            await context.abort(grpc.StatusCode.UNAVAILABLE, RESYNC_DETAILS + proxy.rms[rm_id].resync_reason)
        queue: asyncio.Queue = asyncio.Queue()
        proxy.rms[rm_id].attach(name, queue)

        async def read() -> None:
            try:
                if first is not None:
                    self._handle(name, rm_id, first, queue)
                async for req in requests:
                    self._handle(name, rm_id, req, queue)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the RM went away mid-stream
                log.debug("stream %s of %s ended: %s", name, rm_id, exc)
            finally:
                queue.put_nowait(_END)

        reader = asyncio.create_task(read())
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, Close):
                    if item.code is not None:
                        await context.abort(item.code, item.details)
                    return
                yield item
        finally:
            reader.cancel()
            rm = proxy.rms.get(rm_id)
            if rm is not None:
                rm.detach(name, queue)

    def _handle(self, name: str, stream_rm: str, req, queue: asyncio.Queue) -> None:
        rm_id = req.rmID or stream_rm
        rm = self.proxy.rms.get(rm_id)
        if rm is None:
            queue.put_nowait(Close(grpc.StatusCode.FAILED_PRECONDITION, _not_registered(name, rm_id)))
            return
        self.proxy.handle_request(name, rm, req)


class KorralService(korral_pb2_grpc.KorralServicer):
    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy

    async def UpdateConfiguration(self, request, context):  # noqa: N802 (gRPC names)
        try:
            await self.proxy.config_changes.change(request, who=f"RM {request.rmID}")
        except RegistrationError as exc:
            await context.abort(exc.code, str(exc))
        return korral_pb2.UpdateConfigurationResponse()

    async def Subscribe(self, request, context):  # noqa: N802
        rm = self.proxy.rms.get(request.rmID)
        if rm is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f'received SubscribeRequest, but RmID="{request.rmID}" not registered')
        queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)
        if rm.resync_reason is not None:  # asked before this subscriber came: it hears it too
            queue.put_nowait(korral_pb2.SchedulerNotice(
                reRegister=korral_pb2.ReRegisterRequest(reason=rm.resync_reason)))
        rm.subscribers.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            current = self.proxy.rms.get(request.rmID)
            for holder in {id(rm): rm, id(current): current}.values():
                if holder is not None and queue in holder.subscribers:
                    holder.subscribers.remove(queue)

    async def ProvideStateDump(self, request, context):  # noqa: N802
        self.proxy.state_dumps[request.rmID] = {"requestID": request.requestID, "json": request.json}
        return korral_pb2.Ack()

    async def Shutdown(self, request, context):  # noqa: N802
        if request.rmID not in self.proxy.rms:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f'received ShutdownRequest, but RmID="{request.rmID}" not registered')
        await self.proxy.shutdown_rm(request.rmID)
        return korral_pb2.Ack()
