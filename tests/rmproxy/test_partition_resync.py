"""One lost partition rebuilt alone (docs/architecture.md, Recovery): an RM that declared
``partitionResync`` gets a ResyncPartition notice instead of a ReRegisterRequest, its streams stay
open, and the partition's requests before each stream's replay-start marker are dropped; an RM
that did not declare it, and every failure, get the whole re-registration."""

from __future__ import annotations

import asyncio
import time

import pytest

from common import si_internal_pb2 as si
from common.envelope import Envelope, Kind
from common.messages import PartitionLost, PartitionOwned, RMPartitions
from rmproxy.broker_side import BrokerSide
from rmproxy.rm_registry import RESYNC_TIMEOUT
from rmproxy.rms import Close, RMSession
from tests.rmproxy.test_proxy_lifecycle import make_proxy
from tests.si_builders import internal


@pytest.fixture(autouse=True)
def _connected(monkeypatch):
    monkeypatch.setattr(BrokerSide, "connected", property(lambda self: True))


def _rm(p, capable: bool) -> tuple[RMSession, asyncio.Queue, asyncio.Queue]:
    """RM rm-1 with partitions a (epoch 3) and b (epoch 4), one subscriber and a node stream."""
    rm = RMSession("rm-1", ["a", "b"], epochs={"a": 3, "b": 4})
    notices, node_stream = asyncio.Queue(), asyncio.Queue()
    rm.subscribers.append(notices)
    if capable:
        rm.resync_capable.append(notices)
    rm.streams["node"] = node_stream
    p.registry.rms["rm-1"] = rm
    return rm, notices, node_stream


def _lose(p, partition: str = "a", epoch: int = 3) -> None:
    p.broker._on_lost(Envelope(Kind.PARTITION_LOST, "rm-1", partition, epoch, 0,
                               PartitionLost("its worker w1 is gone (killed)", "w1").wire()))


def _own(p, partition: str = "a", epoch: int = 7, error: str | None = None) -> None:
    p.broker._on_owned(Envelope(Kind.PARTITION_OWNED, "rm-1", partition, epoch, 0,
                                PartitionOwned("w2", error).wire()))


def _nodes(rm_id: str = "rm-1", *ids_partitions: tuple[str, str]) -> si.NodeRequest:
    return si.NodeRequest(rmID=rm_id, nodes=[internal.node(n, part) for n, part in ids_partitions])


def _routed(sent) -> list[tuple]:
    return [(e.kind, e.partition, e.epoch) for e in sent if e.kind is Kind.SI_NODE]


def test_a_capable_rm_gets_the_partition_rebuilt_alone():
    p, sent = make_proxy()
    rm, notices, node_stream = _rm(p, capable=True)
    heard: list[tuple] = []

    class Listener:
        def resync_started(self, rm_id, reason):
            heard.append(("started", rm_id, reason))

        def registered(self, rm_id):
            heard.append(("done", rm_id))

    p.registry.listeners.append(Listener())
    _lose(p)
    # the partition is dropped from the RM's partitions and added back: the broker gives it an idle worker
    assert [(e.kind, RMPartitions.decode(e.body).partitions) for e in sent] == [
        (Kind.RM_PARTITIONS, ("b",)), (Kind.RM_PARTITIONS, ("a", "b"))]
    assert rm.resync_reason is None and notices.empty() and node_stream.empty()  # nothing asked yet
    sent.clear()
    # while it has no owner: a's part is held, b's goes on
    p.router.request("node", rm, _nodes("rm-1", ("n1", "a"), ("n2", "b")))
    assert _routed(sent) == [(Kind.SI_NODE, "b", 4)] and len(rm.held) == 1
    _own(p)
    notice = notices.get_nowait()
    assert notice.WhichOneof("notice") == "resyncPartition"
    assert (notice.resyncPartition.partition, notice.resyncPartition.epoch) == ("a", 7)
    assert "partition [rm-1]a lost epoch 3: its worker w1 is gone (killed)" in notice.resyncPartition.reason
    assert not rm.held  # the replay covers what was held
    # the resync history measures it from the loss to the RM being asked to replay
    assert heard == [("started", "rm-1", "partition [rm-1]a lost epoch 3: its worker w1 is gone (killed) "
                                         "(partition resync)"), ("done", "rm-1")]
    assert rm.epochs == {"a": 7, "b": 4} and node_stream.empty()  # the streams stay open
    sent.clear()
    # before the node stream's marker: a's parts are dropped (the replay covers them), b's go on
    p.router.request("node", rm, _nodes("rm-1", ("n3", "a"), ("n4", "b")))
    assert _routed(sent) == [(Kind.SI_NODE, "b", 4)] and p.router.dropped_before_replay == 1
    sent.clear()
    p.router.request("node", rm, si.NodeRequest(rmID="rm-1"))  # the marker
    p.router.request("node", rm, _nodes("rm-1", ("n1", "a")))  # the replay
    assert _routed(sent) == [(Kind.SI_NODE, "a", 7)]
    # the other streams still wait for their markers
    assert rm.gated("allocation", "a") and rm.gated("application", "a") and not rm.gated("node", "a")
    p.router.request("allocation", rm, si.AllocationRequest(rmID="rm-1"))
    p.router.request("application", rm, si.ApplicationRequest(rmID="rm-1"))
    assert not rm.replay_gates
    asyncio.run(p.registry.maintain_once(time.monotonic() + 3 * RESYNC_TIMEOUT))
    assert rm.resync_reason is None  # done: nothing overdue


def _asked_to_re_register(rm: RMSession, notices: asyncio.Queue, node_stream: asyncio.Queue) -> str:
    notice = notices.get_nowait()
    assert notice.WhichOneof("notice") == "reRegister"
    close = node_stream.get_nowait()
    assert isinstance(close, Close) and "korral: re-register:" in close.details
    assert rm.resync_reason == notice.reRegister.reason
    return notice.reRegister.reason


def test_an_rm_that_did_not_declare_it_re_registers_whole():
    p, sent = make_proxy()
    rm, notices, node_stream = _rm(p, capable=False)
    _lose(p)
    assert "partition [rm-1]a lost epoch 3" in _asked_to_re_register(rm, notices, node_stream)
    assert not any(e.kind is Kind.RM_PARTITIONS for e in sent) and rm.epochs == {}


def test_no_worker_in_time_falls_back_to_the_whole_re_registration():
    p, _ = make_proxy()
    rm, notices, node_stream = _rm(p, capable=True)
    _lose(p)
    asyncio.run(p.registry.maintain_once(time.monotonic() + RESYNC_TIMEOUT + 1))
    reason = _asked_to_re_register(rm, notices, node_stream)
    assert "no worker took it within" in reason and not rm.partition_resyncs


def test_a_new_worker_that_cannot_load_it_falls_back():
    p, _ = make_proxy()
    rm, notices, node_stream = _rm(p, capable=True)
    _lose(p)
    _own(p, error="cannot reach Redis")
    assert "could not load it: cannot reach Redis" in _asked_to_re_register(rm, notices, node_stream)


def test_an_rm_that_never_starts_its_replay_falls_back():
    p, _ = make_proxy()
    rm, notices, node_stream = _rm(p, capable=True)
    _lose(p)
    _own(p)
    assert notices.get_nowait().WhichOneof("notice") == "resyncPartition"
    p.router.request("node", rm, si.NodeRequest(rmID="rm-1"))  # one marker of three
    asyncio.run(p.registry.maintain_once(time.monotonic() + RESYNC_TIMEOUT + 1))
    reason = _asked_to_re_register(rm, notices, node_stream)
    assert "did not start its replay" in reason and "allocation, application stream" in reason
    assert not rm.replay_gates


def test_without_the_broker_it_re_registers_whole(monkeypatch):
    monkeypatch.setattr(BrokerSide, "connected", property(lambda self: False))
    p, _ = make_proxy()
    rm, notices, node_stream = _rm(p, capable=True)
    _lose(p)
    _asked_to_re_register(rm, notices, node_stream)


def test_a_subscriber_that_declared_it_and_left_takes_the_capability_with_it():
    p, _ = make_proxy()
    rm, notices, node_stream = _rm(p, capable=True)
    rm.subscribers.remove(notices)
    other = asyncio.Queue()
    rm.subscribers.append(other)  # a subscriber without the flag
    _lose(p)
    _asked_to_re_register(rm, other, node_stream)


def test_a_request_the_lost_worker_could_not_take_is_not_rejected_to_the_rm_rebuilding_it():
    """Sent in the old epoch just before the loss reached rmproxy, it comes back UNROUTABLE after:
    the RM's replay covers it, and a rejection would make the RM give up on it (a pod never bound,
    the shim's pools e2e). A request of a live epoch is still rejected."""
    p, sent = make_proxy()
    rm, _, node_stream = _rm(p, capable=True)
    p.router.request("node", rm, _nodes("rm-1", ("n1", "a"), ("n2", "b")))
    sent_a, sent_b = (next(e for e in sent if e.partition == part) for part in ("a", "b"))
    _lose(p)

    def unroutable(env):
        p.broker._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", env.partition, env.epoch, env.seq, {
            "reason": "no worker", "kind": Kind.SI_NODE.value, "body": env.body}))

    unroutable(sent_a)  # while a waits for its new owner
    _own(p)
    unroutable(sent_a)  # and once it has one (a new epoch)
    assert node_stream.empty()
    unroutable(sent_b)
    assert [n.nodeID for n in si.NodeResponse.FromString(node_stream.get_nowait()).rejected] == ["n2"]
