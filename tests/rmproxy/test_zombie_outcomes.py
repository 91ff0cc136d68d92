"""A zombie's allocations never reach the RM. A worker cut off from the broker loses its
partition's epoch N (PARTITION_LOST) while it still believes it owns the partition. If it comes
back before its RM re-registered, the broker adopts it in epoch N again and forwards what it
sends; rmproxy drops every outcome of epoch N from the loss on (the RM was asked to re-register,
and its re-registration gives the partition epoch N + 1). The broker's own guard (outcomes of a
worker that does not own the partition) is in tests/broker/test_table.py."""

from __future__ import annotations

import asyncio

from common import si_internal_pb2 as si
from common.envelope import Envelope, Kind
from common.si_revision import Revision
from common.si_rows import AllocationRow, NewAllocations
from rmproxy.rms import Close, RMSession
from tests.rmproxy.test_proxy_lifecycle import make_proxy


def outcome(epoch: int, key: str) -> Envelope:
    row = AllocationRow(key, f"uuid-{key}", "n1", "app1", 0, "", False, None, False)
    return Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm-1", "default", epoch, 0,
                    NewAllocations([["memory", 10]], [row], [0]).wire())


def delivered(queue: asyncio.Queue) -> list[str]:
    """The allocation keys the RM's stream received."""
    keys = []
    while not queue.empty():
        item = queue.get_nowait()
        if not isinstance(item, Close):
            keys += [a.allocationKey for a in si.AllocationResponse.FromString(item).new]
    return keys


def test_a_zombies_outcomes_of_its_lost_epoch_are_dropped_before_and_after_the_rm_re_registers():
    p, _ = make_proxy()
    rm = p.registry.rms["rm-1"] = RMSession("rm-1", ["default"], epochs={"default": 5}, seqs={"default": 0}, revision=Revision.SEED)
    stream: asyncio.Queue = asyncio.Queue()
    rm.attach("allocation", stream)
    p.broker._on_outcome(outcome(5, "before"))  # the owner's, while it owns the partition
    assert delivered(stream) == ["before"]

    p.broker._on_lost(Envelope(Kind.PARTITION_LOST, "rm-1", "default", 5, 0,
                        {"reason": "its worker w1 is gone (worker missed its heartbeats)", "worker": "w1"}))
    dropped = p.dropped
    p.broker._on_outcome(outcome(5, "zombie-1"))  # adopted again by the broker: forwarded, and dropped here
    assert delivered(stream) == [] and list(rm.buffers["allocation"]) == [] and p.dropped == dropped + 1

    # the RM re-registers: the partition's new owner (even the same worker) answers in epoch 6
    rm = p.registry.rms["rm-1"] = RMSession("rm-1", ["default"], epochs={"default": 6}, seqs={"default": 0}, revision=Revision.SEED)
    again: asyncio.Queue = asyncio.Queue()
    rm.attach("allocation", again)
    p.broker._on_outcome(outcome(5, "zombie-2"))
    p.broker._on_outcome(outcome(6, "after"))
    assert delivered(again) == ["after"] and p.dropped == dropped + 2
