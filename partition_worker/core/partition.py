"""The partition: the single owner of queues, applications, asks, allocations and nodes.

Contract: commands in (``handle(cmd, now)``), outcomes out (``outcomes.drain()``),
time in (``tick(now)`` fires due timers, ``schedule(now)`` runs one cycle,
``step(now)`` does both when needed; ``next_wakeup_ns()`` says when ``step`` has work).
No I/O, no clock, no randomness of its own: UUIDs come from the injected ``new_uuid`` and
the creation time (``created_ns``) is passed in. One thread.

The partition owns its parts and wires them together; each has a small public surface:

- ``ledger`` (``ledger.Ledger``): asks' pending, allocations, reservations;
- ``lifecycle`` (``lifecycle.AppLifecycle``): apps, their state machine and timers;
- ``node_registry`` (``node_registry.NodeRegistry``): node commands, total capacity;
- ``gangs`` (``gang.Gangs``): placeholders and their timeout;
- ``timers`` (``timers.Timers``), ``nodes`` (``node.NodeCollection``), ``queues``,
  ``limits`` (``limits.LimitTracker``), ``placement``.

The policies (``scheduler``, ``reservations``, ``preemption``) use those surfaces and the
helpers here (``event``, ``sched_state``). Flows follow seed 002 and the reasons of
YUNIKORN_BEHAVIOUR.md 1.1.
"""

from __future__ import annotations

from typing import Callable

from common.compat import Compat
from common.config.model import PartitionConfig
from common.constants import TAG_NODE_SELECTOR_PREFIX, TAG_REQUIRED_NODE
from common.resources import Resource

from . import scheduler
from .app_state import AppEvent, AppState
from .application import Application
from .commands import (AddAllocation, AddApp, AddAsk, AddForeign, AddNode, DrainNode, ReleaseAlloc,
                       ReleaseAsk, ReleaseForeign, RemoveApp, RemoveNode, UndrainNode, UpdateNode)
from .foreign import ForeignAllocations
from .gang import Gangs
from .ledger import Ledger
from .lifecycle import AppLifecycle
from .limits import LimitTracker
from .node import NodeCollection, parse_node_sort_policy
from .node_registry import NodeRegistry
from .node_terms import constraints_of
from .objects import Allocation, Ask, Reservation, allows_preemption
from .outcomes import (AskRejected, Event, EventType, Outcomes, SchedState, SchedulingState,
                       Termination)
from .placement_bridge import PlacementBridge
from .queue import ObjectState, Queue, QueueTree
from .quota_preemption import QuotaPreemption
from .settings import CoreSettings
from .timers import Timers

__all__ = ["Partition"]

IDLE_NS_PER_ASK = 10_000
_GONE_APP_STATES = (AppState.FAILING, AppState.FAILED, AppState.REJECTED)
_RUN_ON_ASK = (AppState.NEW, AppState.COMPLETING)


class Partition:
    """One partition's scheduling state. ``name`` is the short name, ``full_name`` YuniKorn's
    ``[rmID]name`` used in messages. ``new_uuid`` makes allocation UUIDs; ``created_ns`` is the
    partition's creation time (its first state change, REST ``lastStateTransitionTime``).
    ``key_is_uuid``: an allocation's UUID is its ask's key (one allocation per ask, the key is
    the RM's identity of it, as in SI >= 1.6); set by the adapter before the first allocation."""

    def __init__(self, name: str, config: PartitionConfig, settings: CoreSettings | None = None,
                 rm_id: str = "", *, new_uuid: Callable[[], str], created_ns: int) -> None:
        self.name = name
        self.full_name = f"[{rm_id}]{name}" if rm_id else name
        self.settings = settings or CoreSettings()
        self.new_uuid = new_uuid
        self.key_is_uuid = False
        self.outcomes = Outcomes()
        self.state = ObjectState.ACTIVE
        self.state_time_ns = created_ns
        self.last_cycle_stages: dict[str, float] | None = None  # seconds per stage of the last cycle
        self.queues = QueueTree(config.root, self.settings.compat.stateaware_is_fifo)
        policy = parse_node_sort_policy(config.nodesortpolicy.type)
        self.nodes = NodeCollection(policy, dict(config.nodesortpolicy.resourceweights))
        self.placement = PlacementBridge(config.placementrules, self.settings.group_lookup)
        self.config = config
        self.limits = LimitTracker()  # user/group limits (inactive when none configured)
        self.limits.configure(config, ())
        self.preemption_enabled = config.preemption.enabled
        self.changed = True  # something happened that a cycle may act on
        self.queues_dirty = False  # queues may have become empty: clean up after the cycle
        self.last_cycle_ns = 0
        self.now = 0  # time of the command or step being processed (for records only)
        self.cycles = 0
        self.idle_interval_ns = self.settings.idle_cycle_interval_ns
        self._seq = 0
        # the parts; each registers its timer kinds
        self.timers = Timers()
        self.ledger = Ledger(self, self.timers)
        self.lifecycle = AppLifecycle(self, self.timers)
        self.gangs = Gangs(self, self.timers)
        self.node_registry = NodeRegistry(self)
        self.quota = QuotaPreemption(self)  # quota-change preemption (1.8)
        self.foreign = ForeignAllocations(self)  # allocations of other schedulers (1.7)
        # read-only views of the parts' books (the dicts themselves, never rebound)
        self.apps: dict[str, Application] = self.lifecycle.apps
        self.finished_apps: dict[str, Application] = self.lifecycle.finished_apps
        self.allocations: dict[str, Allocation] = self.ledger.allocations
        self.reservations: dict[tuple[str, str], Reservation] = self.ledger.reservations

    # ================================================================ dispatch
    def handle(self, cmd: object, now: int) -> None:
        """Apply one command. Unknown command types raise ``TypeError`` naming the type."""
        fn = _HANDLERS.get(type(cmd))
        if fn is None:
            raise TypeError(f"partition {self.name}: unknown command {type(cmd).__name__}")
        self.now = now
        fn(self, cmd, now)

    def next_seq(self) -> int:
        """Arrival order of apps and asks (a sort tie-breaker)."""
        self._seq += 1
        return self._seq

    @property
    def root(self) -> Queue:
        return self.queues.root

    @property
    def total(self) -> Resource:
        """The sum of the node capacities (root's max while there are nodes)."""
        return self.node_registry.total

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

    def queues_created(self, paths: list[str], now: int) -> None:
        """Report queues made by placement, recovery or a config update (QUEUE events)."""
        for path in paths:
            self.event(EventType.QUEUE, path, "QueueAdded", f"queue {path} created", now)

    # ================================================================ time
    def next_wakeup_ns(self) -> int | None:
        """Earliest deadline: a timer, or the next idle cycle while asks are pending."""
        t = self.timers.next_deadline()
        if self.changed or self.queues_dirty:
            return self.last_cycle_ns  # due now
        if self.root.pending.is_zero() or not self.nodes.nodes:
            return t
        idle = self.last_cycle_ns + self.idle_interval_ns
        return idle if t is None else min(t, idle)

    def tick(self, now: int) -> None:
        """Fire every timer due at ``now``."""
        self.now = now
        self.timers.fire_due(now)

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
        if self.queues_dirty:
            self._cleanup_queues(now)
        return n

    def schedule(self, now: int) -> int:
        """Run one scheduling cycle now (allocates as many asks as fit)."""
        self.now = now
        self.changed = False
        self.last_cycle_ns = now
        self.cycles += 1
        n, visited = scheduler.run_cycle(self, now)
        if n >= self.settings.cycle_allocation_limit > 0:
            self.changed = True  # stopped at the bound: more may fit, the next step goes on
        # Idle cycles (nothing changed; only asks ageing into a reservation can differ) are
        # spaced by their cost, ~1 us per waiting ask: at most ~10% of a core.
        self.idle_interval_ns = max(self.settings.idle_cycle_interval_ns, visited * IDLE_NS_PER_ASK)
        return n

    # ================================================================ asks and releases
    def _add_ask(self, cmd: AddAsk, now: int) -> None:
        app = self.apps.get(cmd.app_id)
        rej = self.outcomes.rejected_asks
        if app is None or app.state in _GONE_APP_STATES:
            rej.append(AskRejected(cmd.app_id, cmd.key, f"failed to find application {cmd.app_id}, for allocation ask {cmd.key}"))
            return
        if cmd.placeholder and not cmd.task_group:
            rej.append(AskRejected(cmd.app_id, cmd.key, f"ask cannot be nil when added to app {cmd.app_id}"))
            return
        ask = _ask_from(cmd, now, self.next_seq())
        if not cmd.key or cmd.max_allocations <= 0 or not cmd.resource.strictly_greater_than_zero():
            rej.append(AskRejected(cmd.app_id, cmd.key, f"invalid ask added to app {cmd.app_id}: {ask.describe()}"))
            return
        too_big = self.gangs.real_ask_too_big(app, ask)
        if too_big:
            rej.append(AskRejected(cmd.app_id, cmd.key, too_big))
            self.event(EventType.REQUEST, cmd.key, "PlaceholderTooSmall", too_big, now, group=app.app_id)
            return
        self.ledger.add_ask(app, ask)
        if app.state in _RUN_ON_ASK:
            self.lifecycle.fire(app, AppEvent.RUN, now)
        self.changed = True

    def _release_ask(self, cmd: ReleaseAsk, now: int) -> None:
        if cmd.termination is Termination.TIMEOUT:
            return  # echo of a core-originated release (YuniKorn)
        app = self.apps.get(cmd.app_id)
        if app is None:
            return
        keys = [cmd.key] if cmd.key else list(app.asks)
        for key in keys:
            self.ledger.remove_ask(app, key)
        self.lifecycle.maybe_complete(app, now)

    def _release_alloc(self, cmd: ReleaseAlloc, now: int) -> None:
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
            self.ledger.release(alloc, Termination.STOPPED_BY_RM,
                                "allocation remove as per RM request", now, report=report)

    # ================================================================ config
    def check_config(self, config: PartitionConfig) -> None:
        """Raise ``ConfigError`` naming the partition if ``update_config`` would refuse ``config``
        (node sort policy, queues, placement rules); changes nothing."""
        from common.config.errors import ConfigError
        try:
            parse_node_sort_policy(config.nodesortpolicy.type)
            QueueTree(config.root)  # dry run: a bad queue (e.g. an ACL) must not half-apply
        except ValueError as exc:
            raise ConfigError([f"partition {self.name}: {exc}"]) from None
        PlacementBridge.check_rules(config.placementrules)

    def update_config(self, config: PartitionConfig, now: int, compat: Compat | None = None) -> None:
        """Apply a new partition config (and compatibility switch; ``None``: unchanged); raises
        ``ConfigError`` and keeps the old one on error."""
        self.check_config(config)
        policy = parse_node_sort_policy(config.nodesortpolicy.type)
        self.placement.update_rules(config.placementrules)
        if compat is not None:
            self.settings.compat = compat
            self.queues.stateaware_fifo = compat.stateaware_is_fifo
        old_delays = {q.path: q.quota_preemption_delay_ns for q in self.queues}
        created, draining = self.queues.update(config.root)
        self.nodes.set_policy(policy, dict(config.nodesortpolicy.resourceweights))
        self.root.max = self.total if self.nodes.nodes else None
        self.config = config
        self.limits.configure(config, self.apps.values())
        self.preemption_enabled = config.preemption.enabled
        self.quota.config_updated(old_delays, now)
        self.queues_created(created, now)
        for path in draining:
            self.event(EventType.QUEUE, path, "QueueDraining", f"queue {path} removed from the config, draining", now)
        self.queues_dirty = True
        self.changed = True

    def set_group_lookup(self, group_lookup) -> None:
        """The partition's usergroupresolver changed (the worker built and checked the lookup)."""
        self.settings.group_lookup = group_lookup
        self.placement.set_lookup(group_lookup)

    def _cleanup_queues(self, now: int) -> None:
        self.queues_dirty = False
        for path in self.queues.remove_empty():
            self.event(EventType.QUEUE, path, "QueueRemoved", f"queue {path} removed", now)

    def fail_application(self, app_id: str, message: str, now: int) -> None:
        """Fail an app (partition removal, RM): Failing, work released, then Failed."""
        self.lifecycle.fail(app_id, message, now)

    def stop(self, now: int, message: str = "PartitionRemoved") -> None:
        """Stop the partition (removed from the config): fail every app, remove every node."""
        self.state = ObjectState.STOPPED
        self.state_time_ns = now
        for app_id in list(self.apps):
            self.lifecycle.fail(app_id, message, now)
        for node_id in list(self.nodes.nodes):
            self.node_registry.remove(RemoveNode(node_id), now)


def _ask_from(cmd: AddAsk, now: int, seq: int) -> Ask:
    tags = dict(cmd.tags)
    if tags:
        selector = tuple(sorted((k[len(TAG_NODE_SELECTOR_PREFIX):], v) for k, v in tags.items()
                                if k.startswith(TAG_NODE_SELECTOR_PREFIX)))
        allow = allows_preemption(tags)
        required = tags.get(TAG_REQUIRED_NODE, "")
        constraints = constraints_of(tags)
    else:
        selector, allow, required, constraints = (), True, "", None
    m = cmd.max_allocations
    # positional: keywords cost a third of the build (tests/core/test_objects.py pins the order)
    return Ask(cmd.key, cmd.app_id, cmd.resource, m, m if m > 0 else 0, cmd.priority, now, seq, tags,
               max(cmd.execution_timeout_ms, 0), cmd.placeholder, cmd.task_group, cmd.originator,
               cmd.allow_preempt_self, cmd.allow_preempt_other, required, selector, allow, constraints)


# command type -> handler(partition, command, now) (STYLE #11: dispatch by table)
_HANDLERS: dict[type, Callable[[Partition, object, int], None]] = {
    AddApp: lambda p, cmd, now: p.lifecycle.add(cmd, now),
    RemoveApp: lambda p, cmd, now: p.lifecycle.remove(cmd, now),
    AddAsk: Partition._add_ask,
    ReleaseAsk: Partition._release_ask,
    ReleaseAlloc: Partition._release_alloc,
    AddAllocation: lambda p, cmd, now: p.node_registry.place(cmd, now),
    AddNode: lambda p, cmd, now: p.node_registry.add(cmd, now),
    UpdateNode: lambda p, cmd, now: p.node_registry.update(cmd, now),
    DrainNode: lambda p, cmd, now: p.node_registry.drain(cmd, now),
    UndrainNode: lambda p, cmd, now: p.node_registry.undrain(cmd, now),
    RemoveNode: lambda p, cmd, now: p.node_registry.remove(cmd, now),
    AddForeign: lambda p, cmd, now: p.foreign.add(cmd, now),
    ReleaseForeign: lambda p, cmd, now: p.foreign.release(cmd, now),
}
