"""What the client does differently per SI revision: messages, stubs, the declaration at
registration, and the shape of the replay (docs/client.md, docs/si-revisions.md).

- ``seed`` (``common.si_pb2``): asks in ``AllocationRequest.asks``, running allocations in
  the nodes' ``existingAllocations``; responses name allocations by UUID.
- ``v1.8`` (``common.si_v18_pb2``): asks and running allocations (with ``nodeID``) in
  ``AllocationRequest.allocations``; everything is named by allocationKey.

The client declares its revision at registration (``buildInfo`` ``si.revision``), so Korral
never has to guess it from the RM's messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterable

import grpc

from common import si_pb2, si_pb2_grpc, si_v18_pb2, si_v18_pb2_grpc
from common.si_revision import DECLARATION_KEY, Revision, allowed

__all__ = ["Dialect", "dialect", "APPS_PER_REQUEST", "NODES_PER_REQUEST", "ASKS_PER_REQUEST"]

# Requests replayed in chunks so that no message nears gRPC's 4 MiB default limit.
APPS_PER_REQUEST = 1000
NODES_PER_REQUEST = 500
ASKS_PER_REQUEST = 5000


@dataclass(frozen=True)
class Dialect:
    revision: Revision
    pb: ModuleType  # the revision's generated messages
    stubs: ModuleType  # and gRPC stubs
    allocations_field: str  # the AllocationRequest field the replay fills: asks | allocations

    def request_types(self) -> dict[str, type]:
        return {"allocation": self.pb.AllocationRequest, "application": self.pb.ApplicationRequest,
                "node": self.pb.NodeRequest}

    def registration(self, request: Any) -> Any:
        """``request`` (either revision's RegisterResourceManagerRequest: the schema is one) as
        this revision's message, declaring the revision; ``ValueError`` when it declares another."""
        copy = self.pb.RegisterResourceManagerRequest.FromString(request.SerializeToString())
        declared = copy.buildInfo.get(DECLARATION_KEY, "")
        if declared and declared != self.revision.value:
            raise ValueError(f"buildInfo {DECLARATION_KEY}={declared!r} contradicts the client's "
                             f"si_revision={self.revision.value!r}")
        copy.buildInfo[DECLARATION_KEY] = self.revision.value
        return copy

    def replayed_allocations(self, snapshot: Any) -> tuple[list, str]:
        """The snapshot's part that goes out on UpdateAllocation in this revision, and the name
        of the part this revision has no place for ("" when that part is empty)."""
        asks, allocations = list(snapshot.asks), list(snapshot.allocations)
        if self.revision is Revision.SEED:
            return asks, "allocations" if allocations else ""
        return allocations, "asks" if asks else ""

    def allocation_requests(self, items: list, rm_id: str) -> Iterable[Any]:
        for i in range(0, len(items), ASKS_PER_REQUEST):
            yield self.pb.AllocationRequest(rmID=rm_id, **{self.allocations_field: items[i : i + ASKS_PER_REQUEST]})

    def scheduler_stub(self, channel: grpc.Channel) -> Any:
        return self.stubs.SchedulerStub(channel)


_DIALECTS = {
    Revision.SEED: Dialect(Revision.SEED, si_pb2, si_pb2_grpc, "asks"),
    Revision.V18: Dialect(Revision.V18, si_v18_pb2, si_v18_pb2_grpc, "allocations"),
}


def dialect(si_revision: str | Revision) -> Dialect:
    """The dialect of ``si_revision``; ``ValueError`` naming the allowed values otherwise."""
    try:
        return _DIALECTS[Revision(si_revision)]
    except ValueError:
        raise ValueError(f"si_revision={si_revision!r} is not an SI revision Korral speaks: use one of "
                         f"{allowed()}") from None
