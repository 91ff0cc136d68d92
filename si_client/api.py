"""``SchedulerAPI`` over gRPC: seed 000's in-process API, served by a remote Korral.

An RM of either SI revision uses it (``si_revision="seed"`` or ``"v1.8"``,
``si_client.revision``): it sends and receives that revision's messages and declares
the revision at registration.

One object serves both flavours:

* **sync** — every method is thread-safe. ``update_allocation``,
  ``update_application`` and ``update_node`` only queue the request on the
  matching long-lived stream and return at once; ``register_resource_manager``,
  ``update_configuration``, ``flush`` and ``close`` block.
* **asyncio** — the queueing sends never block, so call them straight from a
  coroutine; the blocking calls have ``*_async`` twins that run in a worker
  thread. Callback methods may be ``async def``: they run on the event loop that
  called ``register_resource_manager_async`` (or the ``loop`` given to the
  constructor), one at a time in the order each stream received them (handed over in
  batches, ``si_client.relay``), so per-stream ordering holds.

Resilience: when a stream ends with an error (rmproxy restarted, a resync
``korral: re-register: ...``, the RM unknown to the scheduler) or a
``ReRegisterRequest`` notice arrives, the client reconnects with backoff,
re-registers with the same request, and replays the RM's state from its
``RecoverableState`` hook in the shim's recovery order (applications, await
their verdicts; nodes with existing allocations, await every node's
accept/reject; pending asks). Sends made while it recovers are held and go out,
in order, right after the replay; sends made before the loss are covered by the
replayed snapshot (see ``RecoverableState`` for the contract). Without a hook
the client cannot replay, so it enters ``FAILED`` and sends raise.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import Any, Callable, Iterable

import grpc

from common import korral_pb2, korral_pb2_grpc, si_pb2
from si_client._stream import Stream
from si_client.backoff import Backoff
from si_client.callback import RecoverableState, ResourceManagerCallback, StateDumpPlugin, rebuilds_partitions
from si_client.errors import ClientState, NotConnectedError, SchedulerError
from si_client.relay import LoopRelay
from si_client.revision import APPS_PER_REQUEST, NODES_PER_REQUEST, dialect

__all__ = ["ClientState", "NotConnectedError", "SchedulerAPI", "SchedulerError", "channel_options"]

log = logging.getLogger(__name__)

CLIENT_VERSION = "korral-python-client/0.1"


MAX_RECEIVE_BYTES = 64 << 20
# gRPC's own reconnect backoff starts at 1 s and grows 1.6x up to 120 s while the server is down:
# after a 30 s rmproxy outage a channel waited ~7 s more before it tried again, after a longer
# one up to two minutes, however short the client's own backoff. The channel retries at the
# client's pace instead: from 100 ms, never more than the client's backoff cap apart.
INITIAL_RECONNECT_MS = 100


def channel_options(backoff: Backoff | None = None) -> list[tuple[str, int]]:
    """Options for a channel to rmproxy (insecure or TLS): 64 MiB answers, and reconnect attempts
    never further apart than ``backoff.cap`` (the client's own reconnect backoff, default 2 s).
    Give them to your own ``grpc.secure_channel(..., options=channel_options())``."""
    cap_ms = max(INITIAL_RECONNECT_MS, int((backoff or Backoff()).cap * 1000))
    return [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
            ("grpc.initial_reconnect_backoff_ms", min(INITIAL_RECONNECT_MS, cap_ms)),
            ("grpc.max_reconnect_backoff_ms", cap_ms)]


class _Restart(Exception):
    """A stream of the generation being recovered ended: start the recovery over."""


def _rpc_error(what: str, exc: grpc.RpcError) -> SchedulerError:
    return SchedulerError(what, exc.code(), exc.details() or "")


def _describe(error: grpc.RpcError | None) -> str:
    if error is None:
        return "stream ended by the scheduler"
    return f"{error.code().name}: {error.details()}"


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class SchedulerAPI:
    """Client of one Korral scheduler for one RM (one ``rmID``).

    ``address`` is ``host:port`` of rmproxy's gRPC port. ``channel`` replaces
    the insecure channel (e.g. ``grpc.secure_channel``; build it with ``channel_options()``
    so that it reconnects at the client's pace). ``recovery_timeout``
    bounds each wait for verdicts during replay (the shim waits 5 minutes, then
    carries on). ``rpc_timeout`` bounds the unary calls. ``si_revision``: the SI
    revision the RM speaks, ``"seed"`` (``common.si_pb2`` messages) or ``"v1.8"``
    (``common.si_v18_pb2``); ``ValueError`` for anything else.
    """

    def __init__(
        self,
        address: str = "127.0.0.1:9090",
        *,
        channel: grpc.Channel | None = None,
        backoff: Backoff | None = None,
        recovery_timeout: float = 300.0,
        rpc_timeout: float = 30.0,
        loop: asyncio.AbstractEventLoop | None = None,
        si_revision: str = "seed",
    ) -> None:
        self._dialect = dialect(si_revision)
        self.address = address
        self._backoff = backoff or Backoff()
        self._channel = channel or grpc.insecure_channel(address, options=channel_options(self._backoff))
        self._si = self._dialect.scheduler_stub(self._channel)
        self._korral = korral_pb2_grpc.KorralStub(self._channel)
        self._recovery_timeout = recovery_timeout
        self._rpc_timeout = rpc_timeout
        self._loop = loop
        self._cond = threading.Condition()
        self._state = ClientState.NEW
        self._failure = ""
        self._generation = 0
        self._streams: dict[str, Stream] = {}
        self._subscription: Any = None
        self._held: list[tuple[str, Any]] = []
        # a partition replay (korral.v1 ResyncPartition) runs: sends wait in _held until it is done
        self._resyncing = False
        self._resync_lock = threading.Lock()  # one partition replay at a time
        self._waiting: dict[str, set[str]] = {"application": set(), "node": set()}
        self._restart = threading.Event()
        self._stop = threading.Event()
        self._recovery: threading.Thread | None = None
        self._request: Any = None  # the registration, in the RM's revision
        self._callback: ResourceManagerCallback = ResourceManagerCallback()
        self._hook: RecoverableState | None = None
        self._dump: StateDumpPlugin | None = None
        self._relays: dict[str, LoopRelay] = {}  # stream kind (or "notices") -> its async callbacks' relay
        self.reconnects = 0  # completed recoveries, for observers and tests
        self.partition_resyncs = 0  # completed partition replays, for observers and tests

    # ------------------------------------------------------------------ public API
    @property
    def state(self) -> ClientState:
        return self._state

    @property
    def si_revision(self) -> str:
        return self._dialect.revision.value

    @property
    def rm_id(self) -> str:
        return self._request.rmID if self._request is not None else ""

    def register_resource_manager(
        self,
        request: Any,
        callback: ResourceManagerCallback,
        *,
        state: RecoverableState | None = None,
        state_dump: StateDumpPlugin | None = None,
    ) -> Any:
        """Register the RM, open the three streams and the notice subscription, replay the state.

        ``state`` and ``state_dump`` default to ``callback`` when it also
        implements ``RecoverableState`` / ``StateDumpPlugin``. With a hook, its
        snapshot is replayed now (a restarted RM recovers its running work), in
        the shim's order. Blocks until done. Raises ``SchedulerError``
        (``INVALID_ARGUMENT`` with the reasons, ``UNAVAILABLE``, ...). ``request`` is either
        revision's ``RegisterResourceManagerRequest``; ``buildInfo`` gets ``si.revision``.
        """
        if not request.rmID:
            raise SchedulerError("RegisterResourceManager", grpc.StatusCode.INVALID_ARGUMENT, "empty rmID")
        try:
            copy = self._dialect.registration(request)
        except ValueError as exc:
            raise SchedulerError("RegisterResourceManager", grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        with self._cond:
            if self._state is not ClientState.NEW:
                raise NotConnectedError("RegisterResourceManager", self._state, "register only once")
            self._state = ClientState.RECOVERING
        if not copy.version:
            copy.version = CLIENT_VERSION
        self._request = copy
        self._callback = callback
        self._hook = state if state is not None else (callback if isinstance(callback, RecoverableState) else None)
        self._dump = state_dump if state_dump is not None else (
            callback if isinstance(callback, StateDumpPlugin) else None
        )
        try:
            self._connect()
        except grpc.RpcError as exc:
            self._fail_first("RegisterResourceManager", exc)
            raise _rpc_error("RegisterResourceManager", exc) from None
        except _Restart:
            # A stream broke while the first replay ran: recover in the background.
            with self._cond:
                self._state = ClientState.RUNNING  # so that the loss below is taken as one
            self._begin_recovery("stream ended during the initial replay")
        return self._dialect.pb.RegisterResourceManagerResponse()

    async def register_resource_manager_async(self, request, callback, **kwargs):
        """``register_resource_manager`` for asyncio; async callbacks then run on this loop."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return await asyncio.to_thread(self.register_resource_manager, request, callback, **kwargs)

    def update_allocation(self, request: Any) -> None:
        """Queue asks (v1.8: allocations) and releases (``rmID`` filled in when empty); never blocks."""
        self._send("allocation", request, "UpdateAllocation")

    def update_application(self, request: Any) -> None:
        """Queue new and removed applications (``rmID`` filled in when empty); never blocks."""
        self._send("application", request, "UpdateApplication")

    def update_node(self, request: Any) -> None:
        """Queue node creations and updates (``rmID`` filled in when empty); never blocks."""
        self._send("node", request, "UpdateNode")

    def update_configuration(self, request: Any) -> korral_pb2.UpdateConfigurationResponse:
        """Hot-refresh the RM's configuration (korral.v1); blocks; raises ``SchedulerError``.

        ``request``: either revision's ``UpdateConfigurationRequest`` (one wire form). It is
        also kept as the config of future re-registrations.
        """
        request = si_pb2.UpdateConfigurationRequest.FromString(request.SerializeToString())  # korral.v1's type
        if not request.rmID:
            request.rmID = self.rm_id
        try:
            response = self._korral.UpdateConfiguration(
                request, timeout=self._rpc_timeout, metadata=(("rmid", request.rmID),)
            )
        except grpc.RpcError as exc:
            raise _rpc_error("UpdateConfiguration", exc) from None
        if self._request is not None:
            self._request.config = request.config
            if request.policyGroup:
                self._request.policyGroup = request.policyGroup
            self._request.extraConfig.clear()
            self._request.extraConfig.update(request.extraConfig)
        return response

    async def update_configuration_async(self, request):
        return await asyncio.to_thread(self.update_configuration, request)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every queued request was written to its stream (not: processed).

        False if the timeout passed or the client is not running.
        """
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._state is not ClientState.RECOVERING or self._stop.is_set(), timeout
            ):
                return False
            streams = list(self._streams.values()) if self._state is ClientState.RUNNING else []
        return bool(streams) and all(s.flush(timeout) for s in streams)

    def wait_running(self, timeout: float | None = None) -> bool:
        """Block until the client is Running (e.g. after a reconnect); False on timeout/fail/close."""
        with self._cond:
            self._cond.wait_for(lambda: self._state is not ClientState.RECOVERING, timeout)
            return self._state is ClientState.RUNNING

    def close(self, *, shutdown: bool = True, timeout: float = 5.0) -> None:
        """Flush, tell the scheduler the RM stops (korral.v1 ``Shutdown``), end streams, close.

        Idempotent. ``shutdown=False`` leaves the RM registered (Paused on the
        scheduler side), e.g. for a handover to another instance.
        """
        with self._cond:
            if self._state is ClientState.CLOSED:
                return
            was = self._state
        if was is ClientState.RUNNING:
            self.flush(timeout)
        with self._cond:
            self._state = ClientState.CLOSED
            self._stop.set()
            self._restart.set()
            self._cond.notify_all()
        if shutdown and was in (ClientState.RUNNING, ClientState.RECOVERING) and self.rm_id:
            try:
                self._korral.Shutdown(korral_pb2.ShutdownRequest(rmID=self.rm_id), timeout=timeout)
            except grpc.RpcError as exc:
                if exc.code() is not grpc.StatusCode.UNIMPLEMENTED:
                    log.info("shutdown of RM %s not confirmed: %s", self.rm_id, _describe(exc))
        self._close_streams()
        recovery = self._recovery
        if recovery is not None and recovery is not threading.current_thread():
            recovery.join(timeout)
        self._channel.close()

    async def close_async(self, **kwargs) -> None:
        await asyncio.to_thread(lambda: self.close(**kwargs))

    def __enter__(self) -> "SchedulerAPI":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ sending
    def _send(self, kind: str, request: Any, what: str) -> None:
        expected = self._dialect.request_types()[kind]
        if not isinstance(request, expected):
            raise TypeError(f"{what} takes {expected.__name__} of SI revision {self.si_revision} "
                            f"({self._dialect.pb.__name__}), got {type(request).__module__}.{type(request).__name__}")
        if not request.rmID:
            request.rmID = self.rm_id
        with self._cond:
            if self._state is ClientState.RUNNING and not self._resyncing:
                self._streams[kind].send(request)
            elif self._state is ClientState.RUNNING:
                self._held.append((kind, request))
            elif self._state is ClientState.RECOVERING and self._request is not None:
                self._held.append((kind, request))
            else:
                raise NotConnectedError(what, self._state, self._failure)

    # ------------------------------------------------------------------ connect/replay
    def _connect(self) -> None:
        """Register, open fresh streams, replay the hook's snapshot, release held sends.

        Raises ``grpc.RpcError`` from registration and ``_Restart`` when a new
        stream ends before the replay finished.
        """
        assert self._request is not None
        # End the old streams first: a response they still carry describes state the
        # registration wipes, and any the RM did see is in its snapshot (taken after the joins).
        with self._cond:
            old = self._close_streams_locked()
        for stream in old:
            stream.join(1.0)
        self._si.RegisterResourceManager(self._request, timeout=self._rpc_timeout)
        with self._cond:
            if self._stop.is_set():
                return
            self._restart.clear()
            self._generation += 1
            self._open_streams_locked(self._generation)
        if self._hook is not None:
            snapshot, covered = self._snapshot(self._hook.recoverable_state)
            with self._cond:
                # Held before the snapshot was taken: by the hook's contract (state changed
                # before the send, snapshot taken under the RM's lock) the snapshot covers them.
                del self._held[:covered]
            self._replay(snapshot)
        with self._cond:
            if self._stop.is_set():
                return
            if self._restart.is_set():
                raise _Restart()
            for kind, request in self._held:
                self._streams[kind].send(request)
            self._held.clear()
            self._state = ClientState.RUNNING
            self._cond.notify_all()

    def _replay(self, snapshot) -> None:
        rm_id, pb = self.rm_id, self._dialect.pb
        apps = list(snapshot.applications)
        for chunk in _chunks(apps, APPS_PER_REQUEST):
            self._await_verdicts(
                "application", {a.applicationID for a in chunk},
                pb.ApplicationRequest(new=chunk, rmID=rm_id),
            )
        nodes = list(snapshot.nodes)
        for chunk in _chunks(nodes, NODES_PER_REQUEST):
            self._await_verdicts("node", {n.nodeID for n in chunk}, pb.NodeRequest(nodes=chunk, rmID=rm_id))
        items, misplaced = self._dialect.replayed_allocations(snapshot)
        if misplaced:
            log.error("RM %s: the snapshot's %s are not replayed: SI revision %s has no place for them "
                      "(see RecoverySnapshot)", rm_id, misplaced, self.si_revision)
        for request in self._dialect.allocation_requests(items, rm_id):
            with self._cond:
                self._check_current()
                self._streams["allocation"].send(request)
        log.info("RM %s replayed %d applications, %d nodes, %d %s", rm_id, len(apps), len(nodes), len(items),
                 self._dialect.allocations_field)

    def _check_current(self) -> None:
        """Under the lock: stop replaying into streams that were replaced or closed."""
        if self._restart.is_set() or self._stop.is_set():
            raise _Restart()

    def _await_verdicts(self, kind: str, ids: set[str], request: Any) -> None:
        with self._cond:
            self._check_current()
            self._waiting[kind] = set(ids)
            self._streams[kind].send(request)
            done = self._cond.wait_for(
                lambda: not self._waiting[kind] or self._restart.is_set(), self._recovery_timeout
            )
            missing = len(self._waiting[kind])
            self._waiting[kind] = set()
        if self._restart.is_set():
            raise _Restart()
        if not done:
            log.warning("RM %s: %d %ss got no accept/reject within %.0fs; resuming anyway",
                        self.rm_id, missing, kind, self._recovery_timeout)

    # ------------------------------------------------------------------ streams
    def _open_streams_locked(self, generation: int) -> None:
        rm_id, pb = self.rm_id, self._dialect.pb
        specs: dict[str, tuple[Callable, Any, Callable]] = {
            "allocation": (self._si.UpdateAllocation, pb.AllocationRequest(rmID=rm_id), self._on_allocation),
            "application": (self._si.UpdateApplication, pb.ApplicationRequest(rmID=rm_id), self._on_application),
            "node": (self._si.UpdateNode, pb.NodeRequest(rmID=rm_id), self._on_node),
        }
        for kind, (method, attach, dispatch) in specs.items():
            self._streams[kind] = Stream(kind, method, attach, rm_id, generation, dispatch, self._on_stream_end)
        subscribe = korral_pb2.SubscribeRequest(rmID=rm_id, partitionResync=rebuilds_partitions(self._hook))
        call = self._korral.Subscribe(subscribe, metadata=(("rmid", rm_id),))
        self._subscription = call
        threading.Thread(target=self._read_notices, args=(call, generation), name="korral-notices",
                         daemon=True).start()

    def _close_streams_locked(self) -> list[Stream]:
        old = list(self._streams.values())
        for stream in old:
            stream.close()
        self._streams = {}
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None
        return old

    def _close_streams(self) -> None:
        with self._cond:
            old = self._close_streams_locked()
        for stream in old:
            stream.join(2.0)

    def _on_stream_end(self, stream: Stream, error: grpc.RpcError | None) -> None:
        self._lost(stream.generation, f"{stream.kind} stream: {_describe(error)}")

    def _lost(self, generation: int, reason: str) -> None:
        """A stream or the notice feed of ``generation`` ended: recover, once per loss."""
        with self._cond:
            if generation != self._generation:
                return
            if self._state is ClientState.RECOVERING:
                self._restart.set()  # the recovery in progress starts over
                self._cond.notify_all()
                return
            if not self._begin_recovery_locked(reason):
                return
        self._safe_callback(self._callback.connection_lost, reason)

    def _begin_recovery(self, reason: str) -> None:
        with self._cond:
            started = self._begin_recovery_locked(reason)
        if started:
            self._safe_callback(self._callback.connection_lost, reason)

    def _begin_recovery_locked(self, reason: str) -> bool:
        if self._state in (ClientState.CLOSED, ClientState.FAILED):
            return False
        self._cond.notify_all()
        if self._hook is None:
            self._state = ClientState.FAILED
            self._failure = f"lost the scheduler ({reason}) and no RecoverableState hook to replay from"
            log.error("RM %s: %s", self.rm_id, self._failure)
            return True
        self._state = ClientState.RECOVERING
        self._restart.set()
        if self._recovery is None:
            self._recovery = threading.Thread(target=self._recover, name="si-recovery", daemon=True)
            self._recovery.start()
        log.warning("RM %s: connection lost (%s); reconnecting", self.rm_id, reason)
        return True

    def _recover(self) -> None:
        """Reconnect loop of the recovery thread; exits Running, Failed or Closed."""
        attempt = 0
        while True:
            if self._stop.wait(self._backoff.delay(attempt)):
                break
            try:
                self._connect()
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                    with self._cond:
                        self._state = ClientState.FAILED
                        self._failure = f"re-registration refused: {_describe(exc)}"
                        self._cond.notify_all()
                    log.error("RM %s: %s", self.rm_id, self._failure)
                    break
                log.info("RM %s: reconnect attempt %d failed: %s", self.rm_id, attempt + 1, _describe(exc))
                attempt += 1
                continue
            except _Restart:
                attempt += 1
                continue
            with self._cond:
                if self._state is ClientState.RECOVERING:
                    attempt = 0  # lost again right after the replay: go round once more
                    continue
                done = self._state is ClientState.RUNNING
            if done:
                self.reconnects += 1
                log.info("RM %s: re-registered and replayed after %d attempt(s)", self.rm_id, attempt + 1)
                self._safe_callback(self._callback.connection_restored)
            break
        with self._cond:
            self._recovery = None
            if self._state is ClientState.RECOVERING and not self._stop.is_set():
                # Lost again between our last check and now: hand over to a fresh thread.
                self._recovery = threading.Thread(target=self._recover, name="si-recovery", daemon=True)
                self._recovery.start()

    def _fail_first(self, what: str, exc: grpc.RpcError) -> None:
        with self._cond:
            self._state = ClientState.FAILED
            self._failure = f"{what} failed: {_describe(exc)}"
            self._cond.notify_all()
        self._close_streams()

    # ------------------------------------------------------------------ dispatch
    def _snapshot(self, hook: Callable, *args: Any) -> tuple[Any, int]:
        """The hook's snapshot, and how many of the sends held so far it covers: those held
        before it was taken. They are counted the moment the hook returns, in the same step of
        the RM's event loop for an async hook, so that a send the RM makes just after the
        snapshot (its loop runs on while this thread wakes up) is not taken for one it covers."""
        def counted(snapshot: Any) -> tuple[Any, int]:
            with self._cond:
                return snapshot, len(self._held)

        result = hook(*args)
        if not inspect.isawaitable(result):
            return counted(result)
        if self._loop is None:
            raise RuntimeError(f"{hook.__qualname__} is async but the client has no event loop")

        async def taken() -> tuple[Any, int]:
            return counted(await result)
        return asyncio.run_coroutine_threadsafe(taken(), self._loop).result()

    def _invoke(self, fn: Callable, *args: Any) -> Any:
        result = fn(*args)
        if inspect.isawaitable(result):
            if self._loop is None:
                raise RuntimeError(f"{fn.__qualname__} is async but the client has no event loop")
            result = asyncio.run_coroutine_threadsafe(result, self._loop).result()
        return result

    def _safe_callback(self, fn: Callable, *args: Any) -> None:
        try:
            self._invoke(fn, *args)
        except Exception:
            log.exception("callback %s failed", getattr(fn, "__qualname__", fn))

    def _deliver(self, kind: str, live: Callable[[], bool], fn: Callable, args: tuple,
                 then: Callable[[], None] | None = None) -> None:
        """Run callback ``fn(*args)``, then ``then()``: a coroutine callback on the loop, through the
        relay of ``kind`` (in order, without waiting for it: ``si_client.relay``), dropped if
        ``live()`` is false by then; a plain one here, on the reader's thread."""
        if self._loop is not None and inspect.iscoroutinefunction(fn):
            relay = self._relays.get(kind)
            if relay is None or relay.loop is not self._loop:
                relay = self._relays[kind] = LoopRelay(self._loop)
            relay.submit(live, fn, args, then)
            return
        try:
            self._invoke(fn, *args)
        finally:
            if then is not None:
                then()

    def _on_allocation(self, response: Any, stream: Stream) -> None:
        self._deliver("allocation", stream.is_open, self._callback.update_allocation, (response,))

    def _on_application(self, response: Any, stream: Stream) -> None:
        self._deliver("application", stream.is_open, self._callback.update_application, (response,),
                      lambda: self._tick_off("application", [a.applicationID for a in response.accepted],
                                             [a.applicationID for a in response.rejected]))

    def _on_node(self, response: Any, stream: Stream) -> None:
        self._deliver("node", stream.is_open, self._callback.update_node, (response,),
                      lambda: self._tick_off("node", [n.nodeID for n in response.accepted],
                                             [n.nodeID for n in response.rejected]))

    def _tick_off(self, kind: str, *id_lists: list[str]) -> None:
        with self._cond:
            waiting = self._waiting[kind]
            if waiting:
                for ids in id_lists:
                    waiting.difference_update(ids)
                if not waiting:
                    self._cond.notify_all()

    def _read_notices(self, call: Any, generation: int) -> None:
        try:
            for notice in call:
                handler = _NOTICE_HANDLERS.get(notice.WhichOneof("notice"))
                if handler is None:
                    log.warning("unknown korral.v1 notice ignored: %s", notice)
                    continue
                try:
                    handler(self, notice, generation)
                except Exception:
                    log.exception("handling notice %s failed", notice.WhichOneof("notice"))
        except grpc.RpcError as exc:
            code = exc.code()
            if code is grpc.StatusCode.UNIMPLEMENTED:
                log.info("scheduler has no korral.v1 service; events and re-register notices unavailable")
            elif code is not grpc.StatusCode.CANCELLED:
                self._lost(generation, f"notice stream: {_describe(exc)}")

    def _current(self, generation: int) -> Callable[[], bool]:
        return lambda: generation == self._generation and self._state is not ClientState.CLOSED

    def _notice_events(self, notice: korral_pb2.SchedulerNotice, generation: int) -> None:
        self._deliver("notices", self._current(generation), self._callback.send_event, (list(notice.events.events),))

    def _notice_states(self, notice: korral_pb2.SchedulerNotice, generation: int) -> None:
        live = self._current(generation)
        for state in notice.schedulingStates.states:
            self._deliver("notices", live, self._callback.update_container_scheduling_state, (state,))

    def _notice_dump(self, notice: korral_pb2.SchedulerNotice, generation: int) -> None:
        if self._dump is None:
            text = '{"error": "this RM has no StateDumpPlugin"}'
        else:
            text = self._invoke(self._dump.get_state_dump)
        self._korral.ProvideStateDump(
            korral_pb2.StateDump(rmID=self.rm_id, requestID=notice.stateDumpRequest.requestID, json=text),
            timeout=self._rpc_timeout,
        )

    def _notice_reregister(self, notice: korral_pb2.SchedulerNotice, generation: int) -> None:
        self._lost(generation, f"re-register requested: {notice.reRegister.reason}")

    def _notice_resync_partition(self, notice: korral_pb2.SchedulerNotice, generation: int) -> None:
        # on a thread of its own: the replay waits for verdicts, and notices keep coming meanwhile
        threading.Thread(target=self._resync_partition, args=(notice.resyncPartition, generation),
                         name="si-partition-resync", daemon=True).start()

    def _resync_partition(self, resync: korral_pb2.ResyncPartition, generation: int) -> None:
        """Replay one partition on the open streams (docs/architecture.md, Recovery).

        Sends wait while the hook's snapshot is taken; those made before it returned are covered by
        it and go out *before* each stream's replay-start marker (an empty request), so rmproxy
        drops their parts for the partition and passes the rest; then the replay; then the sends
        made since, after it. A full recovery that starts meanwhile supersedes it."""
        rm_id, pb = self.rm_id, self._dialect.pb
        with self._resync_lock:
            with self._cond:
                if generation != self._generation or self._state is not ClientState.RUNNING:
                    return  # a full recovery replays everything
                self._resyncing = True
            try:
                log.warning("RM %s: rebuilding partition %s (epoch %d): %s", rm_id, resync.partition,
                            resync.epoch, resync.reason)
                hook = self._hook
                assert hook is not None  # only a hook that rebuilds partitions declared it
                snapshot, count = self._snapshot(hook.recoverable_partition_state, resync.partition)
                with self._cond:
                    if generation != self._generation or self._state is not ClientState.RUNNING:
                        return
                    covered, self._held = self._held[:count], self._held[count:]
                    for kind, request in covered:
                        self._streams[kind].send(request)
                    for kind, marker in (("application", pb.ApplicationRequest(rmID=rm_id)),
                                         ("node", pb.NodeRequest(rmID=rm_id)),
                                         ("allocation", pb.AllocationRequest(rmID=rm_id))):
                        self._streams[kind].send(marker)
                self._replay(snapshot)
                self.partition_resyncs += 1
            except _Restart:
                return
            except Exception:  # the hook failed: only a whole re-registration can rebuild the partition
                log.exception("RM %s: replay of partition %s failed; re-registering", rm_id, resync.partition)
                self._lost(generation, f"replay of partition {resync.partition} failed")
            finally:
                with self._cond:
                    self._resyncing = False
                    if self._state is ClientState.RUNNING:
                        for kind, request in self._held:
                            self._streams[kind].send(request)
                        self._held.clear()


_NOTICE_HANDLERS: dict[str, Callable[[SchedulerAPI, Any, int], None]] = {
    "events": SchedulerAPI._notice_events,
    "schedulingStates": SchedulerAPI._notice_states,
    "stateDumpRequest": SchedulerAPI._notice_dump,
    "reRegister": SchedulerAPI._notice_reregister,
    "resyncPartition": SchedulerAPI._notice_resync_partition,
}
