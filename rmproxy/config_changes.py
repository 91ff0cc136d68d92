"""Every change of a registered RM's config, in one place: the RM's own ``UpdateConfiguration``
and re-registration, and an operator's ``korral config apply|rollback`` (REST admin endpoint).

``ConfigChanges.change`` runs one change per RM at a time: a no-op when nothing changes (the
same config overwrites nothing, whatever it was read against), else compare-and-swap on the
checksum ``/ws/v1/config`` shows (``config_checksum``), then
``RMRegistry.apply_config`` (the one path that validates and applies a config, exactly as at
registration), then an audit record in Redis (``registry.ConfigRecord``: who, when, old and new
checksum, the text it replaced). A re-registration with another config is recorded too: the
RM's config is its truth, and the history says what it replaced.

Two guards keep a change from losing what the RM holds:

- ``allow_partition_removal=False`` (an operator's change, unless asked for explicitly): a config
  that is empty (the scheduler would serve its default config) or that removes a partition
  holding nodes or applications is refused (``FAILED_PRECONDITION``), naming what would go, as
  each removed partition's worker counts it (``errors.removal_refusal``).
- A partition that comes back after a change removed it gets an empty worker, while the RM still
  holds its nodes and applications (their apps failed ``PartitionRemoved``, later requests were
  refused): the RM is asked to re-register (``ConfigTarget.resync``: a ``ReRegisterRequest``,
  then its streams end ``UNAVAILABLE``, as after a worker loss), so its replay brings them back.
  Such a re-registration keeps the active config when the RM brings the config it sent last
  (``RMRegistry.register``, from ``RMSession.rm_sent_checksum``, which ``change`` keeps for the
  RM's own updates): an operator's change survives the recovery rmproxy asked for.

It uses the RMs' side through ``ConfigTarget`` and never the other way round: the registry does
not know it exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import AsyncIterator, Protocol

import grpc

from common import registry, si_pb2
from common.config import config_checksum, load_config
from common.config.errors import ConfigError
from common.messages import Query, Reply, WhatIfQuery
from rmproxy.errors import ConfigUpdateError, removal_refusal
from rmproxy.rms import RMSession

__all__ = ["ConfigChanges", "ConfigChange", "ConfigTarget", "ConfigHistory"]

log = logging.getLogger("korral.rmproxy")


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """What a change did: ``changed`` False for a no-op (the same config); ``record`` is the
    audit record written (None when unchanged, or when Redis refused it: ``warning`` says so)."""

    rm_id: str
    changed: bool
    old_checksum: str
    new_checksum: str
    record: registry.ConfigRecord | None = None
    warning: str = ""


class ConfigTarget(Protocol):
    """Where a config change is applied (``RMRegistry``)."""

    def active_rm(self, rm_id: str) -> RMSession:
        """The RM's session, or ``ConfigUpdateError`` when it cannot take a change now."""

    async def apply_config(self, req: si_pb2.UpdateConfigurationRequest) -> None:
        """Validate and apply ``req``; ``ConfigUpdateError`` (nothing changed) otherwise."""

    async def query_worker(self, rm: RMSession, partition: str, query: Query) -> Reply:
        """``query``'s answer from the partition's worker; failures are the Reply's error."""

    def resync(self, rm: RMSession, reason: str) -> None:
        """Ask the RM to re-register (its streams end), for ``reason``."""


class ConfigHistory(Protocol):
    """Where the audit records go (``registry.AsyncRegistryStore``)."""

    async def add_config_record(self, record: registry.ConfigRecord) -> registry.ConfigRecord: ...


class ConfigChanges:
    """The config changes of one rmproxy's RMs (see module doc)."""

    def __init__(self, rms: ConfigTarget, history: ConfigHistory) -> None:
        self.rms = rms
        self.history = history
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}  # rmID -> (its lock, changes waiting or running)
        self._removed: dict[str, set[str]] = {}  # rmID -> partitions a change removed, whose state the RM keeps

    @contextlib.asynccontextmanager
    async def _turn(self, rm_id: str) -> AsyncIterator[None]:
        """One change per RM at a time; an RM's lock is kept while changes of it wait or run."""
        lock, users = self._turns.get(rm_id) or (asyncio.Lock(), 0)
        self._turns[rm_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._turns[rm_id]
            if users == 1:
                del self._turns[rm_id]
            else:
                self._turns[rm_id] = (lock, users - 1)

    async def change(self, req: si_pb2.UpdateConfigurationRequest, who: str, action: str = "rm-update",
                     expected_checksum: str | None = None, note: str = "",
                     allow_partition_removal: bool = True) -> ConfigChange:
        """Apply ``req`` for its RM; ``ConfigUpdateError`` with
        ``ABORTED`` when ``expected_checksum`` is given and is not the active config's,
        ``FAILED_PRECONDITION`` when ``allow_partition_removal`` is False and the change empties
        the config or removes a partition holding nodes or applications, or with the update's own
        code (an invalid config changes nothing)."""
        async with self._turn(req.rmID):
            rm = self.rms.active_rm(req.rmID)
            old = rm.registration
            old_text = old.config if old is not None else ""
            old_sum, new_sum = config_checksum(old_text), config_checksum(req.config)
            if old is not None and new_sum == old_sum and dict(req.extraConfig) == old.extra_config \
                    and req.policyGroup == old.policy_group:  # overwrites nothing, even from a stale read
                log.info("RM %s: configuration unchanged (checksum %s), nothing to do", req.rmID, new_sum)
                if action == "rm-update":
                    rm.rm_sent_checksum = new_sum
                return ConfigChange(req.rmID, False, old_sum, new_sum)
            if expected_checksum is not None and expected_checksum.strip().upper() != old_sum:
                raise ConfigUpdateError(
                    grpc.StatusCode.ABORTED,
                    f"config of RM {req.rmID} changed since it was read: the active checksum is {old_sum}, "
                    f"the change was made against {expected_checksum.strip().upper() or '(none)'}; read it "
                    "again and retry")
            if not allow_partition_removal:
                refusal = await self._refusal(rm, req.config)
                if refusal:
                    raise ConfigUpdateError(grpc.StatusCode.FAILED_PRECONDITION, refusal)
            before = list(rm.partitions)
            try:
                await self.rms.apply_config(req)
            finally:  # also when it failed after the partitions changed (no worker took a new one yet)
                self._partitions_changed(rm, before)
            if action == "rm-update":
                rm.rm_sent_checksum = new_sum
            record = await self.record(registry.ConfigRecord(
                req.rmID, who, time.time_ns(), action, old_sum, new_sum, old_text, note))
            warning = "" if record is not None else "applied, but Redis refused its audit record (see rmproxy's log)"
            return ConfigChange(req.rmID, True, old_sum, new_sum, record, warning)

    async def _refusal(self, rm: RMSession, text: str) -> str:
        """``removal_refusal`` of ``text`` for the RM's live partitions, each removed one counted by
        its worker (the dry run's removal what-if); "" when the config is invalid (the update
        itself refuses it, naming the fault)."""
        try:
            names = {p.name for p in load_config(text).partitions}
        except ConfigError:
            return ""
        removed = [p for p in rm.partitions if p not in names]
        answers = await asyncio.gather(*(self._holding(rm, p, text) for p in removed))
        return removal_refusal(rm.rm_id, text, dict(zip(removed, answers)))

    async def _holding(self, rm: RMSession, partition: str, text: str) -> dict | str:
        """What ``partition`` holds, as its worker counts it ({"nodes", "applications",
        "allocations"}), or why that is unknown."""
        reply = await self.rms.query_worker(rm, partition, WhatIfQuery(config=text))
        if reply.stale:
            return "its worker changed while it was asked"
        if reply.error or not isinstance(reply.data, dict) or reply.data.get("action") != "remove":
            return reply.error or f"its worker answered {reply.data!r}"
        return reply.data

    def _partitions_changed(self, rm: RMSession, before: list[str]) -> None:
        """Remember the partitions a change removed; ask the RM to re-register when one comes back."""
        removed = self._removed.setdefault(rm.rm_id, set())
        removed.update(p for p in before if p not in rm.partitions)
        restored = sorted(p for p in removed if p in rm.partitions)
        removed.difference_update(restored)
        if not removed:
            del self._removed[rm.rm_id]
        if restored:
            names = ", ".join(f"[{rm.rm_id}]{p}" for p in restored)
            self.rms.resync(rm, f"partition {names} was restored by a config change: send its nodes and "
                                "applications again")

    async def registered(self, rm: RMSession, replaced: registry.Registration | None) -> None:
        """The RM registered (``rm``: its new session; ``replaced``: the registration before it,
        None when none was known). Its replay rebuilt every partition it has now: those are no
        longer removed ones. A registration with another config is recorded."""
        removed = self._removed.get(rm.rm_id)
        if removed is not None:
            removed.difference_update(rm.partitions)
            if not removed:
                del self._removed[rm.rm_id]
        if replaced is None or rm.registration is None:
            return
        old_sum, new_sum = config_checksum(replaced.config), config_checksum(rm.registration.config)
        if old_sum != new_sum:
            await self.record(registry.ConfigRecord(
                rm.rm_id, f"RM {rm.rm_id}", time.time_ns(), "rm-register", old_sum, new_sum, replaced.config,
                "the RM registered with another config: the RM's config is the truth from now on"))

    async def record(self, record: registry.ConfigRecord) -> registry.ConfigRecord | None:
        """Write one audit record; None (logged) when Redis refuses: the change stands anyway."""
        try:
            return await self.history.add_config_record(record)
        except Exception as exc:  # redis errors of several kinds; losing the record must not undo the change
            log.warning("RM %s: could not write the config history record (%s by %s): %s",
                        record.rm_id, record.action, record.who, exc)
            return None
