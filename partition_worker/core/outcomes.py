"""What the core reports back: plain frozen records, appended to an ``Outcomes`` log
(``event`` and ``sched_state`` build the two records every part reports).

The session (SI adapter) turns them into SI protobuf responses; tests read
them directly. The core never sends anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .objects import Allocation, Ask

__all__ = [
    "Termination", "EventType", "SchedState",
    "AllocationNew", "AllocationReleased", "AskReleased", "AskRejected",
    "AppAccepted", "AppRejected", "AppStateChanged", "NodeAccepted", "NodeRejected",
    "Event", "SchedulingState", "AppSummary", "Outcomes",
]


class Termination(str, Enum):
    """SI TerminationType names."""

    STOPPED_BY_RM = "STOPPED_BY_RM"
    TIMEOUT = "TIMEOUT"
    PREEMPTED_BY_SCHEDULER = "PREEMPTED_BY_SCHEDULER"
    PLACEHOLDER_REPLACED = "PLACEHOLDER_REPLACED"
    UNKNOWN = "UNKNOWN_TERMINATION_TYPE"


class EventType(str, Enum):
    REQUEST = "REQUEST"
    APP = "APP"
    NODE = "NODE"
    QUEUE = "QUEUE"


class SchedState(str, Enum):
    """SI UpdateContainerSchedulingStateRequest.SchedulingState names."""

    SKIPPED = "SKIPPED"
    SCHEDULED = "SCHEDULED"
    RESERVED = "RESERVED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class AllocationNew:
    alloc: "Allocation"


@dataclass(frozen=True, slots=True)
class AllocationReleased:
    app_id: str
    uuid: str
    allocation_key: str
    termination: Termination
    message: str


@dataclass(frozen=True, slots=True)
class AskReleased:
    app_id: str
    allocation_key: str
    termination: Termination
    message: str


@dataclass(frozen=True, slots=True)
class AskRejected:
    app_id: str
    allocation_key: str
    reason: str


@dataclass(frozen=True, slots=True)
class AppAccepted:
    app_id: str
    queue: str = ""  # where placement put it, reported to the RM with the acceptance
    state: str = "New"
    timestamp_ns: int = 0


@dataclass(frozen=True, slots=True)
class AppRejected:
    app_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class AppStateChanged:
    app_id: str
    state: str
    timestamp_ns: int
    message: str


@dataclass(frozen=True, slots=True)
class NodeAccepted:
    node_id: str


@dataclass(frozen=True, slots=True)
class NodeRejected:
    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Event:
    type: EventType
    object_id: str
    group_id: str
    reason: str
    message: str
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class SchedulingState:
    app_id: str
    allocation_key: str
    state: SchedState
    reason: str


@dataclass(frozen=True, slots=True)
class AppSummary:
    """An app that ran has finished (YuniKorn's ``YK_APP_SUMMARY``; see ``app_usage``): times in
    ns, ``usage`` = the app's ``resource_history``. The worker shell writes the log line."""

    app_id: str
    submission_ns: int
    start_ns: int
    finish_ns: int
    user: str
    queue: str
    state: str
    usage: dict


@dataclass(slots=True)
class Outcomes:
    """The accumulated outcomes since the last ``drain()``, one list per kind (order kept)."""

    allocations: list[AllocationNew] = field(default_factory=list)
    released: list[AllocationReleased] = field(default_factory=list)
    released_asks: list[AskReleased] = field(default_factory=list)
    rejected_asks: list[AskRejected] = field(default_factory=list)
    apps_accepted: list[AppAccepted] = field(default_factory=list)
    apps_rejected: list[AppRejected] = field(default_factory=list)
    app_states: list[AppStateChanged] = field(default_factory=list)
    nodes_accepted: list[NodeAccepted] = field(default_factory=list)
    nodes_rejected: list[NodeRejected] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    sched_states: list[SchedulingState] = field(default_factory=list)
    app_summaries: list[AppSummary] = field(default_factory=list)

    def event(self, etype: EventType, object_id: str, reason: str, message: str, now: int,
              group: str = "") -> None:
        self.events.append(Event(etype, object_id, group, reason, message, now))

    def sched_state(self, ask: "Ask", state: SchedState, reason: str, now: int) -> None:
        """Report an ask's scheduling state, only when it changes (no flood per cycle)."""
        if ask.sched_state is state and ask.sched_reason == reason:
            return
        ask.sched_state = state
        ask.sched_reason = reason
        ask.sched_time_ns = now
        self.sched_states.append(SchedulingState(ask.app_id, ask.key, state, reason))

    def drain(self) -> "Outcomes":
        """Return what accumulated and start empty again."""
        out = Outcomes(self.allocations, self.released, self.released_asks, self.rejected_asks,
                       self.apps_accepted, self.apps_rejected, self.app_states,
                       self.nodes_accepted, self.nodes_rejected, self.events, self.sched_states,
                       self.app_summaries)
        self.app_summaries = []
        self.allocations, self.released, self.released_asks, self.rejected_asks = [], [], [], []
        self.apps_accepted, self.apps_rejected, self.app_states = [], [], []
        self.nodes_accepted, self.nodes_rejected, self.events, self.sched_states = [], [], [], []
        return out

    def is_empty(self) -> bool:
        return not (self.allocations or self.released or self.released_asks or self.rejected_asks
                    or self.apps_accepted or self.apps_rejected or self.app_states
                    or self.nodes_accepted or self.nodes_rejected or self.events
                    or self.sched_states or self.app_summaries)

