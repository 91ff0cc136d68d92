"""A worker's ``PartitionSession`` spoken to in SI, as an RM reaches it through rmproxy, in-process.

The stack never gives a worker an ask in protobuf nor takes a new allocation from it in
protobuf: rmproxy reads an ``AllocationRequest`` into rows and writes the worker's rows into the
RM's ``AllocationResponse`` (``rmproxy.revision``). ``SISession`` does exactly that around
the session, through the wire form (``pack``/``unpack``, ``wire``/``decode``), so a test can send
an SI allocation request of either revision and read the SI response the RM would get.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import si_internal_pb2 as si
from common.si_rows import NewAllocations, RequestRows
from partition_worker.session import Outbox, PartitionSession
from rmproxy import revision

__all__ = ["SISession", "SIOutbox", "ASK_BATCH"]

ASK_BATCH = 1000  # asks per body, as rmproxy sends them


@dataclass(slots=True)
class SIOutbox(Outbox):
    """An ``Outbox`` with ``allocation``: the ``AllocationResponse`` the RM reads (None: none)."""

    allocation: si.AllocationResponse | None = None


class SISession(PartitionSession):
    def apply_allocation_request(self, req, now_ns: int) -> None:
        """``req`` (an ``AllocationRequest`` of either message set, for this partition) as rmproxy
        sends it to the worker."""
        part = si.AllocationRequest.FromString(req.SerializeToString())
        for body in revision.request_rows(part, ASK_BATCH):
            self.apply_allocation_rows(RequestRows.unpack(body.pack()), now_ns)

    def step(self, now_ns: int) -> SIOutbox:
        out = super().step(now_ns)
        body = out.allocation_outcomes()
        response = None
        if body is not None:
            raw = revision.allocation_response(NewAllocations.decode(body.wire()), self.partition_name, self.revision)
            response = si.AllocationResponse.FromString(raw)
        return SIOutbox(out.new_allocations, out.allocation_rest, out.application, out.node, out.events,
                        out.scheduling_states, out.app_summaries, allocation=response)
