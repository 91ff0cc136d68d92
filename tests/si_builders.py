"""The one set of SI message builders for tests: valid defaults, keyword overrides.

``node("n1")`` is a node of memory 1000 and vcore 1000 in the default partition; ``ask("k1")``
asks for memory 10 and vcore 1 for ``app-1`` (the core harness's defaults, so a test reads the
same at either layer). Quantities given as keywords replace the default of that name and add
any other name (``node("g1", gpu=4)``); ``None`` leaves a name out (``ask("k", vcore=None)``).
Every builder returns a new message the test may change further.

The module-level builders make the seed's ``si.v1`` messages (``common.si_pb2``), what an RM of
the seed revision sends. ``internal`` builds the same messages in rmproxy's internal model
(``common.si_internal_pb2``, for unit tests of code that reads requests), and ``v18`` in SI
v1.8's (``common.si_v18_pb2``): there an ask is an ``Allocation`` without a node and nothing
has a UUID.

The core harness (``tests/core/harness.py``) builds core commands, not SI messages: a different
layer with its own builders.
"""

from __future__ import annotations

from types import ModuleType
from typing import Iterable, Mapping

from common import si_internal_pb2, si_pb2, si_v18_pb2
from common.constants import APP_TAG_NAMESPACE, NODE_PARTITION
from common.si_resource import fill_si_resource

__all__ = ["NODE_DEFAULT", "ASK_DEFAULT", "Builders", "seed", "internal", "v18", "resource", "node", "app",
           "ask", "allocation", "release", "release_key", "remove_app"]

NODE_DEFAULT = {"memory": 1000, "vcore": 1000}
ASK_DEFAULT = {"memory": 10, "vcore": 1}


class Builders:
    """The builders for one generated message module ``pb``."""

    def __init__(self, pb: ModuleType) -> None:
        self.pb = pb
        self._has_uuid = "UUID" in pb.Allocation.DESCRIPTOR.fields_by_name

    def resource(self, **quantities: int | None):
        """A ``Resource`` of exactly these quantities (``None`` ones left out)."""
        return fill_si_resource(self.pb.Resource(), {k: v for k, v in quantities.items() if v is not None})

    def _with_defaults(self, defaults: Mapping[str, int], quantities: Mapping[str, int | None]):
        return self.resource(**{**defaults, **quantities})

    def node(self, node_id: str, partition: str | None = None, *, action: int | None = None,
             existing: Iterable = (), attributes: Mapping[str, str] | None = None, **quantities: int | None):
        """A node to report (``action`` CREATE unless given); ``partition`` None leaves the partition
        attribute out (the RM's default)."""
        attrs = dict(attributes or {})
        if partition is not None:
            attrs[NODE_PARTITION] = partition
        msg = self.pb.NodeInfo(nodeID=node_id, action=self.pb.NodeInfo.CREATE if action is None else action,
                               attributes=attrs, schedulableResource=self._with_defaults(NODE_DEFAULT, quantities))
        if existing:
            msg.existingAllocations.extend(existing)
        return msg

    def app(self, app_id: str, queue: str = "root.default", partition: str = "default", *, user: str = "alice",
            groups: Iterable[str] = (), tags: Mapping[str, str] | None = None):
        """An application to add; ``tags`` replaces the default ``{"namespace": "default"}`` whole."""
        return self.pb.AddApplicationRequest(
            applicationID=app_id, queueName=queue, partitionName=partition,
            ugi=self.pb.UserGroupInformation(user=user, groups=list(groups)),
            tags={APP_TAG_NAMESPACE: "default"} if tags is None else dict(tags))

    def ask(self, key: str, app_id: str = "app-1", partition: str = "default", *, repeat: int = 1,
            placeholder: bool = False, task_group: str = "", **quantities: int | None):
        """An allocation ask; ``repeat`` is ``maxAllocations``. In v1.8 an ask is an ``Allocation``
        without a node (one allocation each: ``repeat`` must be 1)."""
        if not hasattr(self.pb, "AllocationAsk"):
            if repeat != 1:
                raise ValueError(f"ask {key}: {self.pb.__name__} has no maxAllocations (repeat={repeat})")
            return self.allocation(key, "", app_id, partition, placeholder=placeholder, task_group=task_group,
                                   **quantities)
        return self.pb.AllocationAsk(allocationKey=key, applicationID=app_id, partitionName=partition,
                                     maxAllocations=repeat, placeholder=placeholder, taskGroupName=task_group,
                                     resourceAsk=self._with_defaults(ASK_DEFAULT, quantities))

    def allocation(self, key: str, node_id: str, app_id: str = "app-1", partition: str = "default", *,
                   uuid: str | None = None, placeholder: bool = False, task_group: str = "",
                   tags: Mapping[str, str] | None = None, **quantities: int | None):
        """An allocation the RM holds (an existing allocation of a node, or one the scheduler made);
        ``uuid`` defaults to the key where the revision has UUIDs."""
        msg = self.pb.Allocation(allocationKey=key, nodeID=node_id, applicationID=app_id, partitionName=partition,
                                 placeholder=placeholder, taskGroupName=task_group, allocationTags=dict(tags or {}),
                                 resourcePerAlloc=self._with_defaults(ASK_DEFAULT, quantities))
        if uuid is not None or self._has_uuid:
            msg.UUID = key if uuid is None else uuid
        return msg

    def release(self, of, termination: int | None = None, message: str = ""):
        """The release of an allocation ``of`` (or of what a response's release names): by UUID and
        key where the revision has UUIDs, else by key; by default the RM stopping it."""
        return self.release_key(of.allocationKey, of.applicationID, of.partitionName, termination=termination,
                                message=message, uuid=of.UUID if self._has_uuid else None)

    def release_key(self, key: str, app_id: str = "app-1", partition: str = "default", *,
                    termination: int | None = None, message: str = "", uuid: str | None = None):
        """The release of allocation ``key`` (v1.8 releases by key); ``uuid`` only if given."""
        msg = self.pb.AllocationRelease(
            partitionName=partition, applicationID=app_id, allocationKey=key, message=message,
            terminationType=self.pb.STOPPED_BY_RM if termination is None else termination)
        if uuid is not None:
            msg.UUID = uuid
        return msg

    def remove_app(self, app_id: str, partition: str = "default"):
        return self.pb.RemoveApplicationRequest(applicationID=app_id, partitionName=partition)


seed = Builders(si_pb2)
internal = Builders(si_internal_pb2)
v18 = Builders(si_v18_pb2)
resource, node, app, ask, allocation, release, release_key, remove_app = (
    seed.resource, seed.node, seed.app, seed.ask, seed.allocation, seed.release, seed.release_key, seed.remove_app)
