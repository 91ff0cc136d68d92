"""Every change of a registered RM's config, in one place: the RM's own ``UpdateConfiguration``
and re-registration, and an operator's ``korral config apply|rollback`` (REST admin endpoint).

``ConfigChanges.change`` runs one change per RM at a time: a no-op when nothing changes (the
same config overwrites nothing, whatever it was read against), else compare-and-swap on the
checksum ``/ws/v1/config`` shows (``config_checksum``), then
``Proxy.update_configuration`` (the one path that validates and applies a config, exactly as at
registration), then an audit record in Redis (``registry.ConfigRecord``: who, when, old and new
checksum, the text it replaced). A re-registration with another config is recorded too: the
RM's config is its truth, and the history says what it replaced.

Two guards keep a change from losing what the RM holds:

- ``allow_partition_removal=False`` (an operator's change, unless asked for explicitly): a config
  that is empty (the scheduler would serve its default config) or that removes a partition
  holding nodes or applications is refused (``FAILED_PRECONDITION``), naming what would go, as
  each removed partition's worker counts it (``removal_refusal``).
- A partition that comes back after a change removed it gets an empty worker, while the RM still
  holds its nodes and applications (their apps failed ``PartitionRemoved``, later requests were
  refused): the RM is asked to re-register (``Proxy.resync``: a ``ReRegisterRequest``, then its
  streams end ``UNAVAILABLE``, as after a worker loss), so its replay brings them back. Such a
  re-registration keeps the active config when the RM brings the config it sent last
  (``for_registration``): an operator's change survives the recovery rmproxy asked for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import grpc

from common import registry, si_pb2
from common.config import config_checksum, load_config
from common.config.errors import ConfigError
from common.envelope import Kind
from common.messages import Query
from rmproxy.server.errors import RegistrationError
from rmproxy.server.worker_requests import NoAnswer

__all__ = ["ConfigChanges", "ConfigChange", "removal_refusal", "ALLOW_REMOVAL_FLAG", "ALLOW_REMOVAL_PARAM"]

ALLOW_REMOVAL_FLAG = "--allow-partition-removal"  # korral config apply|rollback
ALLOW_REMOVAL_PARAM = "allowPartitionRemoval"  # the admin endpoint's query parameter

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
        self._removed: dict[str, set[str]] = {}  # rmID -> partitions a change removed, whose state the RM keeps
        self._sent: dict[str, str] = {}  # rmID -> checksum of the config the RM itself sent last

    async def change(self, req: si_pb2.UpdateConfigurationRequest, who: str, action: str = "rm-update",
                     expected_checksum: str | None = None, note: str = "",
                     allow_partition_removal: bool = True) -> ConfigChange:
        """Apply ``req`` for its RM; ``RegistrationError`` with
        ``ABORTED`` when ``expected_checksum`` is given and is not the active config's,
        ``FAILED_PRECONDITION`` when ``allow_partition_removal`` is False and the change empties
        the config or removes a partition holding nodes or applications, or with the update's own
        code (an invalid config changes nothing)."""
        async with self._locks.setdefault(req.rmID, asyncio.Lock()):
            rm = self.proxy.active_rm(req.rmID)
            old = rm.registration
            old_text = old.config if old is not None else ""
            old_sum, new_sum = config_checksum(old_text), config_checksum(req.config)
            if old is not None and new_sum == old_sum and dict(req.extraConfig) == old.extra_config \
                    and req.policyGroup == old.policy_group:  # overwrites nothing, even from a stale read
                log.info("RM %s: configuration unchanged (checksum %s), nothing to do", req.rmID, new_sum)
                if action == "rm-update":
                    self._sent[req.rmID] = new_sum
                return ConfigChange(req.rmID, False, old_sum, new_sum)
            if expected_checksum is not None and expected_checksum.strip().upper() != old_sum:
                raise RegistrationError(
                    grpc.StatusCode.ABORTED,
                    f"config of RM {req.rmID} changed since it was read: the active checksum is {old_sum}, "
                    f"the change was made against {expected_checksum.strip().upper() or '(none)'}; read it "
                    "again and retry")
            if not allow_partition_removal:
                refusal = await self._refusal(rm, req.config)
                if refusal:
                    raise RegistrationError(grpc.StatusCode.FAILED_PRECONDITION, refusal)
            before = list(rm.partitions)
            try:
                await self.proxy.update_configuration(req)
            finally:  # also when it failed after the partitions changed (no worker took a new one yet)
                self._partitions_changed(rm, before)
            if action == "rm-update":
                self._sent[req.rmID] = new_sum
            record = await self.record(registry.ConfigRecord(
                req.rmID, who, time.time_ns(), action, old_sum, new_sum, old_text, note))
            warning = "" if record is not None else "applied, but Redis refused its audit record (see rmproxy's log)"
            return ConfigChange(req.rmID, True, old_sum, new_sum, record, warning)

    async def _refusal(self, rm: Any, text: str) -> str:
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

    async def _holding(self, rm: Any, partition: str, text: str) -> dict | str:
        """What ``partition`` holds, as its worker counts it ({"nodes", "applications",
        "allocations"}), or why that is unknown."""
        epoch = rm.epochs.get(partition)
        if epoch is None:
            return "it has no worker now"
        try:
            reply = await self.proxy.requests.ask(Kind.QUERY, rm.rm_id, partition, epoch, 0,
                                                  Query({"what": "whatif", "config": text}))
        except NoAnswer as exc:
            return str(exc)
        if reply.stale:
            return "its worker changed while it was asked"
        if reply.error or not isinstance(reply.data, dict) or reply.data.get("action") != "remove":
            return reply.error or f"its worker answered {reply.data!r}"
        return reply.data

    def _partitions_changed(self, rm: Any, before: list[str]) -> None:
        """Remember the partitions a change removed; ask the RM to re-register when one comes back."""
        removed = self._removed.setdefault(rm.rm_id, set())
        removed.update(p for p in before if p not in rm.partitions)
        restored = sorted(p for p in removed if p in rm.partitions)
        if restored:
            removed.difference_update(restored)
            names = ", ".join(f"[{rm.rm_id}]{p}" for p in restored)
            self.proxy.resync(rm, f"partition {names} was restored by a config change: send its nodes and "
                                  "applications again")

    def for_registration(self, req: Any) -> Any:
        """The registration to apply for ``req``: ``req`` itself, except for a re-registration
        rmproxy asked for (a resync) that brings the config the RM sent last while another one is
        active (an operator's change): then the active config stays, so the recovery does not undo
        the change. A config the RM changed itself is its truth, and replaces the active one."""
        rm = self.proxy.rms.get(req.rmID)
        sent = config_checksum(req.config)
        active = rm.registration if rm is not None else None
        if rm is None or rm.resync_reason is None or active is None or self._sent.get(req.rmID) != sent \
                or config_checksum(active.config) == sent:
            self._sent[req.rmID] = sent
            return req
        log.info("RM %s re-registers as asked with the config it sent last (%s): the active config %s stays",
                 req.rmID, sent, config_checksum(active.config))
        kept = type(req)()
        kept.CopyFrom(req)
        kept.config = active.config
        return kept

    async def registered(self, rm_id: str, old_text: str, new_text: str) -> None:
        """The RM registered again; record it when it brought another config. Its replay rebuilt
        every partition it has now: those are no longer removed ones."""
        rm = self.proxy.rms.get(rm_id)
        if rm is not None and rm_id in self._removed:
            self._removed[rm_id].difference_update(rm.partitions)
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
        """The RM stopped: its lock and what was kept of its partitions go (its history stays in Redis)."""
        self._locks.pop(rm_id, None)
        self._removed.pop(rm_id, None)
        self._sent.pop(rm_id, None)


def removal_refusal(rm_id: str, text: str, removed: dict[str, dict | str]) -> str:
    """Why a change of RM ``rm_id``'s config to ``text`` must be asked for explicitly, or "" when it
    need not: ``text`` is empty (the scheduler would serve its default config), or it removes a
    partition holding nodes or applications. ``removed``: each partition the change removes ->
    its removal what-if ({"nodes", "applications", "allocations"}) or why that is unknown."""
    holding = []
    for name, held in sorted(removed.items()):
        if isinstance(held, str):
            holding.append(f"[{rm_id}]{name} (what it holds is unknown: {held})")
        elif held.get("nodes") or held.get("applications"):
            holding.append(f"[{rm_id}]{name} with {held.get('nodes', 0)} nodes, {held.get('applications', 0)} "
                           f"applications and {held.get('allocations', 0)} allocations")
    reasons = []
    if not text.strip():
        reasons.append("the config is empty: the scheduler would serve its default config (one partition, "
                       "default, with only the root queue)")
    if holding:
        reasons.append(f"it removes partition {'; '.join(holding)}: their applications fail (PartitionRemoved) "
                       "and their nodes and allocations go")
    if not reasons:
        return ""
    return (f"config change of RM {rm_id} refused: {'; and '.join(reasons)}. To make it anyway: korral config "
            f"apply|rollback {ALLOW_REMOVAL_FLAG} (admin endpoint: ?{ALLOW_REMOVAL_PARAM}=true)")
