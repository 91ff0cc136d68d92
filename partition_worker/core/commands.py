"""Commands into the core: small frozen records, dispatched by type (``Partition.handle``).

The SI adapter builds them from protobuf; tests build them directly. Every field
is already typed (resources are ``Resource``), so the core never sees protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.resources import ZERO, Resource

from .outcomes import Termination

__all__ = ["AddApp", "RemoveApp", "AddAsk", "ReleaseAsk", "ReleaseAlloc", "RecoveredAlloc", "AddAllocation",
           "ResizeAllocation", "AddNode", "UpdateNode", "DrainNode", "UndrainNode", "RemoveNode", "AddForeign",
           "ReleaseForeign", "Command"]


@dataclass(frozen=True, slots=True)
class AddApp:
    app_id: str
    queue: str
    user: str
    groups: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)
    execution_timeout_ms: int = 0
    placeholder_ask: Resource = ZERO
    gang_style: str = ""  # Hard | Soft; "" = unset (the policy tag, else Soft)


@dataclass(frozen=True, slots=True)
class RemoveApp:
    app_id: str


@dataclass(frozen=True, slots=True)
class AddAsk:
    key: str
    app_id: str
    resource: Resource
    max_allocations: int = 1
    priority: int = 0
    execution_timeout_ms: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    task_group: str = ""
    placeholder: bool = False
    originator: bool = False
    allow_preempt_self: bool = True
    allow_preempt_other: bool = True


@dataclass(frozen=True, slots=True)
class ReleaseAsk:
    """Release one ask by key, or every ask of the app when ``key`` is empty."""

    app_id: str
    key: str = ""
    termination: Termination = Termination.STOPPED_BY_RM
    message: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseAlloc:
    """Release one allocation by UUID, or every allocation of the app when ``uuid`` is empty."""

    app_id: str
    uuid: str = ""
    termination: Termination = Termination.STOPPED_BY_RM
    message: str = ""
    allocation_key: str = ""


@dataclass(frozen=True, slots=True)
class RecoveredAlloc:
    uuid: str
    key: str
    app_id: str
    resource: Resource
    node_id: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    task_group: str = ""
    placeholder: bool = False
    originator: bool = False
    allow_preempt_self: bool = True  # its preemptionPolicy: a recovered pod that opted out stays out


@dataclass(frozen=True, slots=True)
class AddAllocation:
    """An allocation the RM reports as already placed on one of its registered nodes (the RM
    recovering its work, or a placement it made itself): booked like a recovered allocation,
    replacing a pending ask of the same key, and confirmed to the RM as a new allocation."""

    alloc: RecoveredAlloc


@dataclass(frozen=True, slots=True)
class ResizeAllocation:
    """The RM changed the size of a placed allocation in place (SI v1.8: the allocation again,
    with its node and new resources; YuniKorn 1.6, YUNIKORN-2367, Kubernetes' in-place pod
    resize). ``uuid``: the allocation's (a v1.8 RM's is its key)."""

    app_id: str
    uuid: str
    resource: Resource


@dataclass(frozen=True, slots=True)
class AddNode:
    """``schedulable`` False: the node is created drained (it takes work once undrained)."""

    node_id: str
    capacity: Resource
    occupied: Resource = ZERO
    attributes: dict[str, str] = field(default_factory=dict)
    existing: tuple[RecoveredAlloc, ...] = ()
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class UpdateNode:
    """Capacity/occupied ``None`` = unchanged."""

    node_id: str
    capacity: Resource | None = None
    occupied: Resource | None = None
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DrainNode:
    node_id: str


@dataclass(frozen=True, slots=True)
class UndrainNode:
    node_id: str


@dataclass(frozen=True, slots=True)
class RemoveNode:
    node_id: str


@dataclass(frozen=True, slots=True)
class AddForeign:
    """An allocation the RM reports with the ``foreign`` tag (``core.foreign``): a pod of
    another scheduler occupying ``node_id``."""

    key: str
    node_id: str
    resource: Resource
    tags: dict[str, str] = field(default_factory=dict)
    priority: int = 0


@dataclass(frozen=True, slots=True)
class ReleaseForeign:
    key: str


Command = (AddApp | RemoveApp | AddAsk | ReleaseAsk | ReleaseAlloc | AddAllocation | AddNode | UpdateNode
           | DrainNode | UndrainNode | RemoveNode | AddForeign | ReleaseForeign)
