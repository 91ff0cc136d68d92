"""What the simulated RM writes and reads differently in each SI revision (``korral sim
--si-revision``); ``SimCluster`` holds one ``Wire`` and is otherwise the same RM.

- ``seed``: asks are ``AllocationAsk`` in ``asks``; an allocation is named by its UUID (in
  releases, and in the ``replacing uuid: <uuid>`` of a placeholder's replacement); timed-out
  asks come in ``releasedAsks``, rejections in ``rejected``; recovery reports running work
  in the nodes' ``existingAllocations``.
- ``v1.8``: asks and running allocations are ``Allocation`` in ``allocations`` (with a
  ``nodeID`` when running); everything is named by allocationKey (``replacing
  allocationKey: <key>``); a timed-out ask is a ``released`` entry, rejections are in
  ``rejectedAllocations``; the scheduler confirms recovered allocations in ``new``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterable, Mapping

from common import si_pb2, si_v18_pb2
from common.si_resource import fill_si_resource
from common.si_revision import Revision

__all__ = ["Wire", "wire_for"]


@dataclass(frozen=True)
class Wire:
    revision: Revision
    pb: ModuleType
    replacing_prefix: str

    @property
    def v18(self) -> bool:
        return self.revision is Revision.V18

    def resource(self, values: Mapping[str, int]) -> Any:
        return fill_si_resource(self.pb.Resource(), values)

    def alloc_id(self, alloc: Any) -> str:
        """The name the scheduler and the RM use for an allocation."""
        return alloc.allocationKey if self.v18 else alloc.UUID

    def release_id(self, release: Any) -> str:
        return release.allocationKey if self.v18 else release.UUID

    def replacing(self, message: str) -> str:
        """The name of the real allocation in a placeholder's PLACEHOLDER_REPLACED message."""
        return message[len(self.replacing_prefix):] if message.startswith(self.replacing_prefix) else ""

    def ask(self, *, key: str, app_id: str, partition: str, resources: Mapping[str, int], priority: int,
            tags: dict[str, str], placeholder: bool, task_group: str, preempt: tuple[bool, bool] | None) -> Any:
        if self.v18:
            msg = self.pb.Allocation(allocationKey=key, applicationID=app_id, partitionName=partition,
                                     resourcePerAlloc=self.resource(resources), priority=priority,
                                     allocationTags=tags, placeholder=placeholder, taskGroupName=task_group)
        else:
            msg = self.pb.AllocationAsk(allocationKey=key, applicationID=app_id, partitionName=partition,
                                        resourceAsk=self.resource(resources), maxAllocations=1, priority=priority,
                                        tags=tags, placeholder=placeholder, taskGroupName=task_group)
        if preempt is not None:
            msg.preemptionPolicy.allowPreemptSelf, msg.preemptionPolicy.allowPreemptOther = preempt
        return msg

    def running(self, alloc: Any, *, key: str, app_id: str, partition: str, priority: int, placeholder: bool,
                task_group: str) -> Any:
        """A running allocation as the RM reports it when it recovers."""
        msg = self.pb.Allocation(allocationKey=key, nodeID=alloc.nodeID, applicationID=app_id,
                                 partitionName=partition, resourcePerAlloc=alloc.resourcePerAlloc,
                                 priority=priority, placeholder=placeholder, taskGroupName=task_group)
        if not self.v18:
            msg.UUID = alloc.UUID
        return msg

    def foreign(self, node_id: str, resources: Mapping[str, int]) -> Any:
        """A pod of another scheduler on ``node_id`` (tag ``foreign``): in the seed it goes in the
        node's ``existingAllocations``, in v1.8 in ``allocations`` (``foreign_in_node``)."""
        return self.pb.Allocation(allocationKey=f"{node_id}-foreign", nodeID=node_id,
                                  allocationTags={"foreign": "default"}, resourcePerAlloc=self.resource(resources))

    @property
    def foreign_in_node(self) -> bool:
        return not self.v18

    def release(self, alloc: Any, *, key: str, app_id: str, partition: str, term: int, message: str) -> Any:
        msg = self.pb.AllocationRelease(partitionName=partition, applicationID=app_id, allocationKey=key,
                                        terminationType=term, message=message)
        if not self.v18:
            msg.UUID = alloc.UUID
        return msg

    def releases_request(self, releases: list) -> Any:
        return self.pb.AllocationRequest(releases=self.pb.AllocationReleasesRequest(allocationsToRelease=releases))

    def asks_request(self, asks: list) -> Any:
        field = "allocations" if self.v18 else "asks"
        return self.pb.AllocationRequest(**{field: asks})

    def rejected(self, response: Any) -> Iterable[Any]:
        return response.rejectedAllocations if self.v18 else response.rejected

    def released_asks(self, response: Any) -> Iterable[Any]:
        """Asks the scheduler gave up (v1.8 sends them as releases of their key, told apart by the
        RM, which knows the task still waits)."""
        return () if self.v18 else response.releasedAsks


_WIRES = {
    Revision.SEED: Wire(Revision.SEED, si_pb2, "replacing uuid: "),
    Revision.V18: Wire(Revision.V18, si_v18_pb2, "replacing allocationKey: "),
}


def wire_for(revision: str | Revision) -> Wire:
    return _WIRES[Revision(revision)]
