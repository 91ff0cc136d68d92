"""A Kubernetes node as the scheduler sees it, and the SI messages that report it.

``read_node(raw, old)`` keeps a ``NodeState``: the allocatable resources (what the scheduler may
hand out; YuniKorn reports allocatable, never capacity), and the attributes the core's node
checks read: ``si.io/hostname``, ``si.io/rackname`` (``/rack-default``, as YuniKorn), the labels
(``si.io/nodelabels``, JSON), the taints (``korral.io/taints``, JSON ``spec.taints``), readiness
(``ready``: the Ready condition is True) and the instance type (``si/instance-type``, from the
label ``service.nodeInstanceTypeNodeLabelKey`` names). Cordoning is not an attribute: it drains
the node in the core (``DRAIN_NODE``; uncordon ``DRAIN_TO_SCHEDULABLE``), as YuniKorn's shim does.
An allocatable entry that is not a quantity is left out and reported as a ``Problem``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from common import si_v18_pb2 as si
from common.constants import (INSTANCE_TYPE, K8S_HOST_NAME, K8S_RACK_NAME, NODE_LABELS, NODE_READY_ATTRIBUTE,
                              NODE_TAINTS)
from common.si_resource import fill_si_resource
from k8s_shim.translate import quantity
from k8s_shim.translate.pods import Problem

__all__ = ["NodeState", "read_node", "create_drained", "update", "action", "DEFAULT_RACK",
           "DEFAULT_INSTANCE_TYPE_LABEL"]

DEFAULT_RACK = "/rack-default"
DEFAULT_INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(slots=True)
class NodeState:
    name: str
    uid: str
    allocatable: dict[str, int]
    attributes: dict[str, str]
    unschedulable: bool
    problems: tuple[Problem, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.attributes.get(NODE_READY_ATTRIBUTE) == "true"


def read_node(raw: dict, instance_type_label: str = DEFAULT_INSTANCE_TYPE_LABEL) -> NodeState:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    name = meta.get("name", "")
    problems: list[Problem] = []
    allocatable: dict[str, int] = {}
    entries = status.get("allocatable") or status.get("capacity") or {}
    for key, text in entries.items():
        try:
            si_name, amount = quantity.si_value(key, text)
        except ValueError as exc:
            problems.append(Problem(f"status.allocatable.{key}", f"{exc}: left out"))
            continue
        allocatable[si_name] = max(amount, 0)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    labels = meta.get("labels") or {}
    attributes = {K8S_HOST_NAME: name, K8S_RACK_NAME: DEFAULT_RACK,
                  NODE_LABELS: orjson.dumps(labels).decode(),
                  NODE_TAINTS: orjson.dumps(spec.get("taints") or []).decode(),
                  NODE_READY_ATTRIBUTE: "true" if ready else "false"}
    if labels.get(instance_type_label):
        attributes[INSTANCE_TYPE] = labels[instance_type_label]
    return NodeState(name, meta.get("uid", ""), allocatable, attributes, bool(spec.get("unschedulable")),
                     tuple(problems), labels)


def _resource(values: dict[str, int]) -> si.Resource:
    return fill_si_resource(si.Resource(), values)


def create_drained(node: NodeState) -> si.NodeInfo:
    """Registration: drained until its pods are counted (then ``DRAIN_TO_SCHEDULABLE``)."""
    return si.NodeInfo(nodeID=node.name, action=si.NodeInfo.CREATE_DRAIN, attributes=node.attributes,
                       schedulableResource=_resource(node.allocatable))


def update(node: NodeState, old: NodeState) -> si.NodeInfo | None:
    """The UPDATE for what changed between ``old`` and ``node`` (allocatable, attributes), or None."""
    info = si.NodeInfo(nodeID=node.name, action=si.NodeInfo.UPDATE)
    changed = False
    if node.allocatable != old.allocatable:
        info.schedulableResource.CopyFrom(_resource(node.allocatable))
        changed = True
    if node.attributes != old.attributes:
        info.attributes.update(node.attributes)
        changed = True
    return info if changed else None


def action(name: str, what: int) -> si.NodeInfo:
    """DRAIN_NODE, DRAIN_TO_SCHEDULABLE or DECOMISSION of a node."""
    return si.NodeInfo(nodeID=name, action=what)
