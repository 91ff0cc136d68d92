"""rmproxy's one path for config changes (rmproxy/server/config_changes.py) without a network:
compare-and-swap, the no-op, the audit records, and the RM's re-registration recorded even by an
rmproxy that did not hold it before."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from common import si_pb2
from common.config import config_checksum
from common.envelope import Kind
from common.messages import RMPartitions
from common.registry import ConfigRecord, Registration
from rmproxy.server.errors import RegistrationError
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
    p, sent = make_proxy()
    p.store = store
    applied: list[str] = []

    async def update_configuration(req):  # the workers' side is tested end to end
        applied.append(req.config)
        p.rms[req.rmID].registration = Registration(req.rmID, config=req.config)

    p.update_configuration = update_configuration  # type: ignore[method-assign]
    from rmproxy.server.rms import RMSession
    p.rms["rm1"] = RMSession("rm1", ["default"], registration=Registration("rm1", config=OLD))
    p.rms["rm1"].epochs["default"] = 1
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
    with pytest.raises(RegistrationError) as refused:
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
    assert sum(isinstance(r, RegistrationError) for r in results) == 1 and len(applied) == 1


def test_a_change_stands_when_redis_refuses_its_record():
    p, applied = proxy_with_rm(AuditedStore(fail=True))
    change = asyncio.run(p.config_changes.change(req(NEW), "RM rm1"))
    assert applied == [NEW] and change.record is None and "audit record" in change.warning


def test_a_re_registration_with_another_config_is_recorded_by_a_fresh_rmproxy():
    store = AuditedStore()
    asyncio.run(store.save(Registration("rm1", config=OLD)))  # registered through another rmproxy
    p, sent = make_proxy()
    p.store = store

    def send(env):  # the broker: every partition is owned at once
        sent.append(env)
        if env.kind is Kind.RM_REGISTER:
            rm = p.rms[env.rm_id]
            for name in RMPartitions.decode(env.body).partitions:
                rm.owned_waiters[name].set_result(1)

    p.send = send  # type: ignore[method-assign]
    asyncio.run(p.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=NEW)))
    (record,) = store.records
    assert (record.action, record.old_config, record.new_checksum) == ("rm-register", OLD, config_checksum(NEW))


# -- partitions removed and restored ----------------------------------------------------------

TWO = OLD.replace("}]}]", "}]}, {name: edge, queues: [{name: root, submitacl: '*'}]}]")
HOLDS = {"action": "remove", "nodes": 3, "applications": 2, "failedApplications": ["a1", "a2"], "allocations": 5}


def proxy_with_two_partitions(store: AuditedStore, edge_holds: object = HOLDS):
    """An RM with partitions default and edge; edge's worker answers the removal what-if with
    ``edge_holds`` (a Reply's data, or an exception raised)."""
    from common.config import load_config
    from common.messages import Reply
    from rmproxy.server.rms import RMSession
    from rmproxy.server.worker_requests import NoAnswer

    p, _ = make_proxy()
    p.store = store
    applied: list[str] = []

    async def update_configuration(req):
        applied.append(req.config)
        rm = p.rms[req.rmID]
        rm.registration = Registration(req.rmID, config=req.config)
        rm.partitions = [x.name for x in load_config(req.config).partitions]
        rm.epochs = {x: rm.epochs.get(x, 7) for x in rm.partitions}

    async def ask(kind, rm_id, partition, epoch, seq, body):
        assert (kind, seq, body.what) == (Kind.QUERY, 0, "whatif")  # outside the RM's request sequence
        if isinstance(edge_holds, Exception):
            raise edge_holds
        return Reply(data=edge_holds if partition == "edge" else {"action": "keep"})

    p.update_configuration = update_configuration  # type: ignore[method-assign]
    p.requests.ask = ask  # type: ignore[method-assign]
    p.rms["rm1"] = RMSession("rm1", ["default", "edge"], registration=Registration("rm1", config=TWO))
    p.rms["rm1"].epochs.update(default=1, edge=2)
    p.config_changes._sent["rm1"] = config_checksum(TWO)  # the RM registered with TWO
    return p, applied, NoAnswer


def test_removing_a_partition_that_holds_nodes_or_apps_is_refused_naming_what_would_go():
    p, applied, _ = proxy_with_two_partitions(AuditedStore())
    with pytest.raises(RegistrationError) as refused:
        asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=False))
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION and applied == []
    assert "it removes partition [rm1]edge with 3 nodes, 2 applications and 5 allocations" in str(refused.value)
    assert "--allow-partition-removal" in str(refused.value) and "allowPartitionRemoval=true" in str(refused.value)
    change = asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=True))
    assert change.changed and applied == [OLD] and p.rms["rm1"].partitions == ["default"]


@pytest.mark.parametrize("text", ["", "  \n"], ids=["empty", "blank"])
def test_an_empty_config_is_refused_even_when_it_removes_nothing_that_holds_anything(text):
    p, applied, _ = proxy_with_two_partitions(AuditedStore(), edge_holds={**HOLDS, "nodes": 0, "applications": 0})
    with pytest.raises(RegistrationError, match="the config is empty: the scheduler would serve its default config"):
        asyncio.run(p.config_changes.change(req(text), "token alice", "apply", allow_partition_removal=False))
    assert applied == []


def test_an_empty_partition_goes_without_asking_and_a_partition_whose_worker_is_silent_is_refused():
    p, applied, no_answer = proxy_with_two_partitions(AuditedStore(), edge_holds={**HOLDS, "nodes": 0,
                                                                                 "applications": 0})
    asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=False))
    assert applied == [OLD]
    p, applied, no_answer = proxy_with_two_partitions(AuditedStore())
    p.requests.ask = lambda *a: (_ for _ in ()).throw(no_answer("partition [rm1]edge: no answer"))  # type: ignore
    with pytest.raises(RegistrationError, match=r"\[rm1\]edge \(what it holds is unknown: partition \[rm1\]edge: "
                                                r"no answer\)"):
        asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=False))


def test_the_rms_own_update_is_not_guarded():
    p, applied, _ = proxy_with_two_partitions(AuditedStore())
    asyncio.run(p.config_changes.change(req(OLD), "RM rm1"))  # its config is its truth
    assert applied == [OLD]


def test_a_restored_partition_makes_the_rm_re_register_and_the_resync_keeps_the_active_config():
    p, applied, _ = proxy_with_two_partitions(AuditedStore())
    rm = p.rms["rm1"]
    notices: asyncio.Queue = asyncio.Queue()
    rm.subscribers.append(notices)
    asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=True))
    assert rm.resync_reason is None  # a removal alone asks nothing of the RM
    restored = TWO.replace("submitacl: '*'}]}]", "submitacl: '*', queues: [{name: x}]}]}]")  # edge back, changed
    assert restored != TWO
    asyncio.run(p.config_changes.change(req(restored), "token alice", "apply"))
    assert rm.resync_reason == ("partition [rm1]edge was restored by a config change: send its nodes and "
                                "applications again")
    assert notices.get_nowait().reRegister.reason == rm.resync_reason
    # the RM re-registers as asked, with the config it sent last: the operator's config stays
    again = p.config_changes.for_registration(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=TWO))
    assert again.config == restored
    # a config the RM changed itself is its truth
    own = p.config_changes.for_registration(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=NEW))
    assert own.config == NEW
