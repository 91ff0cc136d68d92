"""rmproxy's core: RM sessions, the broker link, and routing between them.

Runs on one asyncio loop with the gRPC and REST servers. Requests from RMs are
split per partition and sent to the broker stamped with the partition's epoch
and a sequence number; outcomes from workers come back as serialized SI
responses and are pushed, unparsed, onto the RM's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import Any

import grpc

from common import korral_pb2, registry, si_internal_pb2, si_pb2
from common.compat import Compat, compat_warnings, parse_compat
from common.config import SchedulerConfig, load_config
from common.config.extra import check_extra_config
from common.config.errors import ConfigError
from common.envelope import Envelope, Kind, dispatch
from common.gcpause import gc_paused
from common.heartbeat import EXPIRY, INTERVAL
from common.messages import (KINDS, ConfigUpdate, Heartbeat, PartitionLost, PartitionOwned, PartitionRemove,
                             ProxyHello, Reply, RMPartitions, RMUnregister, SiRevision, Status, Unroutable)
from common.si_revision import declared_revision
from common.si_rows import fill_allocations
from rmproxy.server import revision, split
from rmproxy.server.broker_link import BrokerLink
from rmproxy.server.cluster_view import ClusterView
from rmproxy.server.config_changes import ConfigChanges
from rmproxy.server.errors import RegistrationError
from rmproxy.server.rms import RMSession, RMState
from rmproxy.server.worker_requests import NoAnswer, WorkerRequests

__all__ = ["Proxy", "RegistrationError", "REGISTER_TIMEOUT", "HOLD_SECONDS", "RM_TIMEOUT",
           "MAINTAIN_INTERVAL", "RESYNC_DETAILS", "LARGE_FRAME"]

log = logging.getLogger("korral.rmproxy")

REGISTER_TIMEOUT = 10.0  # seconds to wait for workers to own an RM's partitions
HOLD_SECONDS = 30.0  # a request for a partition without a worker waits this long, then is answered
RM_TIMEOUT = 300.0  # seconds an RM may stay Paused (no stream open) before it is Stopped
MAINTAIN_INTERVAL = 1.0
RESYNC_DETAILS = "korral: re-register: "
ASK_BATCH = 1000  # asks per SI_ASKS envelope: a 1,000-ask part is read in ~1.5 ms
LARGE_FRAME = 1 << 20  # bytes; a frame this large is decoded with the cyclic GC paused

_KIND_OF_STREAM = {"allocation": Kind.SI_ALLOCATION, "application": Kind.SI_APPLICATION, "node": Kind.SI_NODE}
_STREAM_OF_RESPONSE = {
    Kind.SI_ALLOCATION_RESPONSE: "allocation",
    Kind.SI_APPLICATION_RESPONSE: "application",
    Kind.SI_NODE_RESPONSE: "node",
}
_STREAM_OF_REQUEST = {v: k for k, v in _KIND_OF_STREAM.items()}


def _read_config(req) -> tuple[SchedulerConfig, Compat]:
    """The request's config and compatibility switch; ``ConfigError`` naming what is wrong
    (queues.yaml, or every extraConfig key Korral reads with a value it cannot use)."""
    config = load_config(req.config)
    errors = check_extra_config(req.extraConfig)
    if errors:
        raise ConfigError(errors)
    return config, parse_compat(req.extraConfig)  # checked just above: cannot raise


class Proxy:
    def __init__(self, broker: str, store: registry.AsyncRegistryStore, name: str = "",
                 rm_timeout: float = RM_TIMEOUT, curve: tuple[str | None, str | None] = (None, None),
                 hold_seconds: float = HOLD_SECONDS) -> None:
        self.broker_address = broker
        self.hold_seconds = hold_seconds
        self.curve = curve  # (own secret certificate, broker's public certificate)
        self.rm_timeout = rm_timeout
        self.store = store
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.rms: dict[str, RMSession] = {}
        self.link = BrokerLink(broker, f"proxy-{self.name}", curve, self._on_broker)
        self.view = ClusterView()  # who owns which partition in which epoch, and the rest of the stack
        # requests to workers waiting for their replies (config updates, partition removal, REST reads)
        self.requests = WorkerRequests(lambda env: self.send(env))
        self.state_dumps: dict[str, dict] = {}  # rmID -> the RM's last ProvideStateDump {"requestID", "json"}
        # observers of RM lifecycle events (metrics, resync history): objects with
        # resync_started(rm_id, reason) and registered(rm_id); they must not raise
        self.listeners: list[Any] = []
        self.dropped = 0
        self.started_ns = time.time_ns()
        self.config_changes = ConfigChanges(self)  # every config change goes through it, audited

    # -- broker link ----------------------------------------------------------------

    def _connect(self) -> None:
        self.link.connect()
        self.view.reset()
        self._hello()

    def _hello(self) -> None:
        self.send(Envelope(Kind.PROXY_HELLO, body=ProxyHello(
            self.name, socket.gethostname(), os.getpid(),
            {rm.rm_id: tuple(rm.partitions) for rm in self.rms.values() if rm.state is not RMState.STOPPED},
        ).wire()))

    def rm_report(self) -> dict[str, dict]:
        """This rmproxy's RMs as it holds them now: rmID -> {"state", "partitions"}."""
        return {rm.rm_id: {"state": rm.state.value, "partitions": rm.partitions} for rm in self.rms.values()}

    def cluster(self) -> dict[str, Any]:
        """The stack as ``korral status`` shows it: the broker's view (as of its last message,
        ``viewAgeMs``) with this rmproxy's own RMs as they are now; {} when not connected."""
        if not self.broker_connected:
            return {}
        return self.view.document({"name": self.name, "host": socket.gethostname(), "pid": os.getpid()},
                                  self.rm_report())

    def send(self, env: Envelope) -> None:
        self.link.send(env)

    @property
    def broker_connected(self) -> bool:
        return self.view.known and self.link.alive

    async def run_link(self) -> None:
        """Heartbeat the broker and reconnect when it goes silent (the link receives)."""
        self._connect()
        while True:
            await asyncio.sleep(INTERVAL)
            self.send(Envelope(Kind.HEARTBEAT, body=Heartbeat(rms=self.rm_report()).wire()))
            if not self.link.alive:
                log.warning("broker silent for %.0fs, reconnecting to %s", EXPIRY, self.broker_address)
                self._connect()
                self._broker_reset("the broker stopped answering")

    def _on_broker(self, raw: Any) -> None:
        """One frame from the broker (bytes or a ZeroMQ frame): decode, then its handler."""
        # a worker's large answer: thousands of objects, nothing cyclic
        with gc_paused() if len(raw) > LARGE_FRAME else contextlib.nullcontext():
            if not dispatch(self, raw, self._HANDLERS, f"rmproxy {self.name}"):
                self.dropped += 1

    def _on_heartbeat(self, env: Envelope) -> None:
        if Heartbeat.decode(env.body).reannounce:
            self._hello()
            self._broker_reset("the broker restarted")

    def _broker_reset(self, reason: str) -> None:
        """What was in flight through the old broker may be lost: every RM resyncs (re-registers).
        A registration (or config update) still waiting for its partitions' owners fails at once:
        its RM_REGISTER may have died with the old broker, and the new one assigns nothing for it.
        Requests to workers in flight end too: their replies would come back through a broker
        that no longer knows who asked."""
        self.requests.fail_all(reason)
        for rm in list(self.rms.values()):
            waiting = [p for p, w in rm.owned_waiters.items() if not w.done()]
            for p in waiting:
                rm.owned_waiters.pop(p).set_exception(RegistrationError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"registration of RM failed: {reason} before partition [{rm.rm_id}]{p} had a worker; "
                    "register again"))
            if rm.epochs:
                self.resync(rm, reason)

    def _on_status(self, env: Envelope) -> None:
        self.view.on_status(Status.decode(env.body).doc)

    def _on_owned(self, env: Envelope) -> None:
        owned = PartitionOwned.decode(env.body)
        error = owned.error
        if error is None:
            self.view.on_owned(env.rm_id, env.partition, env.epoch, owned.worker)
        rm = self.rms.get(env.rm_id)
        if rm is None:
            return
        waiter = rm.owned_waiters.pop(env.partition, None)
        if waiter is not None and not waiter.done():
            if error is None:
                rm.epochs[env.partition] = env.epoch
                rm.seqs[env.partition] = 0
                waiter.set_result(env.epoch)
                self._flush_held(rm, env.partition)
            else:
                waiter.set_exception(RegistrationError(grpc.StatusCode.INTERNAL, error))
            return
        if error is not None or env.partition not in rm.partitions or rm.resync_reason is not None:
            return  # a failed load is reported by the status; a resync's re-registration reassigns
        if env.partition not in rm.epochs:
            # Owned after its registration (or config update) stopped waiting, e.g. no worker was
            # idle then: a new, empty partition, so the RM's traffic for it can start now.
            rm.epochs[env.partition] = env.epoch
            rm.seqs[env.partition] = 0
            self._flush_held(rm, env.partition)
        elif rm.epochs[env.partition] != env.epoch:  # the RM's state there is gone
            self.resync(rm, f"partition [{rm.rm_id}]{env.partition} has a new owner "
                            f"{owned.worker} (epoch {env.epoch})")

    def _on_lost(self, env: Envelope) -> None:
        """The partition's worker died, and its state with it: the RM must re-register, which
        gives the partition a new owner (the broker does not reassign it before)."""
        reason = PartitionLost.decode(env.body).reason
        self.view.on_lost(env.rm_id, env.partition, env.epoch, reason)
        self.requests.fail_partition(env.rm_id, env.partition, env.epoch, reason)
        rm = self.rms.get(env.rm_id)
        if rm is not None and env.partition in rm.partitions:
            waiter = rm.owned_waiters.pop(env.partition, None)
            if waiter is not None and not waiter.done():
                # the worker died while it loaded the partition for a registration still waiting:
                # that registration fails now (the RM registers again) instead of after 10 s
                waiter.set_exception(RegistrationError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"registration of RM failed: partition [{rm.rm_id}]{env.partition} lost epoch {env.epoch} "
                    f"while its worker loaded it: {reason}; register again"))
            self.resync(rm, f"partition [{rm.rm_id}]{env.partition} lost epoch {env.epoch}: {reason}")

    def _outcome_rm(self, env: Envelope) -> RMSession | None:
        """The RM a worker's outcome is for; None (counted) when it is from an epoch the RM has moved past."""
        rm = self.rms.get(env.rm_id)
        if rm is None or rm.epochs.get(env.partition) != env.epoch:
            self.dropped += 1
            return None
        return rm

    def _on_response(self, env: Envelope) -> None:
        if (rm := self._outcome_rm(env)) is not None:
            rm.deliver(_STREAM_OF_RESPONSE[env.kind], env.body)

    def _on_allocations(self, env: Envelope) -> None:
        """A worker's new allocations as rows: written in the RM's SI revision, down its stream."""
        if (rm := self._outcome_rm(env)) is None:
            return
        try:
            resp = fill_allocations(si_internal_pb2.AllocationResponse(), env.body, env.partition, rm.revision)
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # a bug of the worker, not of the RM
            self.dropped += 1
            log.error("dropped new allocations of [%s]%s: malformed rows: %s", env.rm_id, env.partition, exc)
            return
        rm.deliver("allocation", resp.SerializeToString())

    def _on_events(self, env: Envelope) -> None:
        rm = self.rms.get(env.rm_id)
        if rm is None or not rm.subscribers:
            return
        batch = korral_pb2.EventBatch(events=[si_pb2.EventRecord.FromString(b) for b in env.body or []])
        rm.notify(korral_pb2.SchedulerNotice(events=batch))

    def _on_scheduling_states(self, env: Envelope) -> None:
        rm = self.rms.get(env.rm_id)
        if rm is None or not rm.subscribers:
            return
        states = [si_pb2.UpdateContainerSchedulingStateRequest.FromString(b) for b in env.body or []]
        rm.notify(korral_pb2.SchedulerNotice(schedulingStates=korral_pb2.SchedulingStates(states=states)))

    def _on_reply(self, env: Envelope) -> None:
        self.requests.answer(Reply.decode(env.body))

    def _on_unroutable(self, env: Envelope) -> None:
        """The broker could not route a request: answer it with the broker's reason."""
        unroutable = Unroutable.decode(env.body)
        reason, original = unroutable.reason, unroutable.body
        log.warning("unroutable %s for [%s]%s: %s", unroutable.kind, env.rm_id, env.partition, reason)
        kind = KINDS.get(unroutable.kind or "")
        rm = self.rms.get(env.rm_id)
        if kind is Kind.RM_REGISTER:  # no new epoch (Redis): the registration fails now, not in 10 s
            for waiter in rm.owned_waiters.values() if rm is not None else ():
                if not waiter.done():
                    waiter.set_exception(RegistrationError(
                        grpc.StatusCode.UNAVAILABLE, f"registration of RM failed: {reason}; register again"))
            return
        if kind is Kind.SI_ASKS:  # asks as rows: rejected as the request they came in would be
            resp = split.reject_ask_rows(original, reason) if isinstance(original, bytes) else None
            if rm is not None and resp is not None:
                rm.deliver("allocation", resp.SerializeToString())
            return
        if isinstance(original, dict):  # a config update or a query waiting for its reply
            self.requests.answer(Reply(unroutable.request_id, error=reason, unavailable=True))
            return
        stream = _STREAM_OF_REQUEST.get(kind)  # type: ignore[arg-type]
        if rm is not None and stream is not None and isinstance(original, bytes):
            req_type, _, reject, _ = split.STREAMS[stream]
            resp = reject(req_type.FromString(original), reason)
            if resp is not None:
                rm.deliver(stream, resp.SerializeToString())

    _HANDLERS = {
        Kind.HEARTBEAT: _on_heartbeat,
        Kind.STATUS: _on_status,
        Kind.PARTITION_OWNED: _on_owned,
        Kind.PARTITION_LOST: _on_lost,
        Kind.SI_ALLOCATIONS: _on_allocations,
        Kind.SI_ALLOCATION_RESPONSE: _on_response,
        Kind.SI_APPLICATION_RESPONSE: _on_response,
        Kind.SI_NODE_RESPONSE: _on_response,
        Kind.EVENTS: _on_events,
        Kind.SCHEDULING_STATES: _on_scheduling_states,
        Kind.CONFIG_RESULT: _on_reply,
        Kind.QUERY_RESULT: _on_reply,
        Kind.UNROUTABLE: _on_unroutable,
    }

    # -- RM operations (called by the gRPC service) ------------------------------------

    async def register(self, req: si_pb2.RegisterResourceManagerRequest) -> None:
        """Register (or re-register, wiping the RM's state) and wait until workers own its partitions."""
        if not req.rmID:
            raise RegistrationError(grpc.StatusCode.INVALID_ARGUMENT,
                                    "registration of RM failed: rmID must not be empty")
        try:
            declared = declared_revision(req.buildInfo)
            config, compat = _read_config(req)
        except (ConfigError, ValueError) as exc:  # ValueError: an unknown si.revision
            kept = (f"; RM {req.rmID} keeps its current registration and partitions"
                    if req.rmID in self.rms else "")
            raise RegistrationError(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"registration of RM failed: RM {req.rmID}: {exc}{kept}") from None
        for warning in (*config.warnings, *compat_warnings(config, compat)):
            log.warning("RM %s config: %s", req.rmID, warning)
        partitions = [p.name for p in config.partitions]
        reg = registry.Registration(
            rm_id=req.rmID, version=req.version, policy_group=req.policyGroup, config=req.config,
            extra_config=dict(req.extraConfig), build_info={**req.buildInfo, "rmId": req.rmID},
            registered_at_ns=time.time_ns())
        old = self.rms.get(req.rmID)
        # the config it replaces (another rmproxy may have held the RM): for the config history
        before = old.registration if old is not None else await self._stored_registration(req.rmID)
        try:
            await self.store.save(reg)
        except Exception as exc:  # redis errors of several kinds: all mean "cannot persist"
            raise RegistrationError(grpc.StatusCode.UNAVAILABLE,
                                    f"registration of RM failed: Redis unavailable: {exc}") from None
        rm = RMSession(req.rmID, partitions, registration=reg, revision=declared,
                       revision_why=revision.DECLARED if declared else "")
        if old is not None:  # keep the RM's open channels; everything else is wiped
            for w in old.owned_waiters.values():
                w.cancel()
            rm.streams, rm.subscribers = old.streams, old.subscribers
        self.rms[req.rmID] = rm
        loop = asyncio.get_running_loop()
        waiters = {p: loop.create_future() for p in partitions}
        rm.owned_waiters = dict(waiters)
        self.send(Envelope(Kind.RM_REGISTER, req.rmID, body=RMPartitions(tuple(partitions)).wire()))
        try:
            done, pending = await asyncio.wait(waiters.values(), timeout=REGISTER_TIMEOUT,
                                               return_when=asyncio.FIRST_EXCEPTION)
        finally:  # however this ends (the RM's call cancelled too), no waiter stays for nobody
            for w in waiters.values():
                if not w.done():
                    w.cancel()
        # every error read (asyncio logs an unread one), the first raised
        failed = next(iter([w for w in done if w.cancelled() or w.exception() is not None]), None)
        if failed is not None:
            if failed.cancelled():
                raise RegistrationError(grpc.StatusCode.UNAVAILABLE,
                                        f"registration of RM {req.rmID} failed: a newer registration of it "
                                        "came in meanwhile")
            raise failed.exception()  # type: ignore[misc]
        if pending:
            missing = ", ".join(f"[{req.rmID}]{p}" for p, w in waiters.items() if w in pending)
            where = "" if self.broker_connected else " (rmproxy is not connected to the broker)"
            raise RegistrationError(
                grpc.StatusCode.UNAVAILABLE,
                f"registration of RM failed: no worker took partition(s) {missing} within "
                f"{REGISTER_TIMEOUT:.0f}s{where}: start more workers (korral up --workers N, "
                "or korral worker on another host)")
        log.info("registered RM %s with partitions %s, SI revision %s", req.rmID, partitions,
                 f"{declared} ({revision.DECLARED})" if declared else "to be decided by its messages")
        for listener in self.listeners:
            listener.registered(req.rmID)
        if before is not None:
            await self.config_changes.registered(req.rmID, before.config, req.config)

    def handle_request(self, stream: str, rm: RMSession, req) -> None:
        """Split one SI request per partition and forward it; answer edge rejections at once.
        Raises ``revision.RevisionError`` (nothing applied) when the RM's SI revision forbids it."""
        if revision.settle(rm, stream, req) is not None:
            log.info("RM %s speaks SI revision %s (%s)", rm.rm_id, rm.revision, rm.revision_why)
            for partition, epoch in list(rm.epochs.items()):
                self._tell_revision(rm, partition, epoch)
        _, splitter, reject, _ = split.STREAMS[stream]
        parts, rejected = splitter(req, rm.rm_id, rm.partitions)
        if rejected is not None:
            rm.deliver(stream, rejected.SerializeToString())
        kind = _KIND_OF_STREAM[stream]
        for partition, part in parts.items():
            epoch = rm.epochs.get(partition)
            if epoch is None:
                rm.hold(stream, partition, part, time.monotonic() + self.hold_seconds)
                continue
            if rm.revision is not None:
                self._tell_revision(rm, partition, epoch)
            bodies = split.ask_bodies(part, ASK_BATCH) if kind is Kind.SI_ALLOCATION else None
            if bodies is not None:
                for body in bodies:
                    self.send(Envelope(Kind.SI_ASKS, rm.rm_id, partition, epoch, rm.next_seq(partition), body))
                continue
            self.send(Envelope(kind, rm.rm_id, partition, epoch, rm.next_seq(partition),
                               part.SerializeToString()))

    def _tell_revision(self, rm: RMSession, partition: str, epoch: int) -> None:
        """Tell the partition's worker the RM's SI revision once per epoch, in the RM's request
        sequence: it reaches the worker before any request that needs it."""
        if rm.revision_told.get(partition) != epoch:
            rm.revision_told[partition] = epoch
            self.send(Envelope(Kind.SI_REVISION, rm.rm_id, partition, epoch, rm.next_seq(partition),
                               SiRevision(rm.revision.value).wire()))

    def _flush_held(self, rm: RMSession, partition: str) -> None:
        """The partition has an owner again without a resync (a new partition): send what waited."""
        for stream, part in rm.take_held(partition):
            self.handle_request(stream, rm, part)

    def _expire_held(self, rm: RMSession, now: float) -> None:
        for stream, partition, part in rm.expired_held(now):
            _, _, reject, _ = split.STREAMS[stream]
            resp = reject(part, f"partition [{rm.rm_id}]{partition} has had no worker for "
                                f"{self.hold_seconds:.0f}s: start more workers (korral up --workers N, "
                                "or korral worker on another host)")
            if resp is not None:
                rm.deliver(stream, resp.SerializeToString())

    def resync(self, rm: RMSession, reason: str) -> None:
        """Ask the RM to re-register: a notice on Subscribe, then its streams end UNAVAILABLE."""
        if rm.resync_reason is not None:
            return  # asked already; the re-registration answers every reason at once
        log.warning("asking RM %s to re-register: %s", rm.rm_id, reason)
        for listener in self.listeners:
            listener.resync_started(rm.rm_id, reason)
        rm.resync_reason = reason
        rm.epochs.clear()
        rm.notify(korral_pb2.SchedulerNotice(reRegister=korral_pb2.ReRegisterRequest(reason=reason)))
        rm.close_streams(grpc.StatusCode.UNAVAILABLE, RESYNC_DETAILS + reason)

    async def _stored_registration(self, rm_id: str) -> registry.Registration | None:
        try:
            return await self.store.load(rm_id)
        except Exception:  # Redis down: the save below says so to the RM
            return None

    def active_rm(self, rm_id: str) -> RMSession:
        """The RM's session if it is registered and owns partitions (else FAILED_PRECONDITION) and
        is not asked to re-register (else UNAVAILABLE: a config change waits for that)."""
        rm = self.rms.get(rm_id)
        if rm is not None and rm.resync_reason is not None:
            raise RegistrationError(grpc.StatusCode.UNAVAILABLE,
                                    f"update of configuration failed: RM {rm_id} was asked to re-register "
                                    f"({rm.resync_reason}); nothing changed: retry once it has re-registered")
        if rm is None or not rm.epochs:
            raise RegistrationError(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"RM {rm_id} has no active partitions, make sure it is registered")
        return rm

    async def update_configuration(self, req: si_pb2.UpdateConfigurationRequest) -> None:
        """Hot reload: update kept partitions in place, create added ones, remove dropped ones.

        The whole config is validated first; an invalid one changes nothing. Kept partitions are
        updated before anything else, so a partition that refuses the change leaves the
        registration (and every other partition's membership) as it was.
        """
        rm = self.active_rm(req.rmID)
        try:
            config, compat = _read_config(req)
        except ConfigError as exc:
            raise RegistrationError(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"update of configuration failed: RM {req.rmID}: {exc}") from None
        for warning in (*config.warnings, *compat_warnings(config, compat)):
            log.warning("RM %s config: %s", req.rmID, warning)
        names = [p.name for p in config.partitions]
        kept = [p for p in names if p in rm.partitions]
        added = [p for p in names if p not in rm.partitions]
        removed = [p for p in rm.partitions if p not in names]
        results = await asyncio.gather(*(
            self.ask_worker(rm, p, Kind.CONFIG_UPDATE, ConfigUpdate(req.config, extra_config=dict(req.extraConfig)))
            for p in kept))
        # A worker that refused the config makes the request invalid; one that could not be
        # reached (no worker, it died, the broker restarted) makes it fail for now: UNAVAILABLE,
        # so the RM retries instead of taking its config for wrong. The registration is only
        # replaced below, so a retry (or the RM's re-registration) starts from a known config.
        refused = [r.error for r in results if r.error and not r.unavailable]
        unreached = [r.error for r in results if r.error and r.unavailable]
        if refused:
            raise RegistrationError(grpc.StatusCode.INVALID_ARGUMENT,
                                    "update of configuration failed: " + "; ".join(refused + unreached))
        if unreached:
            raise RegistrationError(grpc.StatusCode.UNAVAILABLE,
                                    "update of configuration failed: " + "; ".join(unreached)
                                    + "; the registration is unchanged: retry")
        old = rm.registration
        reg = registry.Registration(
            rm_id=req.rmID, version=old.version if old else "", policy_group=req.policyGroup,
            config=req.config, extra_config=dict(req.extraConfig),
            build_info=old.build_info if old else {}, registered_at_ns=old.registered_at_ns if old else 0)
        try:
            await self.store.save(reg)  # before any new partition's worker loads it
        except Exception as exc:
            raise RegistrationError(grpc.StatusCode.UNAVAILABLE,
                                    f"update of configuration failed: Redis unavailable: {exc}") from None
        rm.registration = reg
        await asyncio.gather(*(self.ask_worker(rm, p, Kind.PARTITION_REMOVE, PartitionRemove()) for p in removed))
        for p in removed:
            rm.epochs.pop(p, None)
        loop = asyncio.get_running_loop()
        waiters = {p: loop.create_future() for p in added}
        rm.owned_waiters.update(waiters)
        rm.partitions = names
        self.send(Envelope(Kind.RM_PARTITIONS, req.rmID, body=RMPartitions(tuple(names)).wire()))
        if waiters:
            done, pending = await asyncio.wait(waiters.values(), timeout=REGISTER_TIMEOUT)
            if pending:
                missing = ", ".join(f"[{req.rmID}]{p}" for p, w in waiters.items() if w in pending)
                raise RegistrationError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"configuration updated, but no worker took the new partition(s) {missing} within "
                    f"{REGISTER_TIMEOUT:.0f}s: start more workers; they are assigned as soon as one is idle")
        log.info("RM %s: configuration updated (kept %s, added %s, removed %s)", req.rmID, kept, added, removed)

    async def ask_worker(self, rm: RMSession, partition: str, kind: Kind,
                         body: ConfigUpdate | PartitionRemove) -> Reply:
        """Send a config change to a partition's worker, in the RM's request sequence (it applies
        after the RM's earlier requests), and wait for its reply; failures are a Reply's error."""
        epoch = rm.epochs.get(partition)
        if epoch is None:
            return Reply(error=f"partition [{rm.rm_id}]{partition} has no worker", unavailable=True)
        try:
            return await self.requests.ask(kind, rm.rm_id, partition, epoch, rm.next_seq(partition), body)
        except NoAnswer as exc:
            return Reply(error=str(exc), unavailable=True)

    async def shutdown_rm(self, rm_id: str) -> None:
        """A voluntary shutdown: Running -> Stopped at once."""
        await self._stop_rm(rm_id, "voluntary shutdown")

    async def maintain(self) -> None:
        """``maintain_once`` every ``MAINTAIN_INTERVAL``."""
        while True:
            await asyncio.sleep(MAINTAIN_INTERVAL)
            await self.maintain_once(time.monotonic())

    async def maintain_once(self, now: float) -> None:
        """Answer held requests past their deadline; Stop RMs Paused too long; write back
        registrations Redis lost. ``now``: monotonic seconds."""
        for rm in list(self.rms.values()):
            self._expire_held(rm, now)
            if rm.state is RMState.PAUSED and now - rm.paused_since > self.rm_timeout:
                log.warning("RM %s Paused for over %.0fs: Stopped, its partitions are released",
                            rm.rm_id, self.rm_timeout)
                await self._stop_rm(rm.rm_id, "paused too long")
        await self._restore_registrations()

    async def _restore_registrations(self) -> None:
        try:
            for rm in list(self.rms.values()):
                if rm.registration is not None and await self.store.load(rm.rm_id) is None:
                    log.warning("Redis lost the registration of RM %s: writing it again", rm.rm_id)
                    await self.store.save(rm.registration)
        except Exception as exc:  # Redis down: owned partitions keep scheduling; retry next turn
            log.debug("cannot check registrations in Redis: %s", exc)

    async def _stop_rm(self, rm_id: str, reason: str) -> None:
        rm = self.rms.pop(rm_id, None)
        self.config_changes.forget(rm_id)
        self.send(Envelope(Kind.RM_UNREGISTER, rm_id, body=RMUnregister(reason).wire()))
        if rm is not None:
            rm.state = RMState.STOPPED
            rm.close_streams(None, f"RM stopped: {reason}")  # None: end the streams normally
        try:
            await self.store.delete(rm_id)
        except Exception as exc:
            log.warning("could not delete the registration of RM %s: %s", rm_id, exc)

    def ready(self) -> dict:
        workers = self.view.status.get("workers", []) if self.broker_connected else []
        return {"broker": self.broker_connected, "workers": len(workers)}

