"""The RMs this rmproxy holds and their lifecycle: registration, config updates, resyncs, stop.

Registration writes the RM's registration to Redis, asks the broker for owners of its
partitions and waits (``REGISTER_TIMEOUT``) until each is owned; a re-registration this rmproxy
asked for that brings the config the RM sent last keeps the operator's config active instead. A
config update is applied by the kept partitions' workers first, then replaces the registration,
removes dropped partitions and waits for owners of added ones (``apply_config``; every change
comes through ``rmproxy.config_changes``). A partition that loses its worker, or a broker
restart, makes the RM re-register (``resync``); for an RM that declared ``partitionResync``
a lost partition alone is rebuilt (``partition_lost``, then a ResyncPartition notice), with
the whole re-registration as the fallback. An RM Paused too long is Stopped
(``maintain_once``).

The registry answers the broker side's ownership news (``broker_side.RMSide``) and tells its
listeners (``RMListener``) of registrations and resyncs. Its errors name what failed:
``RegistrationError``, ``ConfigUpdateError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import grpc

from common import korral_pb2, registry, si_pb2
from common.config import SchedulerConfig, config_checksum, load_config
from common.config.errors import ConfigError
from common.config.extra import check_extra_config
from common.envelope import Envelope, Kind
from common.messages import ConfigUpdate, PartitionOwned, PartitionRemove, Query, Reply, RMPartitions, RMUnregister
from common.si_revision import declared_revision
from rmproxy import revision
from rmproxy.errors import NO_WORKER_ADVICE, RESYNC_DETAILS, ConfigUpdateError, RegistrationError
from rmproxy.rms import RMSession, RMState
from rmproxy.worker_requests import NoAnswer, WorkerRequests

__all__ = ["RMRegistry", "RMListener", "Broker", "HeldRequests", "REGISTER_TIMEOUT", "RM_TIMEOUT",
           "MAINTAIN_INTERVAL"]

log = logging.getLogger("korral.rmproxy")

REGISTER_TIMEOUT = 10.0  # seconds to wait for workers to own an RM's partitions
RM_TIMEOUT = 300.0  # seconds an RM may stay Paused (no stream open) before it is Stopped
MAINTAIN_INTERVAL = 1.0
RESYNC_TIMEOUT = REGISTER_TIMEOUT  # seconds for a lost partition's new owner, then for the RM's replay markers


class Broker(Protocol):
    """What the registry uses of the broker side (``BrokerSide``)."""

    requests: WorkerRequests

    @property
    def connected(self) -> bool: ...

    def send(self, env: Envelope) -> None: ...


class HeldRequests(Protocol):
    """The requests held for partitions without a worker (``Router``)."""

    def flush_held(self, rm: RMSession, partition: str) -> None: ...

    def drop_held(self, rm: RMSession, partition: str) -> int: ...

    def expire_held(self, rm: RMSession, now: float) -> None: ...


class RMListener(Protocol):
    """An observer of RM lifecycle events (metrics, the resync history); it must not raise."""

    def resync_started(self, rm_id: str, reason: str) -> None: ...

    def registered(self, rm_id: str) -> None: ...


def _read_config(req: Any) -> SchedulerConfig:
    """The request's config; ``ConfigError`` naming what is wrong (queues.yaml, or every
    extraConfig key Korral reads with a value it cannot use, the compatibility switch too)."""
    config = load_config(req.config)
    errors = check_extra_config(req.extraConfig)
    if errors:
        raise ConfigError(errors)
    return config


def _keeping_operator_config(req: si_pb2.RegisterResourceManagerRequest, old: RMSession | None,
                             sent: str) -> si_pb2.RegisterResourceManagerRequest:
    """The registration to apply for ``req`` (``sent``: its config's checksum): ``req`` itself,
    except for a re-registration rmproxy asked for (a resync) that brings the config the RM sent
    last while another one is active (an operator's change): then the active config stays, so the
    recovery does not undo the change. A config the RM changed itself is its truth, and replaces
    the active one."""
    active = old.registration if old is not None else None
    if old is None or old.resync_reason is None or active is None or old.rm_sent_checksum != sent \
            or config_checksum(active.config) == sent:
        return req
    log.info("RM %s re-registers as asked with the config it sent last (%s): the active config %s stays",
             req.rmID, sent, config_checksum(active.config))
    kept = si_pb2.RegisterResourceManagerRequest()
    kept.CopyFrom(req)
    kept.config = active.config
    return kept


class RMRegistry:
    """The RM sessions of this rmproxy, ``rms`` (rmID -> ``RMSession``), shared with the router."""

    def __init__(self, rms: dict[str, RMSession], store: registry.AsyncRegistryStore, broker: Broker,
                 held: HeldRequests, rm_timeout: float = RM_TIMEOUT) -> None:
        self.rms = rms
        self.store = store
        self.broker = broker
        self.held = held
        self.rm_timeout = rm_timeout
        self.listeners: list[RMListener] = []
        self.state_dumps: dict[str, dict] = {}  # rmID -> the RM's last ProvideStateDump {"requestID", "json"}

    # -- registration --------------------------------------------------------------------

    async def register(self, req: si_pb2.RegisterResourceManagerRequest) -> registry.Registration | None:
        """Register (or re-register, wiping the RM's state) and wait until workers own its
        partitions; the registration it replaced (None: none known), for the config history. A
        resync's re-registration keeps an operator's config (``_keeping_operator_config``)."""
        if not req.rmID:
            raise RegistrationError(grpc.StatusCode.INVALID_ARGUMENT,
                                    "registration of RM failed: rmID must not be empty")
        old = self.rms.get(req.rmID)
        sent = config_checksum(req.config)
        req = _keeping_operator_config(req, old, sent)
        try:
            declared = declared_revision(req.buildInfo)
            config = _read_config(req)
        except (ConfigError, ValueError) as exc:  # ValueError: an unknown si.revision
            kept = (f"; RM {req.rmID} keeps its current registration and partitions"
                    if old is not None else "")
            raise RegistrationError(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"registration of RM failed: RM {req.rmID}: {exc}{kept}") from None
        for warning in config.warnings:
            log.warning("RM %s config: %s", req.rmID, warning)
        partitions = [p.name for p in config.partitions]
        reg = registry.Registration(
            rm_id=req.rmID, version=req.version, policy_group=req.policyGroup, config=req.config,
            extra_config=dict(req.extraConfig), build_info={**req.buildInfo, "rmId": req.rmID},
            registered_at_ns=time.time_ns())
        # the config it replaces (another rmproxy may have held the RM): for the config history
        before = old.registration if old is not None else await self._stored_registration(req.rmID)
        try:
            await self.store.save(reg)
        except Exception as exc:  # redis errors of several kinds: all mean "cannot persist"
            raise RegistrationError(grpc.StatusCode.UNAVAILABLE,
                                    f"registration of RM failed: Redis unavailable: {exc}") from None
        rm = RMSession(req.rmID, partitions, registration=reg, rm_sent_checksum=sent, revision=declared,
                       revision_why=revision.DECLARED if declared else "")
        if old is not None:  # keep the RM's open channels; everything else is wiped
            for w in old.owned_waiters.values():
                w.cancel()
            rm.streams, rm.subscribers, rm.resync_capable = old.streams, old.subscribers, old.resync_capable
        self.rms[req.rmID] = rm
        loop = asyncio.get_running_loop()
        waiters = {p: loop.create_future() for p in partitions}
        rm.owned_waiters = dict(waiters)
        self.broker.send(Envelope(Kind.RM_REGISTER, req.rmID, body=RMPartitions(tuple(partitions)).wire()))
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
            where = "" if self.broker.connected else " (rmproxy is not connected to the broker)"
            raise RegistrationError(
                grpc.StatusCode.UNAVAILABLE,
                f"registration of RM failed: no worker took partition(s) {missing} within "
                f"{REGISTER_TIMEOUT:.0f}s{where}: {NO_WORKER_ADVICE}")
        log.info("registered RM %s with partitions %s, SI revision %s", req.rmID, partitions,
                 f"{declared} ({revision.DECLARED})" if declared else "to be decided by its messages")
        rm.log_compatibility("at registration", config)
        for listener in self.listeners:
            listener.registered(req.rmID)
        return before

    async def _stored_registration(self, rm_id: str) -> registry.Registration | None:
        try:
            return await self.store.load(rm_id)
        except Exception:  # Redis down: the save that follows says so to the RM
            return None

    def rm_report(self) -> dict[str, dict]:
        """This rmproxy's RMs as it holds them now: rmID -> {"state", "partitions",
        "compatibility"} (the switch in effect and where it came from)."""
        return {rm.rm_id: {"state": rm.state.value, "partitions": rm.partitions,
                           "compatibility": rm.compatibility().as_dict()} for rm in self.rms.values()}

    # -- ownership, as the broker side tells it ---------------------------------------------

    def partition_owned(self, rm_id: str, partition: str, epoch: int, owned: PartitionOwned) -> None:
        rm = self.rms.get(rm_id)
        if rm is None:
            return
        if partition in rm.partition_resyncs:
            self._resync_owned(rm, partition, epoch, owned)
            return
        waiter = rm.owned_waiters.pop(partition, None)
        if waiter is not None and not waiter.done():
            if owned.error is None:
                rm.epochs[partition] = epoch
                rm.seqs[partition] = 0
                waiter.set_result(epoch)
                self.held.flush_held(rm, partition)
            else:
                waiter.set_exception(RegistrationError(grpc.StatusCode.INTERNAL, owned.error))
            return
        if owned.error is not None or partition not in rm.partitions or rm.resync_reason is not None:
            return  # a failed load is reported by the status; a resync's re-registration reassigns
        if partition not in rm.epochs:
            # Owned after its registration (or config update) stopped waiting, e.g. no worker was
            # idle then: a new, empty partition, so the RM's traffic for it can start now.
            rm.epochs[partition] = epoch
            rm.seqs[partition] = 0
            self.held.flush_held(rm, partition)
        elif rm.epochs[partition] != epoch:  # the RM's state there is gone
            self.resync(rm, f"partition [{rm.rm_id}]{partition} has a new owner {owned.worker} (epoch {epoch})")

    def partition_lost(self, rm_id: str, partition: str, epoch: int, reason: str) -> None:
        """The partition's worker died, and its state with it: the RM must re-register, which
        gives the partition a new owner (the broker does not reassign it before)."""
        rm = self.rms.get(rm_id)
        if rm is None or partition not in rm.partitions:
            return
        waiter = rm.owned_waiters.pop(partition, None)
        if waiter is not None and not waiter.done():
            # the worker died while it loaded the partition for a registration still waiting:
            # that registration fails now (the RM registers again) instead of after 10 s
            waiter.set_exception(RegistrationError(
                grpc.StatusCode.UNAVAILABLE,
                f"registration of RM failed: partition [{rm.rm_id}]{partition} lost epoch {epoch} "
                f"while its worker loaded it: {reason}; register again"))
        elif self._resync_partition(rm, partition, epoch, reason):
            return
        self.resync(rm, f"partition [{rm.rm_id}]{partition} lost epoch {epoch}: {reason}")

    # -- one partition rebuilt (an RM that declared partitionResync) ---------------------------

    def _resync_partition(self, rm: RMSession, partition: str, epoch: int, reason: str) -> bool:
        """Give the lost partition a new owner without the RM re-registering, as a config update
        gives one to an added partition: False when this RM cannot (it did not declare
        ``partitionResync``, is re-registering, the partition had no epoch here, no broker)."""
        if (not rm.can_resync_partition or rm.resync_reason is not None or not self.broker.connected
                or rm.epochs.get(partition) != epoch):
            return False
        log.warning("partition [%s]%s lost epoch %d: %s; rebuilding it alone (RM %s declared partitionResync)",
                    rm.rm_id, partition, epoch, reason, rm.rm_id)
        del rm.epochs[partition]
        rm.replay_gates.pop(partition, None)
        why = f"partition [{rm.rm_id}]{partition} lost epoch {epoch}: {reason}"
        rm.partition_resyncs[partition] = (why, time.monotonic() + RESYNC_TIMEOUT)
        for listener in self.listeners:  # measured until the RM is asked to replay it
            listener.resync_started(rm.rm_id, f"{why} (partition resync)")
        # the broker keeps a lost partition for the RM's re-registration; dropping it from the RM's
        # partitions and adding it back makes it an added one, which the next idle worker takes
        others = tuple(p for p in rm.partitions if p != partition)
        self.broker.send(Envelope(Kind.RM_PARTITIONS, rm.rm_id, body=RMPartitions(others).wire()))
        self.broker.send(Envelope(Kind.RM_PARTITIONS, rm.rm_id, body=RMPartitions(tuple(rm.partitions)).wire()))
        return True

    def _resync_owned(self, rm: RMSession, partition: str, epoch: int, owned: PartitionOwned) -> None:
        """The lost partition has a new owner: what was held for it is dropped (the replay covers
        it), its requests are dropped until each stream's replay-start marker, and the RM is told
        (ResyncPartition). A failed load falls back to the whole re-registration."""
        reason, _ = rm.partition_resyncs.pop(partition)
        if owned.error is not None:
            self.resync(rm, f"{reason}; its new worker {owned.worker} could not load it: {owned.error}")
            return
        rm.epochs[partition] = epoch
        rm.seqs[partition] = 0
        dropped = self.held.drop_held(rm, partition)
        rm.open_replay_gate(partition, time.monotonic() + RESYNC_TIMEOUT)
        log.warning("RM %s: partition %s has worker %s in epoch %d; asking the RM to replay it (%d held "
                    "requests dropped: the replay covers them)", rm.rm_id, partition, owned.worker, epoch, dropped)
        for listener in self.listeners:
            listener.registered(rm.rm_id)
        rm.notify(korral_pb2.SchedulerNotice(resyncPartition=korral_pb2.ResyncPartition(
            partition=partition, epoch=epoch, reason=reason)))

    def _resync_overdue(self, rm: RMSession, now: float) -> None:
        """No owner, or no replay markers, in time: the whole re-registration."""
        for partition, (reason, deadline) in list(rm.partition_resyncs.items()):
            if now >= deadline:
                self.resync(rm, f"{reason}; no worker took it within {RESYNC_TIMEOUT:.0f}s")
                return
        for partition, (waiting, deadline) in list(rm.replay_gates.items()):
            if now >= deadline:
                self.resync(rm, f"partition [{rm.rm_id}]{partition}: the RM did not start its replay within "
                                f"{RESYNC_TIMEOUT:.0f}s (no marker on its {', '.join(sorted(waiting))} stream)")
                return

    def broker_reset(self, reason: str) -> None:
        """What was in flight through the old broker may be lost: every RM resyncs (re-registers).
        A registration (or config update) still waiting for its partitions' owners fails at once:
        its RM_REGISTER may have died with the old broker, and the new one assigns nothing for it."""
        for rm in list(self.rms.values()):
            for p in [p for p, w in rm.owned_waiters.items() if not w.done()]:
                rm.owned_waiters.pop(p).set_exception(RegistrationError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"registration of RM failed: {reason} before partition [{rm.rm_id}]{p} had a worker; "
                    "register again"))
            if rm.epochs:
                self.resync(rm, reason)

    def registration_unroutable(self, rm_id: str, reason: str) -> None:
        """No epoch for the RM's registration (Redis unreachable from the broker): it fails now,
        naming the cause, not after ``REGISTER_TIMEOUT`` as "no worker took"."""
        rm = self.rms.get(rm_id)
        for waiter in rm.owned_waiters.values() if rm is not None else ():
            if not waiter.done():
                waiter.set_exception(RegistrationError(
                    grpc.StatusCode.UNAVAILABLE, f"registration of RM failed: {reason}; register again"))

    def resync(self, rm: RMSession, reason: str) -> None:
        """Ask the RM to re-register: a notice on Subscribe, then its streams end UNAVAILABLE."""
        if rm.resync_reason is not None:
            return  # asked already; the re-registration answers every reason at once
        log.warning("asking RM %s to re-register: %s", rm.rm_id, reason)
        for listener in self.listeners:
            listener.resync_started(rm.rm_id, reason)
        rm.resync_reason = reason
        rm.epochs.clear()
        rm.partition_resyncs.clear()
        rm.replay_gates.clear()
        rm.notify(korral_pb2.SchedulerNotice(reRegister=korral_pb2.ReRegisterRequest(reason=reason)))
        rm.close_streams(grpc.StatusCode.UNAVAILABLE, RESYNC_DETAILS + reason)

    # -- config updates ------------------------------------------------------------------

    def active_rm(self, rm_id: str) -> RMSession:
        """The RM's session if it is registered and owns partitions (else FAILED_PRECONDITION) and
        is not asked to re-register (else UNAVAILABLE: a config change waits for that)."""
        rm = self.rms.get(rm_id)
        if rm is not None and rm.resync_reason is not None:
            raise ConfigUpdateError(grpc.StatusCode.UNAVAILABLE,
                                    f"update of configuration failed: RM {rm_id} was asked to re-register "
                                    f"({rm.resync_reason}); nothing changed: retry once it has re-registered")
        if rm is None or not rm.epochs:
            raise ConfigUpdateError(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"RM {rm_id} has no active partitions, make sure it is registered")
        return rm

    async def apply_config(self, req: si_pb2.UpdateConfigurationRequest) -> None:
        """Hot reload: update kept partitions in place, create added ones, remove dropped ones.

        The whole config is validated first; an invalid one changes nothing. Kept partitions are
        updated before anything else, so a partition that refuses the change leaves the
        registration (and every other partition's membership) as it was.
        """
        rm = self.active_rm(req.rmID)
        try:
            config = _read_config(req)
        except ConfigError as exc:
            raise ConfigUpdateError(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"update of configuration failed: RM {req.rmID}: {exc}") from None
        for warning in config.warnings:
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
            raise ConfigUpdateError(grpc.StatusCode.INVALID_ARGUMENT,
                                    "update of configuration failed: " + "; ".join(refused + unreached))
        if unreached:
            raise ConfigUpdateError(grpc.StatusCode.UNAVAILABLE,
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
            raise ConfigUpdateError(grpc.StatusCode.UNAVAILABLE,
                                    f"update of configuration failed: Redis unavailable: {exc}") from None
        before = rm.compatibility()
        rm.registration = reg
        if rm.compatibility() != before:
            rm.log_compatibility(f"by the config update (was {before.describe()})", config)
        await asyncio.gather(*(self.ask_worker(rm, p, Kind.PARTITION_REMOVE, PartitionRemove()) for p in removed))
        for p in removed:
            rm.epochs.pop(p, None)
        loop = asyncio.get_running_loop()
        waiters = {p: loop.create_future() for p in added}
        rm.owned_waiters.update(waiters)
        rm.partitions = names
        self.broker.send(Envelope(Kind.RM_PARTITIONS, req.rmID, body=RMPartitions(tuple(names)).wire()))
        if waiters:
            done, pending = await asyncio.wait(waiters.values(), timeout=REGISTER_TIMEOUT)
            if pending:
                missing = ", ".join(f"[{req.rmID}]{p}" for p, w in waiters.items() if w in pending)
                raise ConfigUpdateError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"configuration updated, but no worker took the new partition(s) {missing} within "
                    f"{REGISTER_TIMEOUT:.0f}s: start more workers; they are assigned as soon as one is idle")
        log.info("RM %s: configuration updated (kept %s, added %s, removed %s)", req.rmID, kept, added, removed)

    async def ask_worker(self, rm: RMSession, partition: str, kind: Kind,
                         body: ConfigUpdate | PartitionRemove) -> Reply:
        """Send a config change to a partition's worker, in the RM's request sequence (it applies
        after the RM's earlier requests), and wait for its reply; failures are a Reply's error."""
        return await self._ask(rm, partition, kind, body, in_sequence=True)

    async def query_worker(self, rm: RMSession, partition: str, query: Query) -> Reply:
        """Ask a partition's worker ``query`` outside the RM's request sequence (a read: nothing
        waits for it), and wait for its reply; failures are a Reply's error."""
        return await self._ask(rm, partition, Kind.QUERY, query, in_sequence=False)

    async def _ask(self, rm: RMSession, partition: str, kind: Kind, body: ConfigUpdate | PartitionRemove | Query,
                   in_sequence: bool) -> Reply:
        epoch = rm.epochs.get(partition)
        if epoch is None:
            return Reply(error=f"partition [{rm.rm_id}]{partition} has no worker", unavailable=True)
        seq = rm.next_seq(partition) if in_sequence else 0  # 0: outside the RM's request sequence
        try:
            return await self.broker.requests.ask(kind, rm.rm_id, partition, epoch, seq, body)
        except NoAnswer as exc:
            return Reply(error=str(exc), unavailable=True)

    # -- lifecycle -----------------------------------------------------------------------

    async def shutdown(self, rm_id: str) -> None:
        """A voluntary shutdown: Running -> Stopped at once."""
        await self._stop(rm_id, "voluntary shutdown")

    async def maintain(self) -> None:
        """``maintain_once`` every ``MAINTAIN_INTERVAL``."""
        while True:
            await asyncio.sleep(MAINTAIN_INTERVAL)
            await self.maintain_once(time.monotonic())

    async def maintain_once(self, now: float) -> None:
        """Answer held requests past their deadline; Stop RMs Paused too long; write back
        registrations Redis lost. ``now``: monotonic seconds."""
        for rm in list(self.rms.values()):
            self.held.expire_held(rm, now)
            self._resync_overdue(rm, now)
            if rm.state is RMState.PAUSED and now - rm.paused_since > self.rm_timeout:
                log.warning("RM %s Paused for over %.0fs: Stopped, its partitions are released",
                            rm.rm_id, self.rm_timeout)
                await self._stop(rm.rm_id, "paused too long")
        await self._restore_registrations()

    async def _restore_registrations(self) -> None:
        try:
            for rm in list(self.rms.values()):
                if rm.registration is not None and await self.store.load(rm.rm_id) is None:
                    log.warning("Redis lost the registration of RM %s: writing it again", rm.rm_id)
                    await self.store.save(rm.registration)
        except Exception as exc:  # Redis down: owned partitions keep scheduling; retry next turn
            log.debug("cannot check registrations in Redis: %s", exc)

    async def _stop(self, rm_id: str, reason: str) -> None:
        rm = self.rms.pop(rm_id, None)
        self.broker.send(Envelope(Kind.RM_UNREGISTER, rm_id, body=RMUnregister(reason).wire()))
        if rm is not None:
            rm.state = RMState.STOPPED
            rm.close_streams(None, f"RM stopped: {reason}")  # None: end the streams normally
        try:
            await self.store.delete(rm_id)
        except Exception as exc:
            log.warning("could not delete the registration of RM %s: %s", rm_id, exc)
