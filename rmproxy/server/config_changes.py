"""Every change of a registered RM's config, in one place: the RM's own ``UpdateConfiguration``
and re-registration, and an operator's ``korral config apply|rollback`` (REST admin endpoint).

``ConfigChanges.change`` runs one change per RM at a time: a no-op when nothing changes (the
same config overwrites nothing, whatever it was read against), else compare-and-swap on the
checksum ``/ws/v1/config`` shows (``config_checksum``), then
``RMRegistry.apply_config`` (the one path that validates and applies a config, exactly as at
registration), then an audit record in Redis (``registry.ConfigRecord``: who, when, old and new
checksum, the text it replaced). A re-registration with another config is recorded too: the
RM's config is its truth, and the history says what it replaced.

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
from common.config import config_checksum
from rmproxy.server.errors import ConfigUpdateError
from rmproxy.server.rms import RMSession

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


class ConfigHistory(Protocol):
    """Where the audit records go (``registry.AsyncRegistryStore``)."""

    async def add_config_record(self, record: registry.ConfigRecord) -> registry.ConfigRecord: ...


class ConfigChanges:
    """The config changes of one rmproxy's RMs (see module doc)."""

    def __init__(self, rms: ConfigTarget, history: ConfigHistory) -> None:
        self.rms = rms
        self.history = history
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}  # rmID -> (its lock, changes waiting or running)

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
                     expected_checksum: str | None = None, note: str = "") -> ConfigChange:
        """Apply ``req`` for its RM; ``ConfigUpdateError`` with
        ``ABORTED`` when ``expected_checksum`` is given and is not the active config's, or with
        the update's own code (an invalid config changes nothing)."""
        async with self._turn(req.rmID):
            old = self.rms.active_rm(req.rmID).registration
            old_text = old.config if old is not None else ""
            old_sum, new_sum = config_checksum(old_text), config_checksum(req.config)
            if old is not None and new_sum == old_sum and dict(req.extraConfig) == old.extra_config \
                    and req.policyGroup == old.policy_group:  # overwrites nothing, even from a stale read
                log.info("RM %s: configuration unchanged (checksum %s), nothing to do", req.rmID, new_sum)
                return ConfigChange(req.rmID, False, old_sum, new_sum)
            if expected_checksum is not None and expected_checksum.strip().upper() != old_sum:
                raise ConfigUpdateError(
                    grpc.StatusCode.ABORTED,
                    f"config of RM {req.rmID} changed since it was read: the active checksum is {old_sum}, "
                    f"the change was made against {expected_checksum.strip().upper() or '(none)'}; read it "
                    "again and retry")
            await self.rms.apply_config(req)
            record = await self.record(registry.ConfigRecord(
                req.rmID, who, time.time_ns(), action, old_sum, new_sum, old_text, note))
            warning = "" if record is not None else "applied, but Redis refused its audit record (see rmproxy's log)"
            return ConfigChange(req.rmID, True, old_sum, new_sum, record, warning)

    async def registered(self, rm_id: str, old_text: str, new_text: str) -> None:
        """The RM registered again; record it when it brought another config."""
        old_sum, new_sum = config_checksum(old_text), config_checksum(new_text)
        if old_sum != new_sum:
            await self.record(registry.ConfigRecord(
                rm_id, f"RM {rm_id}", time.time_ns(), "rm-register", old_sum, new_sum, old_text,
                "the RM registered with another config: the RM's config is the truth from now on"))

    async def record(self, record: registry.ConfigRecord) -> registry.ConfigRecord | None:
        """Write one audit record; None (logged) when Redis refuses: the change stands anyway."""
        try:
            return await self.history.add_config_record(record)
        except Exception as exc:  # redis errors of several kinds; losing the record must not undo the change
            log.warning("RM %s: could not write the config history record (%s by %s): %s",
                        record.rm_id, record.action, record.who, exc)
            return None
