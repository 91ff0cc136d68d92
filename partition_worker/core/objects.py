"""Asks, allocations and reservations: the small hot objects of the core."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.constants import TAG_ALLOW_PREEMPTION
from common.resources import Resource

if TYPE_CHECKING:  # pragma: no cover
    from .node_terms import Constraints

__all__ = ["Ask", "Allocation", "Reservation", "INT32_MIN", "INT32_MAX", "allows_preemption"]

# SI priorities are int32; INT32_MIN also stands for "no pending ask" (YuniKorn's convention)
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def allows_preemption(tags: dict[str, str]) -> bool:
    """The ``yunikorn.apache.org/allowPreemption`` tag of an ask or allocation (default true)."""
    return tags.get(TAG_ALLOW_PREEMPTION, "true").strip().lower() not in ("false", "f", "0")


@dataclass(slots=True, eq=False)
class Ask:
    """A pending request of an application: ``pending`` more allocations of ``resource``."""

    key: str
    app_id: str
    resource: Resource
    max_allocations: int
    pending: int
    priority: int
    create_time_ns: int
    seq: int
    tags: dict[str, str] = field(default_factory=dict)
    execution_timeout_ms: int = 0
    placeholder: bool = False
    task_group: str = ""
    originator: bool = False
    allow_preempt_self: bool = True
    allow_preempt_other: bool = True
    required_node: str = ""
    selector: tuple[tuple[str, str], ...] = ()
    allow_preemption: bool = True
    constraints: "Constraints | None" = None  # node terms of its tags (node_terms.constraints_of)
    # scheduling state last reported to the RM (None = none yet; a SchedState) and why
    sched_state: object = None
    sched_reason: str = ""
    sched_time_ns: int = 0
    reserved_node: str = ""  # node this ask holds a reservation on ("" = none)
    preempt_after_ns: int = 0  # queue preemption: no new attempt before (rate limit)
    triggered_preemption: bool = False
    # why queue preemption last refused to help (YuniKorn's allocation log: message, count, last time)
    preemption_log: "tuple[str, int, int] | None" = None
    # its app's gang-topology request (topology.GangTopology, shared by the app's asks; None: none)
    topology: object = None

    @property
    def sort_key(self) -> tuple[int, int, int]:
        """Priority desc, then creation time asc, then arrival order (stable)."""
        return (-self.priority, self.create_time_ns, self.seq)

    def describe(self) -> str:
        return (f"allocationKey={self.key}, applicationID={self.app_id}, "
                f"resource={self.resource}, maxAllocations={self.max_allocations}")


@dataclass(slots=True, eq=False)
class Allocation:
    """One placed unit of an ask on a node. ``uuid`` is core-made (or the RM's, on recovery)."""

    uuid: str
    key: str
    app_id: str
    node_id: str
    resource: Resource
    priority: int
    create_time_ns: int
    queue_path: str
    tags: dict[str, str] = field(default_factory=dict)
    task_group: str = ""
    placeholder: bool = False
    originator: bool = False
    recovered: bool = False
    timeout_at_ns: int = 0  # execution timeout deadline (0 = none)
    allow_preempt_self: bool = True  # SI preemptionPolicy.allowPreemptSelf of its ask
    allow_preemption: bool = True  # ask tag yunikorn.apache.org/allowPreemption


@dataclass(slots=True, eq=False)
class Reservation:
    """An ask holding a node it does not fit yet, so smaller asks cannot starve it."""

    node_id: str
    app_id: str
    ask_key: str
    created_ns: int
    # the node was freed by preempting victims for this ask: until the ask is placed (or the
    # reservation dropped) its resource counts against its queues' guarantees (preemption.py)
    preempting: bool = False

    @property
    def node_key(self) -> str:  # YuniKorn's key on the node side
        return f"{self.app_id}|{self.ask_key}"

    @property
    def app_key(self) -> str:  # YuniKorn's key on the app side
        return f"{self.node_id}|{self.ask_key}"
