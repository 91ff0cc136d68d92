"""The partition: the single owner of queues, applications, asks, allocations and nodes.

Contract: commands in (``handle(cmd, now)``), outcomes out (``outcomes.drain()``),
time in (``tick(now)`` fires due timers, ``schedule(now)`` runs one cycle,
``step(now)`` does both when needed; ``next_wakeup_ns()`` says when ``step`` has work).
No I/O, no clock, no randomness of its own: UUIDs come from the injected ``new_uuid`` and
the creation time (``created_ns``) is passed in. One thread.

The partition builds its parts and gives each what it uses (never the partition itself):

- ``ledger`` (``ledger.Ledger``): asks' pending, allocations, reservations;
- ``gangs`` (``gang.Gangs``): placeholders and their timeout;
- ``lifecycle`` (``lifecycle.AppLifecycle``): apps, their state machine and timers;
- ``node_registry`` (``node_registry.NodeRegistry``): node commands, total capacity;
- ``foreign`` (``foreign.ForeignAllocations``), ``quota`` (``quota_preemption.QuotaPreemption``);
- ``scheduler`` (``scheduler.Scheduler``): the cycle, with ``preemption``
  (``preemption.Preemption``);
- ``timers`` (``timers.Timers``), ``nodes`` (``node.NodeCollection``), ``queues``,
  ``limits`` (``limits.LimitTracker``), ``placement``, ``outcomes``.

A part does its own job and returns what happened; the steps that cross parts are here, so
one command is followed in this file: an allocation (ledger) may complete a gang (gangs) and
move the app on (lifecycle) (``allocate``, ``replace_placeholder``, ``_allocated``); a release
may end the app's work (``release``); a node's existing allocations are booked for apps that
may not exist yet (``_recover``); the timers whose handling crosses parts (allocation and
placeholder timeouts) are handled here. Whether a cycle has something to do is derived: each
part counts the changes it makes that a cycle may act on (``_changes``). Flows follow seed 002
and the reasons of YUNIKORN_BEHAVIOUR.md 1.1.
"""

from __future__ import annotations

import itertools
from typing import Callable

from common.compat import Compat
from common.config.model import PartitionConfig
from common.constants import TAG_GANG_TOPOLOGY, TAG_NODE_SELECTOR_PREFIX, TAG_REQUIRED_NODE
from common.resources import Resource

from .app_state import AppEvent, AppState
from .application import Application
from .commands import (AddAllocation, AddApp, AddAsk, AddForeign, AddNode, DrainNode, RecoveredAlloc,
                       ReleaseAlloc, ReleaseAsk, ReleaseForeign, RemoveApp, RemoveNode, ResizeAllocation,
                       UndrainNode, UpdateNode)
from .feasibility import gate
from .foreign import ForeignAllocations
from .gang import T_PLACEHOLDER, Gangs, GangTimeout, REASON_RESERVATION_TIMEOUT
from .ledger import T_ALLOC_TIMEOUT, Ledger
from .lifecycle import AppLifecycle, report_queues_created
from .limits import LimitTracker
from .node import Node, NodeCollection, parse_node_sort_policy
from .node_registry import NodeRegistry, recovered_allocation
from .node_terms import constraints_of, host_ports_of
from .objects import Allocation, Ask, Reservation, allows_preemption
from .outcomes import AllocationNew, AskRejected, EventType, Outcomes, Termination
from .placement_bridge import PlacementBridge
from .preemption import Preemption
from .queue import ObjectState, Queue, QueueTree
from .quota_preemption import QuotaPreemption
from .scheduler import Scheduler
from .settings import CoreSettings
from .timers import Timers
from .topology import TopologyIndex, levels_of, request_of

__all__ = ["Partition"]

IDLE_NS_PER_ASK = 10_000
_GONE_APP_STATES = (AppState.FAILING, AppState.FAILED, AppState.REJECTED)
_RUN_ON_ASK = (AppState.NEW, AppState.COMPLETING)
_RUN_ON_ALLOCATION = (AppState.ACCEPTED, AppState.STARTING)
_RUN_ON_RECOVERY = (AppState.ACCEPTED, AppState.STARTING, AppState.COMPLETING)


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
        self.outcomes = Outcomes()
        self.state = ObjectState.ACTIVE
        self.state_time_ns = created_ns
        self.last_cycle_stages: dict[str, float] | None = None  # seconds per stage of the last cycle
        self.queues = QueueTree(config.root, self.settings.compat.stateaware_is_fifo)
        policy = parse_node_sort_policy(config.nodesortpolicy.type)
        self.nodes = NodeCollection(gate, policy, dict(config.nodesortpolicy.resourceweights))
        self.placement = PlacementBridge(config.placementrules, self.settings.group_lookup)
        self.config = config
        self.limits = LimitTracker()  # user/group limits (inactive when none configured)
        self.limits.configure(config, ())
        self.last_cycle_ns = 0
        self.cycles = 0
        self.idle_interval_ns = self.settings.idle_cycle_interval_ns
        self._seq = itertools.count(1)  # arrival order of apps and asks (a sort tie-breaker)
        # the parts, each given what it uses; each registers the timer kinds it handles
        self.timers = Timers()
        self.apps: dict[str, Application] = {}  # the lifecycle's; the ledger and others read it
        self._set_topology(config)
        self.ledger = Ledger(self.nodes, self.limits, self.outcomes, self.timers, self.apps, new_uuid)
        self.gangs = Gangs(self.ledger, self.nodes, self.outcomes, self.timers, self.settings)
        self.lifecycle = AppLifecycle(self.apps, self.full_name, self.queues, self.placement,
                                      self.limits, self.ledger, self.gangs, self.outcomes,
                                      self.timers, self.settings, self._seq)
        self.node_registry = NodeRegistry(name, self.full_name, self.nodes, self.queues.root,
                                          self.ledger, self.apps, self.outcomes)
        self.foreign = ForeignAllocations(self.nodes, self.outcomes)  # other schedulers' pods (1.7)
        self.quota = QuotaPreemption(config.preemption.quotapreemptionenabled, self.queues,
                                     self.timers, self.outcomes, self.release)  # quota change (1.8)
        self.preemption = Preemption(_preemption_on(config, self.settings.compat), self.nodes, self.apps,
                                     self.ledger, self.outcomes, self.settings, self.release)
        self.scheduler = Scheduler(self.queues.root, self.nodes, self.apps, self.ledger, self.limits,
                                   self.gangs, self.outcomes, self.settings, self.preemption,
                                   self.allocate, self.replace_placeholder, name)
        self.timers.register(T_ALLOC_TIMEOUT, self._on_alloc_timeout)
        self.timers.register(T_PLACEHOLDER, self._on_placeholder_timeout)
        # read-only views of the parts' books (the dicts themselves, never rebound)
        self.finished_apps: dict[str, Application] = self.lifecycle.finished_apps
        self.allocations: dict[str, Allocation] = self.ledger.allocations
        self.reservations: dict[tuple[str, str], Reservation] = self.ledger.reservations
        # what the last cycle saw (see ``changed``) and the last queue clean-up
        self._config_changes = 0
        self._cycle_saw = -1  # a new partition has something to look at
        self._cycle_cut_short = False
        self._queues_cleaned_at = self._queue_changes()

    # ================================================================ dispatch
    def handle(self, cmd: object, now: int) -> None:
        """Apply one command. Unknown command types raise ``TypeError`` naming the type."""
        fn = _HANDLERS.get(type(cmd))
        if fn is None:
            raise TypeError(f"partition {self.name}: unknown command {type(cmd).__name__}")
        fn(self, cmd, now)

    @property
    def root(self) -> Queue:
        return self.queues.root

    @property
    def total(self) -> Resource:
        """The sum of the node capacities (root's max while there are nodes)."""
        return self.node_registry.total

    @property
    def preemption_enabled(self) -> bool:
        """Queue preemption: the partition's ``preemption.enabled``; unset, on from compatibility
        1.4 (YuniKorn's default since then), off before."""
        return self.preemption.enabled

    @property
    def key_is_uuid(self) -> bool:
        return self.ledger.key_is_uuid

    @key_is_uuid.setter
    def key_is_uuid(self, value: bool) -> None:
        self.ledger.key_is_uuid = value

    def event(self, etype: EventType, object_id: str, reason: str, message: str, now: int,
              group: str = "") -> None:
        """Report an event (the adapter's own, e.g. a malformed SI message)."""
        self.outcomes.event(etype, object_id, reason, message, now, group)

    # ================================================================ what a cycle acts on
    def _changes(self) -> int:
        """Grows with every change a cycle may act on; each part counts its own: asks added,
        allocations released or recovered, reservations dropped (ledger), nodes added, resized,
        updated or schedulable again (node registry), foreign pods (foreign), a gang placed or
        timed out (gangs), a config update, a pod placed that an ask's pod affinity or topology
        spread counts (``interpod.PodIndex.helps``)."""
        return (self.ledger.changes + self.node_registry.changes + self.foreign.changes
                + self.gangs.changes + self._config_changes + self.nodes.pods.helps)

    @property
    def changed(self) -> bool:
        """Something happened since the last cycle began that a cycle may act on (or the last
        cycle stopped at ``cycle_allocation_limit``)."""
        return self._cycle_cut_short or self._changes() != self._cycle_saw

    def _queue_changes(self) -> tuple[int, int]:
        """Grows when a queue may have become empty: an app left it, placement made a queue no
        app took (lifecycle), a config update (queues removed from it drain)."""
        return self.lifecycle.queue_changes, self._config_changes

    # ================================================================ time
    def next_wakeup_ns(self) -> int | None:
        """Earliest deadline: a timer, or the next idle cycle while asks are pending."""
        t = self.timers.next_deadline()
        if self.changed or self._queue_changes() != self._queues_cleaned_at:
            return self.last_cycle_ns  # due now
        if self.root.pending.is_zero() or not self.nodes.nodes:
            return t
        idle = self.last_cycle_ns + self.idle_interval_ns
        return idle if t is None else min(t, idle)

    def tick(self, now: int) -> None:
        """Fire every timer due at ``now``."""
        self.timers.fire_due(now)

    def step(self, now: int) -> int:
        """Fire due timers, run a cycle if something changed or the idle interval passed,
        clean up empty queues. Returns the number of allocations made."""
        self.tick(now)
        n = 0
        due = self.changed or (not self.root.pending.is_zero()
                               and now >= self.last_cycle_ns + self.idle_interval_ns)
        if due:
            n = self.schedule(now)
        if self._queue_changes() != self._queues_cleaned_at:
            self._cleanup_queues(now)
        return n

    def schedule(self, now: int) -> int:
        """Run one scheduling cycle now (allocates as many asks as fit)."""
        self._cycle_saw = self._changes()
        self._cycle_cut_short = False
        self.last_cycle_ns = now
        self.cycles += 1
        n, visited, stages = self.scheduler.run_cycle(now)
        if stages is not None:
            self.last_cycle_stages = stages
        # stopped at the bound: more may fit, the next step goes on
        self._cycle_cut_short = n >= self.settings.cycle_allocation_limit > 0
        # Idle cycles (nothing changed; only asks ageing into a reservation can differ) are
        # spaced by their cost, ~1 us per waiting ask: at most ~10% of a core.
        self.idle_interval_ns = max(self.settings.idle_cycle_interval_ns, visited * IDLE_NS_PER_ASK)
        return n

    def _on_alloc_timeout(self, uuid: str, gen: int, now: int) -> None:
        alloc = self.ledger.timed_out(uuid, now)
        if alloc is not None:
            self.release(alloc, Termination.TIMEOUT, f"allocation {uuid} exceeded its execution timeout", now)

    def _on_placeholder_timeout(self, app_id: str, gen: int, now: int) -> None:
        """The gang released what its timeout takes; the app moves on by what it meant."""
        app = self.apps.get(app_id)
        verdict = self.gangs.timed_out(app, gen, now) if app is not None else None
        lifecycle = self.lifecycle
        if verdict is GangTimeout.STARTED:
            lifecycle.maybe_complete(app, now)
        elif verdict is GangTimeout.HARD:
            lifecycle.fire(app, AppEvent.FAIL, now, REASON_RESERVATION_TIMEOUT)
            if app.state is AppState.FAILING:
                lifecycle.maybe_complete(app, now)
        elif verdict is GangTimeout.SOFT:
            if lifecycle.fire(app, AppEvent.RESUME, now, REASON_RESERVATION_TIMEOUT):
                lifecycle.fire(app, AppEvent.RUN, now)  # Resuming -> Accepted: normal scheduling

    # ================================================================ allocations and their consequences
    def allocate(self, app: Application, ask: Ask, node: Node, now: int) -> Allocation:
        """Place one repeat of ``ask`` on ``node`` (the caller checked that it may) and move the
        app on."""
        alloc = self.ledger.allocate(app, ask, node, now)
        if alloc.placeholder or app.state in _RUN_ON_ALLOCATION:  # (else nothing follows: no call)
            self._allocated(app, alloc, now)
        return alloc

    def replace_placeholder(self, app: Application, ask: Ask, ph: Allocation, now: int) -> Allocation:
        """Swap the placeholder ``ph`` for one repeat of the real ``ask`` (gang.py), and move the
        app on."""
        alloc = self.gangs.replace(app, ask, ph, now)
        self._allocated(app, alloc, now)
        return alloc

    def _allocated(self, app: Application, alloc: Allocation, now: int) -> None:
        """A placeholder may complete its gang (an Accepted app starts); a real allocation moves
        an Accepted or Starting app on."""
        if alloc.placeholder:
            if self.gangs.placeholder_allocated(app, alloc, now) and app.state is AppState.ACCEPTED:
                self.lifecycle.fire(app, AppEvent.RUN, now)
        elif app.state in _RUN_ON_ALLOCATION:
            self.lifecycle.fire(app, AppEvent.RUN, now)

    def release(self, alloc: Allocation, term: Termination, message: str, now: int,
                report: bool = True) -> None:
        """Release ``alloc`` (reported unless ``report`` is False); its app may be done."""
        app = self.ledger.release(alloc, term, message, now, report)
        if app is not None:
            self.lifecycle.maybe_complete(app, now)

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
        ask = _ask_from(cmd, now, next(self._seq))
        if not cmd.key or cmd.max_allocations <= 0 or not cmd.resource.strictly_greater_than_zero():
            rej.append(AskRejected(cmd.app_id, cmd.key, f"invalid ask added to app {cmd.app_id}: {ask.describe()}"))
            return
        if not self._ask_topology(app, ask, cmd):
            return
        too_big = self.gangs.real_ask_too_big(app, ask)
        if too_big:
            rej.append(AskRejected(cmd.app_id, cmd.key, too_big))
            self.outcomes.event(EventType.REQUEST, cmd.key, "PlaceholderTooSmall", too_big, now, group=app.app_id)
            return
        self.ledger.add_ask(app, ask)
        if app.state in _RUN_ON_ASK:
            self.lifecycle.fire(app, AppEvent.RUN, now)

    def _ask_topology(self, app: Application, ask: Ask, cmd: AddAsk) -> bool:
        """The ask shares its app's gang-topology request; an app without one takes the ask's
        tag (a placeholder pod may carry it). False: the ask's tag is bad, the ask rejected."""
        if app.topology is None and TAG_GANG_TOPOLOGY in ask.tags:
            req = request_of(f"ask {ask.key} of application {app.app_id}", ask.tags)
            if isinstance(req, str):
                self.outcomes.rejected_asks.append(AskRejected(cmd.app_id, cmd.key, req))
                return False
            app.topology = req
            for other in app.asks.values():
                other.topology = req
        ask.topology = app.topology
        return True

    def _set_topology(self, config: PartitionConfig) -> None:
        """The topology levels of ``config``: the domains are read again from every node when
        change (a hot reload may add a level); pins are dropped then, and chosen again for the
        placeholders still to place."""
        levels = levels_of(config)
        old = self.nodes.topology
        if (old.levels if old is not None else ()) == levels:
            return
        for node in self.nodes.nodes.values():
            node.domains = ()
        self.nodes.topology = TopologyIndex(levels, self.nodes.nodes.values()) if levels else None
        for app in self.apps.values():
            t = app.topology
            if t is not None and t.pin is not None:
                t.pin = None  # (its nodes keep their placeholders; the rest is chosen again)

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
            self.release(alloc, Termination.STOPPED_BY_RM, "allocation remove as per RM request", now,
                         report=report)

    def _resize(self, cmd: ResizeAllocation, now: int) -> None:
        """The ``ResizeAllocation`` command (in-place resize, YuniKorn 1.6): the allocation's node,
        app, queues and user/group usage take the new size. A growth its node has no room for
        is refused (the kubelet's answer to such a resize, which YuniKorn's core leaves to it),
        so is a size that is empty or negative, and a placeholder's: each rejection names the
        allocation and the size it keeps. A queue it takes over its max arms quota preemption,
        as recovery does (YuniKorn books a resize over a max "at any cost")."""
        app = self.apps.get(cmd.app_id)
        alloc = app.allocations.get(cmd.uuid) if app is not None else None
        rejected = self.outcomes.rejected_asks
        if alloc is None:
            rejected.append(AskRejected(cmd.app_id, cmd.uuid, f"allocation {cmd.uuid} of application "
                                                              f"{cmd.app_id} is not placed: nothing to resize"))
            return
        old, new = alloc.resource, cmd.resource
        what = f"allocation {alloc.key} of application {app.app_id} on node {alloc.node_id}"
        why = ("allocation contains no resources" if new.is_zero()
               else "allocation contains negative resources" if new.has_negative()
               else "a placeholder is not resized" if alloc.placeholder else "")
        node = self.nodes.get(alloc.node_id)
        if not why and node is not None:
            av = node.available._v
            short = {k: v - old.get(k) for k, v in new._v.items() if v - old.get(k) > max(av.get(k, 0), 0)}
            if short:
                why = (f"node {node.node_id} has no room to grow it by {Resource(short)} "
                       f"(free: {node.available.prune()})")
        if why:
            message = f"resize of {what} to {new} refused: {why}; it keeps {old}"
            rejected.append(AskRejected(app.app_id, alloc.key, message))
            self.outcomes.event(EventType.REQUEST, alloc.key, "AllocationResizeRefused", message, now,
                                group=app.app_id)
            return
        if new == old:
            return
        self.ledger.resize(app, alloc, node, new)
        self.quota.recovered(app.queue, now)  # a queue it took over its max is armed
        self.outcomes.event(EventType.REQUEST, alloc.key, "AllocationResized",
                            f"{what} resized from {old} to {new}", now, group=app.app_id)

    # ================================================================ nodes
    def _add_node(self, cmd: AddNode, now: int) -> None:
        node = self.node_registry.add(cmd, now)
        if node is None:
            return
        for ra in cmd.existing:
            self._recover(node, ra, now)
        self.node_registry.accepted(node, now)

    def _place(self, cmd: AddAllocation, now: int) -> None:
        """The ``AddAllocation`` command: an allocation the RM placed on one of its nodes. Booked
        as a recovered one (no checks of headroom or limits: it runs already), its pending ask of
        the same key gone, and reported as new; a rejection names the allocation."""
        ra = cmd.alloc
        node = self.nodes.get(ra.node_id)
        err = (f"failed to find node {ra.node_id}" if node is None
               else self.node_registry.recovery_error(ra, ra.node_id, set()))
        if err:
            self.outcomes.rejected_asks.append(AskRejected(ra.app_id, ra.key, err))
            return
        app = self.apps.get(ra.app_id)
        if app is not None and ra.key in app.asks:
            self.ledger.remove_ask(app, ra.key)
        self.outcomes.allocations.append(AllocationNew(self._recover(node, ra, now)))

    def _recover(self, node: Node, ra: RecoveredAlloc, now: int) -> Allocation:
        """Book an allocation the RM runs already on ``node``, without scheduling and without a
        max check. An app the RM has not added yet is created in ``root.@recovery@`` and moved
        to its placed queue when the RM adds it (Korral's take on YuniKorn >= 1.4 recovery)."""
        lifecycle = self.lifecycle
        app = lifecycle.adopt_recovered(ra.app_id, now)
        alloc = recovered_allocation(ra, app, node, now)
        self.ledger.book_recovered(app, node, alloc)
        bad_ports = host_ports_of(alloc.tags)[1]
        if bad_ports:  # booked all the same: it runs; its ports are not known
            self.outcomes.event(EventType.NODE, node.node_id, "InvalidAllocationTag",
                                f"allocation {alloc.key} on node {node.node_id}: {bad_ports}", now)
        self.quota.recovered(app.queue, now)  # no max check here: a lowered max may be exceeded
        if ra.placeholder:
            self.gangs.placeholder_recovered(app, alloc, now)
        if app.state is AppState.NEW:
            lifecycle.fire(app, AppEvent.RUN, now)
        if not ra.placeholder and app.state in _RUN_ON_RECOVERY:
            lifecycle.fire(app, AppEvent.RUN, now)
        return alloc

    def _remove_node(self, cmd: RemoveNode, now: int) -> None:
        """The ``RemoveNode`` command (DECOMISSION): its allocations are released (reported)."""
        node = self.nodes.get(cmd.node_id)
        if node is None:
            return  # unknown node: ignored (YuniKorn)
        if node.reservation is not None:
            self.ledger.unreserve(node.reservation)
        msg = f"Node {node.node_id} Removed"
        for alloc in list(node.allocations.values()):
            self.release(alloc, Termination.STOPPED_BY_RM, msg, now)
        self.foreign.node_removed(node)
        self.node_registry.remove(node, now)

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
        self.config = config
        if compat is not None:
            self.set_compat(compat)
        old_delays = {q.path: q.quota_preemption_delay_ns for q in self.queues}
        created, draining = self.queues.update(config.root)
        self.nodes.set_policy(policy, dict(config.nodesortpolicy.resourceweights))
        self._set_topology(config)
        self.node_registry.follow_total()
        self.limits.configure(config, self.apps.values())
        self.preemption.enabled = _preemption_on(config, self.settings.compat)
        self.quota.config_updated(config.preemption.quotapreemptionenabled, old_delays, now)
        report_queues_created(self.outcomes, created, now)
        for path in draining:
            self.outcomes.event(EventType.QUEUE, path, "QueueDraining",
                                f"queue {path} removed from the config, draining", now)
        self._config_changes += 1

    def set_compat(self, compat: Compat) -> None:
        """Follow another compatibility switch from now on (the RM's extraConfig changed, or its
        SI revision chose it): every behaviour reads it at its next decision; what the config
        leaves to it (stateaware queues, ``preemption.enabled`` unset) follows at once."""
        self.settings.compat = compat
        self.queues.stateaware_fifo = compat.stateaware_is_fifo
        self.preemption.enabled = _preemption_on(self.config, compat)
        self._config_changes += 1  # a cycle may now act differently

    def set_group_lookup(self, group_lookup) -> None:
        """The partition's usergroupresolver changed (the worker built and checked the lookup)."""
        self.settings.group_lookup = group_lookup
        self.placement.set_lookup(group_lookup)

    def _cleanup_queues(self, now: int) -> None:
        self._queues_cleaned_at = self._queue_changes()
        for path in self.queues.remove_empty():
            self.outcomes.event(EventType.QUEUE, path, "QueueRemoved", f"queue {path} removed", now)

    def fail_application(self, app_id: str, message: str, now: int) -> None:
        """Fail an app (partition removal, RM): Failing, work released, then Failed."""
        self.lifecycle.fail(app_id, message, now)

    def stop(self, now: int, message: str = "PartitionRemoved") -> None:
        """Stop the partition (removed from the config): fail every app, remove every node;
        new apps and nodes are rejected from now on."""
        self.state = ObjectState.STOPPED
        self.state_time_ns = now
        self.lifecycle.close()
        self.node_registry.close()
        for app_id in list(self.apps):
            self.lifecycle.fail(app_id, message, now)
        for node_id in list(self.nodes.nodes):
            self._remove_node(RemoveNode(node_id), now)


def _preemption_on(config: PartitionConfig, compat: Compat) -> bool:
    """Queue preemption: ``preemption.enabled`` as configured; unset, YuniKorn's default of the
    compatibility version (on since 1.4)."""
    enabled = config.preemption.enabled
    return compat.preemption_on_by_default if enabled is None else enabled


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
    AddAllocation: Partition._place,
    ResizeAllocation: Partition._resize,
    AddNode: Partition._add_node,
    UpdateNode: lambda p, cmd, now: p.node_registry.update(cmd, now),
    DrainNode: lambda p, cmd, now: p.node_registry.drain(cmd, now),
    UndrainNode: lambda p, cmd, now: p.node_registry.undrain(cmd, now),
    RemoveNode: Partition._remove_node,
    AddForeign: lambda p, cmd, now: p.foreign.add(cmd, now),
    ReleaseForeign: lambda p, cmd, now: p.foreign.release(cmd, now),
}
