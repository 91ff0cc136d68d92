"""The partition: the single owner of queues, applications, asks, allocations and nodes.

Contract: commands in (``handle(cmd, now)``), outcomes out (``outcomes.drain()``),
time in (``tick(now)`` fires due timers, ``schedule(now)`` runs one cycle,
``step(now)`` does both when needed). No I/O, no clock of its own. One thread.

Flows follow seed 002 (one object per concept) and the reasons of
YUNIKORN_BEHAVIOUR.md 1.1. Node commands live in ``_nodes.NodeOps``; the
scheduling cycle in ``scheduler``.
"""

from __future__ import annotations

import heapq
import uuid as _uuid
from typing import Callable

from common.config.model import PartitionConfig
from common.resources import ZERO

from . import scheduler
from ._apps import T_COMPLETING, T_EXPIRE, T_STARTING, AppOps
from ._gang import T_PLACEHOLDER, GangOps
from ._nodes import NodeOps
from .app_state import AppEvent, AppState
from .application import Application
from .commands import (AddApp, AddAsk, AddNode, DrainNode, ReleaseAlloc, ReleaseAsk, RemoveApp,
                       RemoveNode, UndrainNode, UpdateNode)
from .node import NodeCollection, parse_node_sort_policy
from .objects import (NODE_SELECTOR_PREFIX, TAG_ALLOW_PREEMPTION, TAG_REQUIRED_NODE, Allocation,
                      Ask, Reservation)
from .outcomes import (AllocationNew, AllocationReleased, AskRejected, Event, EventType, Outcomes,
                       SchedState, SchedulingState, Termination)
from .limits import LimitTracker
from .placement_bridge import PlacementBridge
from .queue import ObjectState, Queue, QueueTree
from .settings import CoreSettings

__all__ = ["Partition"]

IDLE_NS_PER_ASK = 10_000
_T_ALLOC_TIMEOUT = "alloc"


class Partition(AppOps, NodeOps, GangOps):
    """One partition's scheduling state. ``name`` is the short name, ``full_name`` YuniKorn's
    ``[rmID]name`` used in messages."""

    def __init__(self, name: str, config: PartitionConfig, settings: CoreSettings | None = None,
                 rm_id: str = "", new_uuid: Callable[[], str] | None = None) -> None:
        self.name = name
        self.full_name = f"[{rm_id}]{name}" if rm_id else name
        self.settings = settings or CoreSettings()
        self.new_uuid = new_uuid or (lambda: str(_uuid.uuid4()))
        self.outcomes = Outcomes()
        self.state = ObjectState.ACTIVE
        self.state_time_ns = 0
        self.last_cycle_stages: dict[str, float] | None = None  # seconds per stage of the last cycle
        self.queues = QueueTree(config.root)
        policy = parse_node_sort_policy(config.nodesortpolicy.type)
        self.nodes = NodeCollection(policy, dict(config.nodesortpolicy.resourceweights))
        self.placement = PlacementBridge(config.placementrules, self.settings.group_lookup)
        self.config = config
        self.limits = LimitTracker()  # user/group limits (inactive when none configured)
        self.limits.configure(config, ())
        self.preemption_enabled = config.preemption.enabled
        self.apps: dict[str, Application] = {}
        self.finished_apps: dict[str, Application] = {}  # Completed/Failed/Rejected until expiry
        self.allocations: dict[str, Allocation] = {}
        self.reservations: dict[tuple[str, str], Reservation] = {}  # (app_id, ask_key)
        self.total = ZERO
        self._timers: list[tuple[int, int, str, str, int]] = []
        self._seq = 0
        self.changed = True  # something happened that a cycle may act on
        self.last_cycle_ns = 0
        self.now = 0  # time of the command or step being processed (for records only)
        self._queues_dirty = False
        self.cycles = 0
        self.app_state_version = 0  # bumps on every app state change (stateaware order cache)
        self.idle_interval_ns = self.settings.idle_cycle_interval_ns

    # ================================================================ dispatch
    def handle(self, cmd: object, now: int) -> None:
        """Apply one command. Unknown command types raise ``TypeError`` naming the type."""
        fn = _HANDLERS.get(type(cmd))
        if fn is None:
            raise TypeError(f"partition {self.name}: unknown command {type(cmd).__name__}")
        self.now = now
        fn(self, cmd, now)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ================================================================ events/outcomes helpers
    def event(self, etype: EventType, object_id: str, reason: str, message: str, now: int,
              group: str = "") -> None:
        self.outcomes.events.append(Event(etype, object_id, group, reason, message, now))

    def sched_state(self, ask: Ask, state: SchedState, reason: str) -> None:
        """Report an ask's scheduling state, only when it changes (no flood per cycle)."""
        if ask.sched_state is state and ask.sched_reason == reason:
            return
        ask.sched_state = state
        ask.sched_reason = reason
        ask.sched_time_ns = self.now
        self.outcomes.sched_states.append(SchedulingState(ask.app_id, ask.key, state, reason))

    # ================================================================ timers
    def _timer(self, at: int, kind: str, key: str, gen: int = 0) -> None:
        heapq.heappush(self._timers, (at, self.next_seq(), kind, key, gen))

    def next_wakeup_ns(self) -> int | None:
        """Earliest deadline: a timer, or the next idle cycle while asks are pending."""
        t = self._timers[0][0] if self._timers else None
        if self.changed or self._queues_dirty:
            return self.last_cycle_ns  # due now
        if self.root.pending.is_zero() or not self.nodes.nodes:
            return t
        idle = self.last_cycle_ns + self.idle_interval_ns
        return idle if t is None else min(t, idle)

    def tick(self, now: int) -> None:
        """Fire every timer due at ``now``."""
        self.now = now
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, kind, key, gen = heapq.heappop(timers)
            _TIMER_HANDLERS[kind](self, key, gen, now)

    def step(self, now: int) -> int:
        """Fire due timers, run a cycle if something changed or the idle interval passed,
        clean up empty queues. Returns the number of allocations made."""
        self.now = now
        self.tick(now)
        n = 0
        due = self.changed or (not self.root.pending.is_zero()
                               and now >= self.last_cycle_ns + self.idle_interval_ns)
        if due:
            n = self.schedule(now)
        if self._queues_dirty:
            self._cleanup_queues(now)
        return n

    def schedule(self, now: int) -> int:
        """Run one scheduling cycle now (allocates as many asks as fit)."""
        self.now = now
        self.changed = False
        self.last_cycle_ns = now
        self.cycles += 1
        n, visited = scheduler.run_cycle(self, now)
        # Idle cycles (nothing changed; only asks ageing into a reservation can differ) are
        # spaced by their cost, ~1 us per waiting ask: at most ~10% of a core.
        self.idle_interval_ns = max(self.settings.idle_cycle_interval_ns, visited * IDLE_NS_PER_ASK)
        return n

    @property
    def root(self) -> Queue:
        return self.queues.root

    # ================================================================ asks
    def _add_ask(self, cmd: AddAsk, now: int) -> None:
        app = self.apps.get(cmd.app_id)
        rej = self.outcomes.rejected_asks
        if app is None or app.state in (AppState.FAILING, AppState.FAILED, AppState.REJECTED):
            rej.append(AskRejected(cmd.app_id, cmd.key, f"failed to find application {cmd.app_id}, for allocation ask {cmd.key}"))
            return
        if cmd.placeholder and not cmd.task_group:
            rej.append(AskRejected(cmd.app_id, cmd.key, f"ask cannot be nil when added to app {cmd.app_id}"))
            return
        ask = _ask_from(cmd, now, self.next_seq())
        if not cmd.key or cmd.max_allocations <= 0 or not cmd.resource.strictly_greater_than_zero():
            rej.append(AskRejected(cmd.app_id, cmd.key, f"invalid ask added to app {cmd.app_id}: {ask.describe()}"))
            return
        too_big = self.real_ask_too_big(app, ask)
        if too_big:
            rej.append(AskRejected(cmd.app_id, cmd.key, too_big))
            self.event(EventType.REQUEST, cmd.key, "PlaceholderTooSmall", too_big, now, group=app.app_id)
            return
        old = app.asks.get(cmd.key)
        if old is not None:
            self._unreserve_ask(app, old)
            if old.pending > 0:
                app.queue.sub_pending(old.resource.multiply(old.pending))
        app.add_ask(ask)
        app.queue.add_pending(ask.resource.multiply(ask.pending))
        if app.state is AppState.NEW or app.state is AppState.COMPLETING:
            self.app_event(app, AppEvent.RUN, now)
        self.changed = True

    def _release_ask(self, cmd: ReleaseAsk, now: int) -> None:
        if cmd.termination is Termination.TIMEOUT:
            return  # echo of a core-originated release (YuniKorn)
        app = self.apps.get(cmd.app_id)
        if app is None:
            return
        keys = [cmd.key] if cmd.key else list(app.asks)
        for key in keys:
            self._remove_ask(app, key)
        self._maybe_complete(app, now)

    def _remove_ask(self, app: Application, key: str) -> None:
        ask = app.asks.get(key)
        if ask is None:
            return
        self._unreserve_ask(app, ask)
        if ask.pending > 0:
            app.queue.sub_pending(ask.resource.multiply(ask.pending))
        app.remove_ask(key)

    # ================================================================ reservations
    def reserve(self, app: Application, ask: Ask, node, now: int) -> None:
        res = Reservation(node.node_id, app.app_id, ask.key, now)
        node.reservation = res
        self.nodes.refresh(node)
        ask.reserved_node = node.node_id
        app.reservations[ask.key] = res
        self.reservations[(app.app_id, ask.key)] = res
        self.sched_state(ask, SchedState.RESERVED, f"reserved node {node.node_id}")

    def unreserve(self, res: Reservation) -> None:
        self.reservations.pop((res.app_id, res.ask_key), None)
        node = self.nodes.get(res.node_id)
        if node is not None and node.reservation is res:
            node.reservation = None
            self.nodes.refresh(node)
        app = self.apps.get(res.app_id)
        if app is not None:
            if app.reservations.get(res.ask_key) is res:
                del app.reservations[res.ask_key]
            ask = app.asks.get(res.ask_key)
            if ask is not None and ask.reserved_node == res.node_id:
                ask.reserved_node = ""
        self.changed = True

    def _unreserve_ask(self, app: Application, ask: Ask) -> None:
        res = app.reservations.get(ask.key)
        if res is not None:
            self.unreserve(res)

    # ================================================================ allocations
    def allocate(self, app: Application, ask: Ask, node, now: int, uuid: str = "") -> Allocation:
        """Place one repeat of ``ask`` on ``node`` (checks were done by the caller)."""
        r = ask.resource
        alloc = Allocation(uuid=uuid or self.new_uuid(), key=ask.key, app_id=app.app_id, node_id=node.node_id,
                           resource=r, priority=ask.priority, create_time_ns=now,
                           queue_path=app.queue.path, tags=ask.tags, task_group=ask.task_group,
                           placeholder=ask.placeholder, originator=ask.originator,
                           allow_preempt_self=ask.allow_preempt_self,
                           allow_preemption=ask.allow_preemption)
        ask.pending -= 1
        if ask.placeholder:
            app.ph_pending -= 1
        app.pending = app.pending.sub(r)
        app.add_allocated(r)
        q = app.queue
        while q is not None:
            q.pending = q.pending.sub(r)
            q.allocated = q.allocated.add(r)
            q = q.parent
        app.allocations[alloc.uuid] = alloc
        node.allocations[alloc.uuid] = alloc
        self.nodes.update_allocated(node, r, 1)
        if self.limits.active:
            self.limits.on_alloc(app, r)
        self.allocations[alloc.uuid] = alloc
        if ask.execution_timeout_ms > 0:
            alloc.timeout_at_ns = now + ask.execution_timeout_ms * 1_000_000
            self._timer(alloc.timeout_at_ns, _T_ALLOC_TIMEOUT, alloc.uuid)
        self.outcomes.allocations.append(AllocationNew(alloc))
        if ask.sched_state:
            self.sched_state(ask, SchedState.SCHEDULED, f"allocated on node {node.node_id}")
        if ask.pending <= 0 and ask.reserved_node:
            self._unreserve_ask(app, ask)
        if alloc.placeholder:
            self.placeholder_allocated(app, alloc, now)
        elif app.state is not AppState.RUNNING:
            if app.state in (AppState.ACCEPTED, AppState.STARTING):
                self.app_event(app, AppEvent.RUN, now)
        return alloc

    def _release_alloc_cmd(self, cmd: ReleaseAlloc, now: int) -> None:
        app = self.apps.get(cmd.app_id)
        if app is None:
            return
        if cmd.uuid:
            alloc = app.allocations.get(cmd.uuid)
            targets = [alloc] if alloc is not None else []
        else:
            targets = list(app.allocations.values())
        # echo to the RM, except for echoes of our own releases (YuniKorn S10)
        report = cmd.termination not in (Termination.TIMEOUT, Termination.PLACEHOLDER_REPLACED)
        for alloc in targets:
            self._release_alloc(alloc, Termination.STOPPED_BY_RM,
                                "allocation remove as per RM request", now, report=report)

    def _release_alloc(self, alloc: Allocation, term: Termination, message: str, now: int,
                       report: bool, check_app: bool = True) -> None:
        """Remove an allocation from node, app and queues; report it as released if asked.
        ``check_app`` lets the app progress to Completing when this was its last work."""
        if self.allocations.pop(alloc.uuid, None) is None:
            return
        r = alloc.resource
        node = self.nodes.get(alloc.node_id)
        if node is not None and node.allocations.pop(alloc.uuid, None) is not None:
            self.nodes.update_allocated(node, r, -1)
        app = self.apps.get(alloc.app_id)
        if app is not None and app.allocations.pop(alloc.uuid, None) is not None:
            app.allocated = app.allocated.sub_checked(r, f"application {app.app_id} allocated")
            if alloc.placeholder:
                app.drop_placeholder(alloc)
            app.queue.sub_allocated(r)
            if self.limits.active:
                self.limits.on_release(app, r)
            ask = app.asks.get(alloc.key)
            if ask is not None and ask.pending <= 0:
                del app.asks[alloc.key]  # fully placed and now ending: keep memory bounded
        if report:
            self.outcomes.released.append(AllocationReleased(alloc.app_id, alloc.uuid, alloc.key, term, message))
        self.changed = True
        if app is not None and check_app:
            self._maybe_complete(app, now)

    def _on_alloc_timer(self, uuid: str, gen: int, now: int) -> None:
        alloc = self.allocations.get(uuid)
        if alloc is not None and alloc.timeout_at_ns and alloc.timeout_at_ns <= now:
            self._release_alloc(alloc, Termination.TIMEOUT,
                                f"allocation {uuid} exceeded its execution timeout", now, report=True)

    # ================================================================ config
    def update_config(self, config: PartitionConfig, now: int) -> None:
        """Apply a new partition config; raises ``ConfigError`` and keeps the old one on error."""
        from common.config.errors import ConfigError
        try:
            policy = parse_node_sort_policy(config.nodesortpolicy.type)
        except ValueError as exc:
            raise ConfigError([f"partition {self.name}: {exc}"]) from None
        try:
            QueueTree(config.root)  # dry run: a bad queue (e.g. an ACL) must not half-apply
        except ValueError as exc:
            raise ConfigError([f"partition {self.name}: {exc}"]) from None
        self.placement.update_rules(config.placementrules)
        created, draining = self.queues.update(config.root)
        self.nodes.set_policy(policy, dict(config.nodesortpolicy.resourceweights))
        self.root.max = self.total if self.nodes.nodes else None
        self.config = config
        self.limits.configure(config, self.apps.values())
        self.preemption_enabled = config.preemption.enabled
        self._queues_created(created, now)
        for path in draining:
            self.event(EventType.QUEUE, path, "QueueDraining", f"queue {path} removed from the config, draining", now)
        self._queues_dirty = True
        self.changed = True

    def _queues_created(self, created: list[str], now: int) -> None:
        for path in created:
            self.event(EventType.QUEUE, path, "QueueAdded", f"queue {path} created", now)

    def _cleanup_queues(self, now: int) -> None:
        self._queues_dirty = False
        for path in self.queues.remove_empty():
            self.event(EventType.QUEUE, path, "QueueRemoved", f"queue {path} removed", now)

    def stop(self, now: int, message: str = "PartitionRemoved") -> None:
        """Stop the partition (removed from the config): fail every app, remove every node."""
        self.state = ObjectState.STOPPED
        self.state_time_ns = now
        for app_id in list(self.apps):
            self.fail_application(app_id, message, now)
        for node_id in list(self.nodes.nodes):
            self._remove_node(RemoveNode(node_id), now)


def _ask_from(cmd: AddAsk, now: int, seq: int) -> Ask:
    tags = dict(cmd.tags)
    selector = tuple(sorted((k[len(NODE_SELECTOR_PREFIX):], v) for k, v in tags.items()
                            if k.startswith(NODE_SELECTOR_PREFIX)))
    allow = tags.get(TAG_ALLOW_PREEMPTION, "true").strip().lower() not in ("false", "f", "0")
    return Ask(key=cmd.key, app_id=cmd.app_id, resource=cmd.resource,
               max_allocations=cmd.max_allocations, pending=max(cmd.max_allocations, 0),
               priority=cmd.priority, create_time_ns=now, seq=seq, tags=tags,
               execution_timeout_ms=max(cmd.execution_timeout_ms, 0), placeholder=cmd.placeholder,
               task_group=cmd.task_group, originator=cmd.originator,
               allow_preempt_self=cmd.allow_preempt_self, allow_preempt_other=cmd.allow_preempt_other,
               required_node=tags.get(TAG_REQUIRED_NODE, ""), selector=selector,
               allow_preemption=allow)


_HANDLERS: dict[type, Callable[[Partition, object, int], None]] = {
    AddApp: Partition._add_app,
    RemoveApp: Partition._remove_app,
    AddAsk: Partition._add_ask,
    ReleaseAsk: Partition._release_ask,
    ReleaseAlloc: Partition._release_alloc_cmd,
    AddNode: NodeOps._add_node,
    UpdateNode: NodeOps._update_node,
    DrainNode: NodeOps._drain_node,
    UndrainNode: NodeOps._undrain_node,
    RemoveNode: NodeOps._remove_node,
}

_TIMER_HANDLERS = {
    T_STARTING: Partition._on_starting_timer,
    T_COMPLETING: Partition._on_completing_timer,
    T_EXPIRE: Partition._on_expire_timer,
    _T_ALLOC_TIMEOUT: Partition._on_alloc_timer,
    T_PLACEHOLDER: Partition._on_placeholder_timer,
}
