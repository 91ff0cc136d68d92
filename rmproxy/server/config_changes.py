"""Every change of a registered RM's config, in one place: the RM's own ``UpdateConfiguration``
and re-registration, and an operator's ``korral config apply|rollback`` (REST admin endpoint).

``ConfigChanges.change`` runs one change per RM at a time: a no-op when nothing changes (the
same config overwrites nothing, whatever it was read against), else compare-and-swap on the
checksum ``/ws/v1/config`` shows (``config_checksum``), then
``Proxy.update_configuration`` (the one path that validates and applies a config, exactly as at
registration), then an audit record in Redis (``registry.ConfigRecord``: who, when, old and new
checksum, the text it replaced). A re-registration with another config is recorded too: the
RM's config is its truth, and the history says what it replaced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import grpc

from common import registry, si_pb2
from common.config import config_checksum
from rmproxy.server.errors import RegistrationError

__all__ = ["ConfigChanges", "ConfigChange"]

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


class ConfigChanges:
    """The config changes of one rmproxy's RMs (see module doc)."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self._locks: dict[str, asyncio.Lock] = {}  # rmID -> one change at a time

    async def change(self, req: si_pb2.UpdateConfigurationRequest, who: str, action: str = "rm-update",
                     expected_checksum: str | None = None, note: str = "") -> ConfigChange:
        """Apply ``req`` for its RM; ``RegistrationError`` with
        ``ABORTED`` when ``expected_checksum`` is given and is not the active config's, or with
        the update's own code (an invalid config changes nothing)."""
        async with self._locks.setdefault(req.rmID, asyncio.Lock()):
            old = self.proxy.active_rm(req.rmID).registration
            old_text = old.config if old is not None else ""
            old_sum, new_sum = config_checksum(old_text), config_checksum(req.config)
            if old is not None and new_sum == old_sum and dict(req.extraConfig) == old.extra_config \
                    and req.policyGroup == old.policy_group:  # overwrites nothing, even from a stale read
                log.info("RM %s: configuration unchanged (checksum %s), nothing to do", req.rmID, new_sum)
                return ConfigChange(req.rmID, False, old_sum, new_sum)
            if expected_checksum is not None and expected_checksum.strip().upper() != old_sum:
                raise RegistrationError(
                    grpc.StatusCode.ABORTED,
                    f"config of RM {req.rmID} changed since it was read: the active checksum is {old_sum}, "
                    f"the change was made against {expected_checksum.strip().upper() or '(none)'}; read it "
                    "again and retry")
            await self.proxy.update_configuration(req)
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
            return await self.proxy.store.add_config_record(record)
        except Exception as exc:  # redis errors of several kinds; losing the record must not undo the change
            log.warning("RM %s: could not write the config history record (%s by %s): %s",
                        record.rm_id, record.action, record.who, exc)
            return None

    def forget(self, rm_id: str) -> None:
        """The RM stopped: its lock goes (its history stays in Redis)."""
        self._locks.pop(rm_id, None)
