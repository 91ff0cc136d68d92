"""The gRPC front door: ``si.v1.Scheduler`` exactly as specified, plus ``korral.v1.Korral``.

``si.v1.Scheduler`` serves RMs of both SI revisions (seed and v1.8, docs/si-revisions.md):
requests are read with the internal model, the union of the two, so either parses. The three
update streams are bidirectional. A stream is bound to the RM named by the gRPC metadata
``rmid``, or else by the ``rmID`` of its first request (an RM may send an empty request carrying
only its rmID to attach). Responses are written as the bytes the worker serialized, in the
RM's revision: rmproxy never re-encodes them. Bytes that do not parse as the request, and a
request its RM's revision does not allow, end the stream with INVALID_ARGUMENT naming the RM;
what it sent before stays applied.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Mapping, Protocol

import grpc
from google.protobuf.unknown_fields import UnknownFieldSet

from common import korral_pb2, korral_pb2_grpc, registry, si_internal_pb2 as si
from rmproxy.errors import RESYNC_DETAILS, ConfigUpdateError, RegistrationError
from rmproxy.revision import REQUEST_NAMES, RevisionError
from rmproxy.rms import Close, RMSession
from rmproxy.split import STREAMS

__all__ = ["SchedulerService", "KorralService", "RMs", "Requests", "Changes"]

log = logging.getLogger("korral.rmproxy.grpc")

_END = object()  # the RM closed its side of the stream


def _raw(payload: bytes) -> bytes:
    return payload


class Undecodable:
    """What the request deserializer returns for bytes that do not parse as the message."""

    __slots__ = ("message", "size", "error")

    def __init__(self, message: str, size: int, error: str) -> None:
        self.message, self.size, self.error = message, size, error

    def describe(self, whose: str) -> str:
        return (f"{whose}{self.message} of {self.size} bytes does not parse as si.v1.{self.message} of "
                f"either SI revision: {self.error}")


def _reader(message_type):
    """A request deserializer that never raises: gRPC would answer a parse error with a bare
    INTERNAL; the handler answers an ``Undecodable`` with INVALID_ARGUMENT saying what it got.
    A field of the request itself sent with the wrong wire type (protobuf keeps it as an unknown
    field, silently) is undecodable too; deeper in the message protobuf's rule stands."""
    desc = message_type.DESCRIPTOR
    name = desc.name

    def parse(raw: bytes):
        try:
            msg = message_type.FromString(raw)
        except Exception as exc:  # protobuf's DecodeError, and anything else the bytes cause
            text = str(exc) or type(exc).__name__
            return Undecodable(name, len(raw), text.rsplit("': ", 1)[-1])  # without our internal type name
        for f in UnknownFieldSet(msg):
            known = desc.fields_by_number.get(f.field_number)
            if known is not None:
                return Undecodable(name, len(raw), f"field {f.field_number} ({known.name}) has wire type "
                                                   f"{f.wire_type}, which is not its type")
        return msg

    return parse


def _not_registered(stream: str, rm_id: str) -> str:
    return f'received {REQUEST_NAMES[stream]}, but RmID="{rm_id}" not registered'


class RMs(Protocol):
    """What the gRPC services use of the RMs this rmproxy holds (``RMRegistry``)."""

    rms: Mapping[str, RMSession]
    state_dumps: dict[str, dict]

    async def register(self, req: Any) -> registry.Registration | None: ...

    async def shutdown(self, rm_id: str) -> None: ...


class Requests(Protocol):
    """Where an RM's requests go (``Router``)."""

    def request(self, stream: str, rm: RMSession, req: Any) -> None: ...


class Changes(Protocol):
    """The one path of config changes and their history (``ConfigChanges``)."""

    async def change(self, req: Any, who: str) -> Any: ...

    async def registered(self, rm: RMSession, replaced: registry.Registration | None) -> None: ...


class SchedulerService:
    def __init__(self, rm_registry: RMs, router: Requests, changes: Changes) -> None:
        self.rm_registry = rm_registry
        self.router = router
        self.changes = changes

    def handler(self) -> grpc.GenericRpcHandler:
        def stream(name: str) -> grpc.RpcMethodHandler:
            return grpc.stream_stream_rpc_method_handler(
                functools.partial(self.stream, name),
                request_deserializer=_reader(STREAMS[name][0]),
                response_serializer=_raw)

        return grpc.method_handlers_generic_handler("si.v1.Scheduler", {
            "RegisterResourceManager": grpc.unary_unary_rpc_method_handler(
                self.register,
                request_deserializer=_reader(si.RegisterResourceManagerRequest),
                response_serializer=si.RegisterResourceManagerResponse.SerializeToString),
            "UpdateAllocation": stream("allocation"),
            "UpdateApplication": stream("application"),
            "UpdateNode": stream("node"),
        })

    async def register(self, request, context):
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "registration of RM failed: " + request.describe(""))
        try:
            replaced = await self.rm_registry.register(request)
        except RegistrationError as exc:
            log.warning("%s", exc)
            await context.abort(exc.code, str(exc))
        # the session just registered (nothing ran in between): the config history records what it
        # replaced, and the partitions its replay rebuilds are no longer ones a change removed
        await self.changes.registered(self.rm_registry.rms[request.rmID], replaced)
        return si.RegisterResourceManagerResponse()

    async def stream(self, name: str, request_iterator, context):
        held = self.rm_registry.rms
        rm_id = dict(context.invocation_metadata()).get("rmid", "")
        requests = request_iterator.__aiter__()
        first = None
        if not rm_id:
            try:
                first = await requests.__anext__()
            except StopAsyncIteration:
                return
            if isinstance(first, Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, first.describe("the first "))
            rm_id = first.rmID
        if rm_id not in held:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, _not_registered(name, rm_id))
        if held[rm_id].resync_reason is not None:  # the RM was asked to re-register first
            await context.abort(grpc.StatusCode.UNAVAILABLE, RESYNC_DETAILS + held[rm_id].resync_reason)
        queue: asyncio.Queue = asyncio.Queue()
        held[rm_id].attach(name, queue)

        async def read() -> None:
            try:
                if first is not None and not self._handle(name, rm_id, first, queue):
                    return
                async for req in requests:
                    if not self._handle(name, rm_id, req, queue):
                        return  # the stream ends with the status _handle queued
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
            rm = held.get(rm_id)
            if rm is not None:
                rm.detach(name, queue)

    def _handle(self, name: str, stream_rm: str, req, queue: asyncio.Queue) -> bool:
        """Apply one request; False when it ended the stream (the status is queued)."""
        if isinstance(req, Undecodable):
            details = req.describe(f"RM {stream_rm}: ") + "; the stream ends, what it sent before was applied"
            queue.put_nowait(Close(grpc.StatusCode.INVALID_ARGUMENT, details))
            return False
        rm_id = req.rmID or stream_rm
        rm = self.rm_registry.rms.get(rm_id)
        if rm is None:
            queue.put_nowait(Close(grpc.StatusCode.FAILED_PRECONDITION, _not_registered(name, rm_id)))
            return False
        try:
            self.router.request(name, rm, req)
        except RevisionError as exc:
            log.warning("%s", exc)
            queue.put_nowait(Close(grpc.StatusCode.INVALID_ARGUMENT, str(exc)))
            return False
        return True


class KorralService(korral_pb2_grpc.KorralServicer):
    def __init__(self, rm_registry: RMs, changes: Changes) -> None:
        self.rm_registry = rm_registry
        self.changes = changes

    async def UpdateConfiguration(self, request, context):  # noqa: N802 (gRPC names)
        try:
            await self.changes.change(request, who=f"RM {request.rmID}")
        except ConfigUpdateError as exc:
            await context.abort(exc.code, str(exc))
        return korral_pb2.UpdateConfigurationResponse()

    async def Subscribe(self, request, context):  # noqa: N802
        rm = self.rm_registry.rms.get(request.rmID)
        if rm is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f'received SubscribeRequest, but RmID="{request.rmID}" not registered')
        queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)
        if rm.resync_reason is not None:  # asked before this subscriber came: it hears it too
            queue.put_nowait(korral_pb2.SchedulerNotice(
                reRegister=korral_pb2.ReRegisterRequest(reason=rm.resync_reason)))
        rm.subscribers.append(queue)
        if request.partitionResync:  # it rebuilds one lost partition on a ResyncPartition notice
            rm.resync_capable.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            current = self.rm_registry.rms.get(request.rmID)
            for holder in {id(rm): rm, id(current): current}.values():
                if holder is not None and queue in holder.subscribers:
                    holder.subscribers.remove(queue)
                if holder is not None and queue in holder.resync_capable:
                    holder.resync_capable.remove(queue)

    async def ProvideStateDump(self, request, context):  # noqa: N802
        self.rm_registry.state_dumps[request.rmID] = {"requestID": request.requestID, "json": request.json}
        return korral_pb2.Ack()

    async def Shutdown(self, request, context):  # noqa: N802
        if request.rmID not in self.rm_registry.rms:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f'received ShutdownRequest, but RmID="{request.rmID}" not registered')
        await self.rm_registry.shutdown(request.rmID)
        return korral_pb2.Ack()
