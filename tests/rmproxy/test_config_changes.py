"""rmproxy's one path for config changes (rmproxy/server/config_changes.py) without a network:
compare-and-swap, the no-op, the audit records, one change per RM at a time, and the RM's
re-registration recorded (by the gRPC service) even by an rmproxy that did not hold it before."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from common import si_pb2
from common.config import config_checksum
from common.envelope import Kind
from common.messages import RMPartitions
from common.registry import ConfigRecord, Registration
from rmproxy.server.errors import ConfigUpdateError
from rmproxy.server.rms import RMSession
from rmproxy.server.service import SchedulerService
from tests.rmproxy.test_proxy_lifecycle import MemoryStore, make_proxy

OLD = "partitions: [{name: default, queues: [{name: root, submitacl: '*'}]}]\n"
NEW = "partitions: [{name: default, queues: [{name: root, submitacl: '*', queues: [{name: a}]}]}]\n"


class AuditedStore(MemoryStore):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.records: list[ConfigRecord] = []
        self.fail = fail

    async def add_config_record(self, record: ConfigRecord) -> ConfigRecord:
        if self.fail:
            raise ConnectionError("Redis is down")
        self.records.append(record)
        return record


def proxy_with_rm(store: AuditedStore):
    p, sent = make_proxy(store)
    applied: list[str] = []

    async def apply_config(req):  # the workers' side is tested end to end
        applied.append(req.config)
        await asyncio.sleep(0)  # a change takes a while: another one waits meanwhile
        p.registry.rms[req.rmID].registration = Registration(req.rmID, config=req.config)

    p.registry.apply_config = apply_config  # type: ignore[method-assign]
    p.registry.rms["rm1"] = RMSession("rm1", ["default"], registration=Registration("rm1", config=OLD))
    p.registry.rms["rm1"].epochs["default"] = 1
    return p, applied


def req(config: str) -> si_pb2.UpdateConfigurationRequest:
    return si_pb2.UpdateConfigurationRequest(rmID="rm1", config=config)


def test_a_change_against_the_active_checksum_is_applied_and_recorded():
    store = AuditedStore()
    p, applied = proxy_with_rm(store)
    change = asyncio.run(p.config_changes.change(req(NEW), "token alice", "apply", config_checksum(OLD)))
    assert applied == [NEW] and change.changed and change.record is not None
    (record,) = store.records
    assert (record.who, record.action, record.old_checksum, record.new_checksum, record.old_config) == \
        ("token alice", "apply", config_checksum(OLD), config_checksum(NEW), OLD)


def test_a_stale_checksum_is_refused_and_the_same_config_is_a_no_op():
    store = AuditedStore()
    p, applied = proxy_with_rm(store)
    with pytest.raises(ConfigUpdateError) as refused:
        asyncio.run(p.config_changes.change(req(NEW), "token alice", "apply", "0" * 64))
    assert refused.value.code is grpc.StatusCode.ABORTED and config_checksum(OLD) in str(refused.value)
    same = asyncio.run(p.config_changes.change(req(OLD + "checksum: STALE\n"), "token bob", "apply", "0" * 64))
    assert not same.changed and applied == [] and store.records == []


def test_concurrent_changes_against_one_checksum_one_wins():
    store = AuditedStore()
    p, applied = proxy_with_rm(store)

    async def both():
        return await asyncio.gather(*(p.config_changes.change(req(NEW.replace("name: a", f"name: {q}")), q, "apply",
                                                              config_checksum(OLD)) for q in ("a", "b")),
                                    return_exceptions=True)

    results = asyncio.run(both())
    assert sum(isinstance(r, ConfigUpdateError) for r in results) == 1 and len(applied) == 1
    assert p.config_changes._turns == {}  # nothing kept once no change waits


def test_a_change_stands_when_redis_refuses_its_record():
    p, applied = proxy_with_rm(AuditedStore(fail=True))
    change = asyncio.run(p.config_changes.change(req(NEW), "RM rm1"))
    assert applied == [NEW] and change.record is None and "audit record" in change.warning


def test_a_re_registration_with_another_config_is_recorded_by_a_fresh_rmproxy():
    store = AuditedStore()
    asyncio.run(store.save(Registration("rm1", config=OLD)))  # registered through another rmproxy
    p, sent = make_proxy(store)

    def send(env):  # the broker: every partition is owned at once
        sent.append(env)
        if env.kind is Kind.RM_REGISTER:
            rm = p.registry.rms[env.rm_id]
            for name in RMPartitions.decode(env.body).partitions:
                rm.owned_waiters[name].set_result(1)

    p.broker.send = send  # type: ignore[method-assign]
    service = SchedulerService(p.registry, p.router, p.config_changes)
    asyncio.run(service.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=NEW), context=None))
    (record,) = store.records
    assert (record.action, record.old_config, record.new_checksum) == ("rm-register", OLD, config_checksum(NEW))
