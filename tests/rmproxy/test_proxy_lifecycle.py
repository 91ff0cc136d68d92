"""rmproxy's RM lifecycle without a network: Paused RMs are Stopped after --rm-timeout, lost
registrations are written back, requests for a partition without a worker are held then answered."""

from __future__ import annotations

import asyncio
import time

from common import si_internal_pb2 as si, si_pb2
from common.envelope import Kind
from common.registry import Registration
from rmproxy.proxy import Proxy
from rmproxy.rms import RMSession, RMState
from tests.si_builders import internal


class MemoryStore:
    """The registry's async interface over a dict (the edge of what these tests are about)."""

    def __init__(self) -> None:
        self.regs: dict[str, Registration] = {}

    async def save(self, reg: Registration) -> None:
        self.regs[reg.rm_id] = reg

    async def load(self, rm_id: str) -> Registration | None:
        return self.regs.get(rm_id)

    async def delete(self, rm_id: str) -> None:
        self.regs.pop(rm_id, None)

    async def ping(self) -> bool:
        return True


def make_proxy(store=None, **kw) -> tuple[Proxy, list]:
    """An rmproxy whose envelopes to the broker are collected in the list returned with it."""
    sent: list = []
    p = Proxy("tcp://127.0.0.1:1", store if store is not None else MemoryStore(), name="t", **kw)
    p.broker.send = sent.append  # type: ignore[method-assign]
    return p, sent


def run_maintain_once(p: Proxy) -> None:
    asyncio.run(p.registry.maintain_once(time.monotonic()))


def test_paused_rm_is_stopped_after_the_timeout_and_its_partitions_released():
    p, sent = make_proxy(rm_timeout=1.0)
    rm = RMSession("rm-1", ["default"], state=RMState.PAUSED, paused_since=time.monotonic() - 5)
    p.registry.rms["rm-1"] = rm
    asyncio.run(p.store.save(Registration("rm-1")))
    run_maintain_once(p)
    assert "rm-1" not in p.registry.rms and rm.state is RMState.STOPPED
    assert [e.kind for e in sent] == [Kind.RM_UNREGISTER]
    assert asyncio.run(p.store.load("rm-1")) is None


def test_paused_rm_within_the_timeout_stays():
    p, sent = make_proxy(rm_timeout=60.0)
    p.registry.rms["rm-1"] = RMSession("rm-1", ["default"], state=RMState.PAUSED, paused_since=time.monotonic())
    run_maintain_once(p)
    assert p.registry.rms["rm-1"].state is RMState.PAUSED and sent == []


def test_registration_lost_by_redis_is_written_back():
    p, _ = make_proxy()
    reg = Registration("rm-1", config="partitions: []")
    p.registry.rms["rm-1"] = RMSession("rm-1", ["default"], registration=reg)
    run_maintain_once(p)
    assert asyncio.run(p.store.load("rm-1")) == reg


def test_request_without_a_worker_is_held_then_answered_with_the_reason():
    p, sent = make_proxy(hold_seconds=0.0)
    rm = RMSession("rm-1", ["default"])  # no epoch: no worker owns the partition
    p.registry.rms["rm-1"] = rm
    p.router.request("node", rm, si.NodeRequest(rmID="rm-1", nodes=[internal.node("n1")]))
    assert sent == [] and len(rm.held) == 1
    run_maintain_once(p)
    [answer] = rm.buffers["node"]
    rejected = si_pb2.NodeResponse.FromString(answer).rejected[0]
    assert rejected.nodeID == "n1" and "partition [rm-1]default has had no worker" in rejected.reason
    assert "start more workers" in rejected.reason


def test_held_requests_go_out_when_the_partition_gets_an_owner_without_a_resync():
    p, sent = make_proxy()
    rm = RMSession("rm-1", ["default"])
    p.registry.rms["rm-1"] = rm
    p.router.request("node", rm, si.NodeRequest(rmID="rm-1", nodes=[internal.node("n1")]))

    async def own():
        rm.owned_waiters["default"] = asyncio.get_running_loop().create_future()
        from common.envelope import Envelope

        p.broker._on_owned(Envelope(Kind.PARTITION_OWNED, "rm-1", "default", 3, 0, {"worker": "w", "error": None}))

    asyncio.run(own())
    assert [(e.kind, e.epoch) for e in sent] == [(Kind.SI_NODE, 3)] and not rm.held
