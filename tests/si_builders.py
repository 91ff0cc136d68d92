"""The one set of ``si.v1`` message builders for tests: valid defaults, keyword overrides.

``node("n1")`` is a node of memory 1000 and vcore 1000 in the default partition; ``ask("k1")``
asks for memory 10 and vcore 1 for ``app-1`` (the core harness's defaults, so a test reads the
same at either layer). Quantities given as keywords replace the default of that name and add
any other name (``node("g1", gpu=4)``); ``None`` leaves a name out (``ask("k", vcore=None)``).
Every builder returns a new message the test may change further.

The core harness (``tests/core/harness.py``) builds core commands, not SI messages: a different
layer with its own builders.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from common import si_pb2
from common.constants import APP_TAG_NAMESPACE, NODE_PARTITION
from common.si_resource import fill_si_resource

__all__ = ["NODE_DEFAULT", "ASK_DEFAULT", "resource", "node", "app", "ask", "allocation", "release",
           "remove_app"]

NODE_DEFAULT = {"memory": 1000, "vcore": 1000}
ASK_DEFAULT = {"memory": 10, "vcore": 1}


def resource(**quantities: int | None) -> si_pb2.Resource:
    """An ``si.v1.Resource`` of exactly these quantities (``None`` ones left out)."""
    return fill_si_resource(si_pb2.Resource(), {k: v for k, v in quantities.items() if v is not None})


def _with_defaults(defaults: Mapping[str, int], quantities: Mapping[str, int | None]) -> si_pb2.Resource:
    return resource(**{**defaults, **quantities})


def node(node_id: str, partition: str | None = None, *, action: int = si_pb2.NodeInfo.CREATE,
         existing: Iterable[si_pb2.Allocation] = (), attributes: Mapping[str, str] | None = None,
         **quantities: int | None) -> si_pb2.NodeInfo:
    """A node to report; ``partition`` None leaves the partition attribute out (the RM's default)."""
    attrs = dict(attributes or {})
    if partition is not None:
        attrs[NODE_PARTITION] = partition
    return si_pb2.NodeInfo(nodeID=node_id, action=action, attributes=attrs,
                           schedulableResource=_with_defaults(NODE_DEFAULT, quantities),
                           existingAllocations=list(existing))


def app(app_id: str, queue: str = "root.default", partition: str = "default", *, user: str = "alice",
        groups: Iterable[str] = (), tags: Mapping[str, str] | None = None) -> si_pb2.AddApplicationRequest:
    """An application to add; ``tags`` replaces the default ``{"namespace": "default"}`` whole."""
    return si_pb2.AddApplicationRequest(
        applicationID=app_id, queueName=queue, partitionName=partition,
        ugi=si_pb2.UserGroupInformation(user=user, groups=list(groups)),
        tags={APP_TAG_NAMESPACE: "default"} if tags is None else dict(tags))


def ask(key: str, app_id: str = "app-1", partition: str = "default", *, repeat: int = 1,
        placeholder: bool = False, task_group: str = "", **quantities: int | None) -> si_pb2.AllocationAsk:
    """An allocation ask; ``repeat`` is ``maxAllocations``."""
    return si_pb2.AllocationAsk(allocationKey=key, applicationID=app_id, partitionName=partition,
                                maxAllocations=repeat, placeholder=placeholder, taskGroupName=task_group,
                                resourceAsk=_with_defaults(ASK_DEFAULT, quantities))


def allocation(key: str, node_id: str, app_id: str = "app-1", partition: str = "default", *,
               uuid: str | None = None, placeholder: bool = False, task_group: str = "",
               tags: Mapping[str, str] | None = None, **quantities: int | None) -> si_pb2.Allocation:
    """An allocation the RM holds (an existing allocation of a node, or one the scheduler made);
    ``uuid`` defaults to the key."""
    return si_pb2.Allocation(allocationKey=key, UUID=key if uuid is None else uuid, nodeID=node_id,
                             applicationID=app_id, partitionName=partition, placeholder=placeholder,
                             taskGroupName=task_group, allocationTags=dict(tags or {}),
                             resourcePerAlloc=_with_defaults(ASK_DEFAULT, quantities))


def release(of: si_pb2.Allocation, termination: int = si_pb2.STOPPED_BY_RM,
            message: str = "") -> si_pb2.AllocationRelease:
    """The release of an allocation (by default the RM stopping it)."""
    return si_pb2.AllocationRelease(partitionName=of.partitionName, applicationID=of.applicationID,
                                    UUID=of.UUID, allocationKey=of.allocationKey,
                                    terminationType=termination, message=message)


def remove_app(app_id: str, partition: str = "default") -> si_pb2.RemoveApplicationRequest:
    return si_pb2.RemoveApplicationRequest(applicationID=app_id, partitionName=partition)
