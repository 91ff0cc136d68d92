"""What Redis keeps: RM registrations and partition epochs. Never allocations.

Keys (all under ``korral:``):
- ``korral:rm:<rmID>`` hash: rmID, version, policyGroup, config, extraConfig (JSON),
  buildInfo (JSON), registeredAt (ns) — written by rmproxy on registration and
  config update, read by a worker that takes over a partition.
- ``korral:rms`` set of registered rmIDs.
- ``korral:epoch:<rmID>:<partition>`` integer, incremented by the broker each
  time the partition gets an owner (including a re-registration).
- ``korral:confighistory:<rmID>`` list of JSON ``ConfigRecord``s, oldest first, at most
  ``CONFIG_HISTORY_KEEP``: every change of the RM's config (an admin's apply or rollback, the
  RM's own update or re-registration with another config), with the text it replaced.
  ``korral:configseq:<rmID>`` numbers them. Kept when the RM stops (it is an audit trail).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import redis
import redis.asyncio as aioredis

__all__ = ["Registration", "ConfigRecord", "RegistryStore", "AsyncRegistryStore", "connect", "connect_async",
           "rm_key", "epoch_key", "config_history_key", "PREFIX", "RMS_SET", "CONFIG_HISTORY_KEEP"]

PREFIX = "korral:"
RMS_SET = PREFIX + "rms"
CONFIG_HISTORY_KEEP = 50  # config changes kept per RM (each holds the text it replaced)


def rm_key(rm_id: str) -> str:
    return f"{PREFIX}rm:{rm_id}"


def epoch_key(rm_id: str, partition: str) -> str:
    return f"{PREFIX}epoch:{rm_id}:{partition}"


def config_history_key(rm_id: str) -> str:
    return f"{PREFIX}confighistory:{rm_id}"


def _config_seq_key(rm_id: str) -> str:
    return f"{PREFIX}configseq:{rm_id}"


@dataclass(frozen=True, slots=True)
class Registration:
    rm_id: str
    version: str = ""
    policy_group: str = ""
    config: str = ""
    extra_config: dict[str, str] = field(default_factory=dict)
    build_info: dict[str, str] = field(default_factory=dict)
    registered_at_ns: int = 0

    def to_hash(self) -> dict[str, str]:
        return {
            "rmID": self.rm_id,
            "version": self.version,
            "policyGroup": self.policy_group,
            "config": self.config,
            "extraConfig": json.dumps(self.extra_config, sort_keys=True),
            "buildInfo": json.dumps(self.build_info, sort_keys=True),
            "registeredAt": str(self.registered_at_ns),
        }

    @classmethod
    def from_hash(cls, h: dict[str, str]) -> "Registration":
        return cls(
            rm_id=h["rmID"],
            version=h.get("version", ""),
            policy_group=h.get("policyGroup", ""),
            config=h.get("config", ""),
            extra_config=json.loads(h.get("extraConfig") or "{}"),
            build_info=json.loads(h.get("buildInfo") or "{}"),
            registered_at_ns=int(h.get("registeredAt") or 0),
        )


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """One change of an RM's config: who made it, when (ns), how (``action``: ``apply``,
    ``rollback``, ``rm-update``, ``rm-register``), the checksums before and after, and the config
    text it replaced (what ``korral config rollback`` restores). ``id`` counts per RM from 1."""

    rm_id: str
    who: str
    at_ns: int
    action: str
    old_checksum: str
    new_checksum: str
    old_config: str
    note: str = ""
    id: int = 0

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "rmID": self.rm_id, "who": self.who, "time": self.at_ns,
                           "action": self.action, "oldChecksum": self.old_checksum,
                           "newChecksum": self.new_checksum, "oldConfig": self.old_config, "note": self.note})

    @classmethod
    def from_json(cls, raw: str) -> "ConfigRecord":
        d = json.loads(raw)
        return cls(rm_id=d["rmID"], who=d["who"], at_ns=int(d["time"]), action=d["action"],
                   old_checksum=d["oldChecksum"], new_checksum=d["newChecksum"], old_config=d["oldConfig"],
                   note=d.get("note", ""), id=int(d["id"]))


def connect(url: str, timeout: float = 2.0) -> redis.Redis:
    """A sync client with short timeouts (``timeout`` seconds to connect, and for each reply): a
    dead Redis must not hang a process loop."""
    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout, socket_connect_timeout=timeout)


def connect_async(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=2.0, socket_connect_timeout=2.0)


class RegistryStore:
    """Blocking access, for the broker and worker loops."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def load(self, rm_id: str) -> Registration | None:
        h = self.client.hgetall(rm_key(rm_id))
        return Registration.from_hash(h) if h else None

    def next_epoch(self, rm_id: str, partition: str, floor: int = 0) -> int:
        """An epoch greater than floor (the last one the broker saw), even if Redis lost its counter."""
        epoch = int(self.client.incr(epoch_key(rm_id, partition)))
        if epoch <= floor:
            epoch = floor + 1
            self.client.set(epoch_key(rm_id, partition), epoch)
        return epoch

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False


class AsyncRegistryStore:
    """asyncio access, for rmproxy."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    async def save(self, reg: Registration) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(rm_key(reg.rm_id))
            pipe.hset(rm_key(reg.rm_id), mapping=reg.to_hash())
            pipe.sadd(RMS_SET, reg.rm_id)
            await pipe.execute()

    async def load(self, rm_id: str) -> Registration | None:
        h = await self.client.hgetall(rm_key(rm_id))
        return Registration.from_hash(h) if h else None

    async def add_config_record(self, record: ConfigRecord, keep: int = CONFIG_HISTORY_KEEP) -> ConfigRecord:
        """Append ``record`` to the RM's config history (the oldest beyond ``keep`` are dropped);
        returns it with its number."""
        number = int(await self.client.incr(_config_seq_key(record.rm_id)))
        numbered = replace(record, id=number)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.rpush(config_history_key(record.rm_id), numbered.to_json())
            pipe.ltrim(config_history_key(record.rm_id), -keep, -1)
            await pipe.execute()
        return numbered

    async def config_history(self, rm_id: str) -> list[ConfigRecord]:
        """The RM's config changes, oldest first."""
        return [ConfigRecord.from_json(raw) for raw in await self.client.lrange(config_history_key(rm_id), 0, -1)]

    async def delete(self, rm_id: str) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(rm_key(rm_id))
            pipe.srem(RMS_SET, rm_id)
            await pipe.execute()

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (redis.RedisError, OSError):
            return False
