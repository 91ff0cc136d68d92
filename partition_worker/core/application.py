"""Applications: their asks, allocations, resources and state (the table is in ``app_state``).

The application object only keeps its own books; ``lifecycle.AppLifecycle.fire`` drives
its state changes (timers and outcomes are the partition's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.constants import APP_TAG_STATE_AWARE_DISABLE
from common.resources import ZERO, Resource

from .app_state import AppState
from .objects import INT32_MIN, Allocation, Ask, Reservation
from .queue import Queue

__all__ = ["Application", "PlaceholderData"]


@dataclass(slots=True, eq=False)
class PlaceholderData:
    """Per task group (REST ``placeholderData``): placeholders allocated (``count``), their
    size, and how many were replaced by real allocations or released on timeout."""

    task_group: str
    min_resource: Resource
    count: int = 0
    replaced: int = 0
    timedout: int = 0


@dataclass(slots=True, eq=False)
class Application:
    app_id: str
    queue: Queue
    user: str
    groups: tuple[str, ...]
    tags: dict[str, str]
    submission_time_ns: int
    seq: int
    execution_timeout_ms: int = 0
    placeholder_ask: Resource = ZERO
    gang_style: str = "Soft"
    state: AppState = AppState.NEW
    state_time_ns: int = 0
    state_gen: int = 0  # bumps on every state change; timers carry it to detect staleness
    message: str = ""
    asks: dict[str, Ask] = field(default_factory=dict)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    allocated: Resource = ZERO
    pending: Resource = ZERO
    allocated_placeholder: Resource = ZERO
    reservations: dict[str, Reservation] = field(default_factory=dict)  # ask key -> reservation
    recovered_only: bool = False  # created from recovered allocations, RM has not added it yet
    requested_queue: str = ""  # the queue the RM asked for (placement input; a config what-if replays it)
    finished_ns: int = 0
    counted_running: bool = False  # counted in queue.running_apps
    max_used: Resource = ZERO  # peak of ``allocated`` (REST maxUsedResource)
    state_log: list[tuple[int, str]] = field(default_factory=list)  # (time, state) entered
    # gang: allocated placeholders per task group (insertion order = oldest first), counts
    placeholders: dict[str, dict[str, Allocation]] = field(default_factory=dict)
    ph_data: dict[str, PlaceholderData] = field(default_factory=dict)
    ph_alloc_count: int = 0
    ph_pending: int = 0  # pending repeats of placeholder asks (the gang is placed at 0)
    ph_timeout_at: int = 0  # placeholder timeout deadline (0 = no timer running)
    ph_timeout_ns: int = 0  # placeholder timeout, creationTime-adjusted (0: the settings' default)
    topology: object = None  # its gang-topology request (topology.GangTopology; None: none)
    backoff_deadline_ns: int = 0  # unschedulable-ask backoff: not tried before (backoff.py)
    start_ns: int = 0  # when it first ran (Starting or Running entered); 0: never ran
    # resource-seconds of its finished allocations: {kind: {instance type: {resource: seconds}}}
    # with kind resourceUsage | preemptedResource | placeholderResource (app_usage.py)
    resource_history: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # the pending asks in scheduling order; may hold dead (exhausted/replaced) entries, and
    # asks appended since the last sort (``_unsorted``); entries before ``_head`` are dead
    _order: list[Ask] = field(default_factory=list)
    _unsorted: bool = False
    _dead: int = 0  # entries of _order known dead since the last compaction
    _head: int = 0

    @property
    def queue_path(self) -> str:
        return self.queue.path

    def add_allocated(self, r: Resource) -> None:
        """``allocated += r``, keeping the peak in ``max_used`` (cheap while at the peak)."""
        old = self.allocated
        self.allocated = new = old.add(r)
        if self.max_used is old:
            self.max_used = new
            return
        mu = self.max_used._v
        for k, v in new._v.items():
            if v > mu.get(k, 0):
                peak = self.max_used.component_wise_max(new)
                # usage is the peak again: share its object, so the next add takes the fast path
                # (a new peak object each time cost 3 us per allocation after any release)
                self.max_used = new if peak == new else peak
                return

    # ---------------------------------------------------------------- asks
    def add_ask(self, ask: Ask) -> Ask | None:
        """Add or replace by key; pending adjusted by the delta. Returns the replaced ask."""
        old = self.asks.get(ask.key)
        if old is not None:
            self._remove_from_pending(old)
        self.asks[ask.key] = ask
        if ask.placeholder and ask.pending > 0:
            self.ph_pending += ask.pending
        if ask.pending > 0:
            self.pending = self.pending.add(ask.resource.multiply(ask.pending))
            self._order.append(ask)
            self._unsorted = True
        return old

    def remove_ask(self, key: str) -> Ask | None:
        ask = self.asks.pop(key, None)
        if ask is not None:
            self._remove_from_pending(ask)
        return ask

    def _remove_from_pending(self, ask: Ask) -> None:
        if ask.pending > 0:
            self.pending = self.pending.sub_eliminate_negative(ask.resource.multiply(ask.pending))
            if ask.placeholder:
                self.ph_pending = max(0, self.ph_pending - ask.pending)
            ask.pending = 0  # dead entry in _order; dropped at the next compaction
            self._dead += 1

    def ordered_asks(self) -> list[Ask]:
        """Asks with pending repeats, by priority desc then creation time. Drops dead entries
        and sorts only when asks were added since the last call. Asks run out in order, so the
        dead are mostly a prefix: that is cut off alone (one memmove, no Python loop over the
        live ones) unless more died elsewhere. A dead entry left behind is only skipped."""
        order = self._order
        if self._dead and not self._unsorted:
            asks = self.asks
            i, n = 0, len(order)
            while i < n and (order[i].pending <= 0 or asks.get(order[i].key) is not order[i]):
                i += 1
            del order[:i]
            self._head = max(0, self._head - i)
            self._dead = max(0, self._dead - i)
        if self._unsorted or self._dead:
            live = [a for a in order if a.pending > 0 and self.asks.get(a.key) is a]
            if self._unsorted:
                live.sort(key=_ask_key)
            self._order = order = live
            self._unsorted = False
            self._head = 0
        self._dead = 0
        return order

    def mark_exhausted(self) -> None:
        """An ask in the order ran out of repeats: compact at the next ``ordered_asks``."""
        self._dead += 1

    def max_pending_priority(self) -> int:
        """Priority of the first live ask; amortised O(1) (skips dead entries once)."""
        if self._unsorted:
            self.ordered_asks()
        order = self._order
        asks = self.asks
        i, n = self._head, len(order)
        while i < n:
            a = order[i]
            if a.pending > 0 and asks.get(a.key) is a:
                self._head = i
                return a.priority
            i += 1
        self._head = i
        return INT32_MIN

    def has_pending(self) -> bool:
        return not self.pending.is_zero()

    def is_idle(self) -> bool:
        """No pending asks, no real allocations (the Completing condition; leftover placeholders
        are released when Completing ends, as in YuniKorn)."""
        return len(self.allocations) <= self.ph_alloc_count and self.pending.is_zero() \
            and all(a.pending <= 0 for a in self.asks.values())

    # ---------------------------------------------------------------- gang
    def add_placeholder(self, alloc: Allocation) -> None:
        self.placeholders.setdefault(alloc.task_group, {})[alloc.uuid] = alloc
        self.ph_alloc_count += 1
        self.allocated_placeholder = self.allocated_placeholder.add(alloc.resource)
        d = self.ph_data.get(alloc.task_group)
        if d is None:
            d = self.ph_data[alloc.task_group] = PlaceholderData(alloc.task_group, alloc.resource)
        d.count += 1

    def drop_placeholder(self, alloc: Allocation) -> None:
        group = self.placeholders.get(alloc.task_group)
        if group is None or group.pop(alloc.uuid, None) is None:
            return
        if not group:
            del self.placeholders[alloc.task_group]
            if not self.placeholders and self.topology is not None:
                self.topology.pin = None  # type: ignore[attr-defined]  # no placeholder holds the domain now
        self.ph_alloc_count -= 1
        self.allocated_placeholder = self.allocated_placeholder.sub_eliminate_negative(alloc.resource)

    def placeholder_size(self, task_group: str) -> Resource | None:
        """The size of the group's placeholders (allocated or asked for), None if it has none."""
        d = self.ph_data.get(task_group)
        if d is not None:
            return d.min_resource
        for a in self.asks.values():
            if a.placeholder and a.task_group == task_group:
                return a.resource
        return None

    def has_pending_placeholders(self) -> bool:
        """Some placeholder ask still has repeats to place (O(1))."""
        return self.ph_pending > 0

    def stateaware_disabled(self) -> bool:
        return self.tags.get(APP_TAG_STATE_AWARE_DISABLE, "").lower() == "true"


def _ask_key(a: Ask) -> tuple[int, int, int]:
    return (-a.priority, a.create_time_ns, a.seq)
