"""rmproxy's one path for config changes (rmproxy/config_changes.py) without a network:
compare-and-swap, the no-op, the audit records, one change per RM at a time, the RM's
re-registration recorded (by the gRPC service) even by an rmproxy that did not hold it before,
the refusal of an operator's change that removes a partition holding nodes or applications, and
the resync of a restored partition (whose re-registration keeps the operator's config)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from common import si_pb2
from common.config import config_checksum, load_config
from common.envelope import Kind
from common.messages import PartitionOwned, Reply, RMPartitions
from common.registry import ConfigRecord, Registration
from rmproxy.errors import ConfigUpdateError
from rmproxy.rms import RMSession
from rmproxy.service import SchedulerService
from rmproxy.worker_requests import NoAnswer
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


def owning_broker(p, sent: list) -> None:
    """The broker as the registry sees it: every partition of a registration is owned at once."""

    def send(env):
        sent.append(env)
        if env.kind is Kind.RM_REGISTER:
            for epoch, name in enumerate(RMPartitions.decode(env.body).partitions, 1):
                p.registry.partition_owned(env.rm_id, name, epoch, PartitionOwned("w"))

    p.broker.send = send  # type: ignore[method-assign]


def test_a_re_registration_with_another_config_is_recorded_by_a_fresh_rmproxy():
    store = AuditedStore()
    asyncio.run(store.save(Registration("rm1", config=OLD)))  # registered through another rmproxy
    p, sent = make_proxy(store)
    owning_broker(p, sent)
    service = SchedulerService(p.registry, p.router, p.config_changes)
    asyncio.run(service.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=NEW), context=None))
    (record,) = store.records
    assert (record.action, record.old_config, record.new_checksum) == ("rm-register", OLD, config_checksum(NEW))


# -- partitions removed and restored ----------------------------------------------------------

TWO = OLD.replace("}]}]", "}]}, {name: edge, queues: [{name: root, submitacl: '*'}]}]")
HOLDS = {"action": "remove", "nodes": 3, "applications": 2, "failedApplications": ["a1", "a2"], "allocations": 5}


def proxy_with_two_partitions(store: AuditedStore, edge_holds: object = HOLDS):
    """An RM registered with partitions default and edge; edge's worker answers the removal
    what-if with ``edge_holds`` (a Reply's data, or an exception raised)."""
    p, sent = make_proxy(store)
    owning_broker(p, sent)
    applied: list[str] = []

    async def apply_config(req):  # the workers' side is tested end to end
        applied.append(req.config)
        rm = p.registry.rms[req.rmID]
        rm.registration = Registration(req.rmID, config=req.config)
        rm.partitions = [x.name for x in load_config(req.config).partitions]
        rm.epochs = {x: rm.epochs.get(x, 7) for x in rm.partitions}

    async def ask(kind, rm_id, partition, epoch, seq, body):
        assert (kind, seq, body.what) == (Kind.QUERY, 0, "whatif")  # outside the RM's request sequence
        if isinstance(edge_holds, Exception):
            raise edge_holds
        return Reply(data=edge_holds if partition == "edge" else {"action": "keep"})

    p.registry.apply_config = apply_config  # type: ignore[method-assign]
    p.broker.requests.ask = ask  # type: ignore[method-assign]
    asyncio.run(p.registry.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=TWO)))
    return p, applied


def test_removing_a_partition_that_holds_nodes_or_apps_is_refused_naming_what_would_go():
    p, applied = proxy_with_two_partitions(AuditedStore())
    with pytest.raises(ConfigUpdateError) as refused:
        asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=False))
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION and applied == []
    assert "it removes partition [rm1]edge with 3 nodes, 2 applications and 5 allocations" in str(refused.value)
    assert "--allow-partition-removal" in str(refused.value) and "allowPartitionRemoval=true" in str(refused.value)
    change = asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=True))
    assert change.changed and applied == [OLD] and p.registry.rms["rm1"].partitions == ["default"]


@pytest.mark.parametrize("text", ["", "  \n"], ids=["empty", "blank"])
def test_an_empty_config_is_refused_even_when_it_removes_nothing_that_holds_anything(text):
    p, applied = proxy_with_two_partitions(AuditedStore(), edge_holds={**HOLDS, "nodes": 0, "applications": 0})
    with pytest.raises(ConfigUpdateError, match="the config is empty: the scheduler would serve its default config"):
        asyncio.run(p.config_changes.change(req(text), "token alice", "apply", allow_partition_removal=False))
    assert applied == []


def test_an_empty_partition_goes_without_asking_and_a_partition_whose_worker_is_silent_is_refused():
    p, applied = proxy_with_two_partitions(AuditedStore(), edge_holds={**HOLDS, "nodes": 0, "applications": 0})
    asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=False))
    assert applied == [OLD]
    p, applied = proxy_with_two_partitions(AuditedStore(), edge_holds=NoAnswer("partition [rm1]edge: no answer"))
    with pytest.raises(ConfigUpdateError, match=r"\[rm1\]edge \(what it holds is unknown: partition \[rm1\]edge: "
                                                r"no answer\)"):
        asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=False))
    assert applied == []


def test_the_rms_own_update_is_not_guarded():
    p, applied = proxy_with_two_partitions(AuditedStore())
    asyncio.run(p.config_changes.change(req(OLD), "RM rm1"))  # its config is its truth
    assert applied == [OLD]


RESTORED = TWO.replace("submitacl: '*'}]}]", "submitacl: '*', queues: [{name: x}]}]}]")  # edge back, changed


def test_a_restored_partition_makes_the_rm_re_register_and_the_resync_keeps_the_active_config():
    store = AuditedStore()
    p, applied = proxy_with_two_partitions(store)
    service = SchedulerService(p.registry, p.router, p.config_changes)
    rm = p.registry.rms["rm1"]
    notices: asyncio.Queue = asyncio.Queue()
    rm.subscribers.append(notices)
    asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=True))
    assert rm.resync_reason is None  # a removal alone asks nothing of the RM
    assert RESTORED != TWO
    asyncio.run(p.config_changes.change(req(RESTORED), "token alice", "apply"))
    assert rm.resync_reason == ("partition [rm1]edge was restored by a config change: send its nodes and "
                                "applications again")
    assert notices.get_nowait().reRegister.reason == rm.resync_reason
    # the RM re-registers as asked, with the config it sent last: the operator's config stays,
    # and the history has nothing to record
    asyncio.run(service.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=TWO), context=None))
    again = p.registry.rms["rm1"]
    assert again.registration.config == RESTORED and again.partitions == ["default", "edge"]
    assert again.rm_sent_checksum == config_checksum(TWO)
    assert [r.action for r in store.records] == ["apply", "apply"]
    # a config the RM changed itself is its truth, even when rmproxy asked it to re-register
    p.registry.resync(again, "a worker was lost")
    asyncio.run(service.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=NEW), context=None))
    assert p.registry.rms["rm1"].registration.config == NEW and store.records[-1].action == "rm-register"


def test_a_partition_the_rms_re_registration_rebuilt_is_not_restored_again():
    p, applied = proxy_with_two_partitions(AuditedStore())
    service = SchedulerService(p.registry, p.router, p.config_changes)
    asyncio.run(p.config_changes.change(req(OLD), "token alice", "apply", allow_partition_removal=True))
    # the RM registers again by itself, with edge: its replay rebuilds edge
    asyncio.run(service.register(si_pb2.RegisterResourceManagerRequest(rmID="rm1", config=TWO), context=None))
    rm = p.registry.rms["rm1"]
    assert rm.registration.config == TWO  # not a re-registration rmproxy asked for: the RM's config
    asyncio.run(p.config_changes.change(req(RESTORED), "token alice", "apply"))  # edge kept, not restored
    assert applied == [OLD, RESTORED] and rm.resync_reason is None
