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
from common.resources import ZERO, Resource

from . import scheduler
from ._nodes import NodeOps
from .app_state import RUNNING_STATES, AppEvent, AppState, IllegalTransition, next_state
from .application import TAG_NAMESPACE_QUOTA, Application
from .commands import (AddApp, AddAsk, AddNode, DrainNode, ReleaseAlloc, ReleaseAsk, RemoveApp,
                       RemoveNode, UndrainNode, UpdateNode)
from .node import NodeCollection, parse_node_sort_policy
from .objects import (NODE_SELECTOR_PREFIX, TAG_ALLOW_PREEMPTION, TAG_REQUIRED_NODE, Allocation,
                      Ask, Reservation)
from .outcomes import (AllocationNew, AllocationReleased, AppAccepted, AppRejected, AppStateChanged,
                       AskRejected, AskReleased, Event, EventType, Outcomes, SchedState,
                       SchedulingState, Termination)
from .placement_bridge import PlacementBridge
from .queue import ObjectState, Queue, QueueCreateError, QueueTree
from .settings import CoreSettings

__all__ = ["Partition"]

IDLE_NS_PER_ASK = 10_000
_T_STARTING, _T_COMPLETING, _T_EXPIRE, _T_ALLOC_TIMEOUT = "starting", "completing", "expire", "alloc"


class Partition(NodeOps):
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
        self.queues = QueueTree(config.root)
        policy = parse_node_sort_policy(config.nodesortpolicy.type)
        self.nodes = NodeCollection(policy, dict(config.nodesortpolicy.resourceweights))
        self.placement = PlacementBridge(config.placementrules)
        self.config = config
        self.apps: dict[str, Application] = {}
        self.finished_apps: dict[str, Application] = {}  # Completed/Failed/Rejected until expiry
        self.allocations: dict[str, Allocation] = {}
        self.reservations: dict[tuple[str, str], Reservation] = {}  # (app_id, ask_key)
        self.total = ZERO
        self._timers: list[tuple[int, int, str, str, int]] = []
        self._seq = 0
        self.changed = True  # something happened that a cycle may act on
        self.last_cycle_ns = 0
        self._queues_dirty = False
        self.cycles = 0
        self.idle_interval_ns = self.settings.idle_cycle_interval_ns

    # ================================================================ dispatch
    def handle(self, cmd: object, now: int) -> None:
        """Apply one command. Unknown command types raise ``TypeError`` naming the type."""
        fn = _HANDLERS.get(type(cmd))
        if fn is None:
            raise TypeError(f"partition {self.name}: unknown command {type(cmd).__name__}")
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
        self.outcomes.sched_states.append(SchedulingState(ask.app_id, ask.key, state, reason))

    # ================================================================ timers
    def _timer(self, at: int, kind: str, key: str, gen: int = 0) -> None:
        heapq.heappush(self._timers, (at, self.next_seq(), kind, key, gen))

    def next_wakeup_ns(self) -> int | None:
        """Earliest deadline: a timer, or the next idle cycle while asks are pending."""
        t = self._timers[0][0] if self._timers else None
        if self.changed:
            return self.last_cycle_ns  # due now
        if self.root.pending.is_zero() or not self.nodes.nodes:
            return t
        idle = self.last_cycle_ns + self.idle_interval_ns
        return idle if t is None else min(t, idle)

    def tick(self, now: int) -> None:
        """Fire every timer due at ``now``."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, kind, key, gen = heapq.heappop(timers)
            _TIMER_HANDLERS[kind](self, key, gen, now)

    def step(self, now: int) -> int:
        """Fire due timers, run a cycle if something changed or the idle interval passed,
        clean up empty queues. Returns the number of allocations made."""
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

    # ================================================================ applications
    def _add_app(self, cmd: AddApp, now: int) -> None:
        out = self.outcomes
        app_id = cmd.app_id
        if not app_id:
            out.apps_rejected.append(AppRejected(app_id, "application ID must not be empty"))
            return
        if self.state is not ObjectState.ACTIVE:
            self._reject_app(cmd, f"partition {self.full_name} is stopped cannot add a new application {app_id}", now)
            return
        if not cmd.user:
            self._reject_app(cmd, "empty user cannot resolve", now)
            return
        existing = self.apps.get(app_id)
        if existing is not None and not existing.recovered_only:
            self._reject_app(cmd, f"adding application {app_id} to partition {self.full_name}, but application already existed", now, store=False)
            return
        groups = self.placement.resolve_groups(cmd.user, cmd.groups, now)
        try:
            queue, created = self._place(cmd, groups)
        except _Reject as r:
            self._reject_app(cmd, str(r), now)
            return
        if cmd.placeholder_ask.strictly_greater_than_zero():
            if queue.sort_policy.value == "fair":
                self._reject_app(cmd, f"queue {queue.path} cannot run application {app_id} with task group request: unsupported sort type", now)
                return
            qmax = queue.effective_max()
            if not cmd.placeholder_ask.fits_in_max_undef(qmax):
                self._reject_app(cmd, f"queue {queue.path} cannot fit application {app_id}: task group request {cmd.placeholder_ask} larger than max queue allocation {qmax}", now)
                return
        self._queues_created(created, now)
        if queue.dynamic and TAG_NAMESPACE_QUOTA in cmd.tags:
            self._apply_namespace_quota(queue, cmd.tags[TAG_NAMESPACE_QUOTA])
        if existing is not None:  # adopt an app first seen through recovered allocations
            self._move_app(existing, queue, now)
            existing.user, existing.groups, existing.tags = cmd.user, groups, dict(cmd.tags)
            existing.execution_timeout_ms = cmd.execution_timeout_ms
            existing.placeholder_ask, existing.gang_style = cmd.placeholder_ask, _gang(cmd.gang_style)
            existing.recovered_only = False
            out.apps_accepted.append(AppAccepted(app_id))
            return
        app = Application(app_id=app_id, queue=queue, user=cmd.user, groups=groups,
                          tags=dict(cmd.tags), submission_time_ns=now, seq=self.next_seq(),
                          execution_timeout_ms=cmd.execution_timeout_ms,
                          placeholder_ask=cmd.placeholder_ask, gang_style=_gang(cmd.gang_style),
                          state_time_ns=now)
        self.apps[app_id] = app
        queue.apps[app_id] = app
        self.finished_apps.pop(app_id, None)
        out.apps_accepted.append(AppAccepted(app_id))

    def _place(self, cmd: AddApp, groups: tuple[str, ...]) -> tuple[Queue, list[str]]:
        app_id = cmd.app_id
        created: list[str] = []
        if self.placement.initialised:
            try:
                path = self.placement.place(cmd, groups, self.queues)
            except Exception as exc:  # PlacementError carries YuniKorn's message
                raise _Reject(f"failed to place application {app_id}: {exc}") from None
            queue = self.queues.find(path)
            if queue is None:
                try:
                    queue, created = self.queues.create_dynamic(path, cmd.user, groups)
                except QueueCreateError as exc:
                    raise _Reject(f"failed to create rule based queue {path} for application {app_id}: {exc}") from None
        else:
            queue = self.queues.find(cmd.queue) if cmd.queue else None
            if queue is None:
                raise _Reject(f"application '{app_id}' rejected, cannot create queue '{cmd.queue}' without placement rules")
        if not queue.is_leaf or not queue.check_submit_access(cmd.user, groups):
            raise _Reject(f"failed to find queue {queue.path} for application {app_id}")
        if not queue.accepts_new_work:
            # Korral: a draining queue takes no new applications (v1.2 still accepts them)
            raise _Reject(f"queue {queue.path} is {queue.state.value.lower()}, cannot add application {app_id}")
        return queue, created

    def _apply_namespace_quota(self, queue: Queue, raw: str) -> None:
        import json
        try:
            data = json.loads(raw)
            vals = {k: int(v) for k, v in (data.get("resources", data) or {}).items()
                    if not isinstance(v, dict)} or \
                {k: int(v["value"]) for k, v in data.get("resources", {}).items()}
            r = Resource(vals)
        except (ValueError, TypeError, AttributeError, KeyError):
            return  # unparsable quota tag is ignored, as YuniKorn does
        if r.strictly_greater_than_zero():
            queue.max = r

    def _reject_app(self, cmd: AddApp, reason: str, now: int, store: bool = True) -> None:
        self.outcomes.apps_rejected.append(AppRejected(cmd.app_id, reason))
        self.event(EventType.APP, cmd.app_id, "ApplicationRejected", reason, now)
        if store and cmd.app_id not in self.apps:
            app = Application(app_id=cmd.app_id, queue=self.root, user=cmd.user, groups=tuple(cmd.groups),
                              tags=dict(cmd.tags), submission_time_ns=now, seq=self.next_seq(),
                              state=AppState.REJECTED, state_time_ns=now, message=reason,
                              finished_ns=now)
            self._remember_finished(app, now)

    def _remember_finished(self, app: Application, now: int) -> None:
        fin = self.finished_apps
        fin.pop(app.app_id, None)
        fin[app.app_id] = app
        while len(fin) > self.settings.max_completed_apps:
            fin.pop(next(iter(fin)))
        self._timer(now + self.settings.expire_timeout_ns, _T_EXPIRE, app.app_id, app.state_gen)

    def _remove_app(self, cmd: RemoveApp, now: int) -> None:
        app = self.apps.get(cmd.app_id)
        if app is None:
            return  # unknown app: ignored (YuniKorn)
        self._drop_app_work(app, Termination.STOPPED_BY_RM, f"Application {app.app_id} Removed", now)
        self._detach_app(app)
        if app.state in RUNNING_STATES or app.counted_running:
            self._set_running(app, False)
        app.finished_ns = now
        self._queues_dirty = True

    def _drop_app_work(self, app: Application, term: Termination, message: str, now: int) -> None:
        """Release every ask, reservation and allocation of ``app`` (allocations are reported)."""
        for key in list(app.asks):
            self._remove_ask(app, key)
        for alloc in list(app.allocations.values()):
            self._release_alloc(alloc, term, message, now, report=True, check_app=False)

    def _detach_app(self, app: Application) -> None:
        self.apps.pop(app.app_id, None)
        app.queue.apps.pop(app.app_id, None)

    def _move_app(self, app: Application, queue: Queue, now: int) -> None:
        """Move a recovered app (and its usage) to the queue placement chose for it."""
        if app.queue is queue:
            return
        old = app.queue
        old.sub_pending(app.pending)
        old.sub_allocated(app.allocated)
        old.apps.pop(app.app_id, None)
        running = app.counted_running
        if running:
            self._set_running(app, False)
        app.queue = queue
        queue.apps[app.app_id] = app
        queue.add_pending(app.pending)
        queue.add_allocated(app.allocated)
        for alloc in app.allocations.values():
            alloc.queue_path = queue.path
        if running:
            self._set_running(app, True)
        self._queues_dirty = True

    # ---------------------------------------------------------------- state machine
    def app_event(self, app: Application, event: AppEvent, now: int, message: str = "") -> bool:
        """Apply an event to ``app``; performs the entry actions and reports the change.
        Returns False (and emits an APP event) for an illegal transition."""
        try:
            new = next_state(app.app_id, app.state, event)
        except IllegalTransition as exc:
            self.event(EventType.APP, app.app_id, "IllegalTransition", str(exc), now)
            return False
        if new is None:
            return True
        app.state = new
        app.state_time_ns = now
        app.state_gen += 1
        msg = message or event.value
        if new is not AppState.REJECTED:
            self.outcomes.app_states.append(AppStateChanged(app.app_id, new.value, now, msg))
        self.event(EventType.APP, app.app_id, f"AppState{new.value}", msg, now)
        _ENTRY[new](self, app, now)
        return True

    def _set_running(self, app: Application, running: bool) -> None:
        if running == app.counted_running:
            return
        app.counted_running = running
        for q in app.queue.chain():
            q.running_apps += 1 if running else -1

    def _enter_starting(self, app: Application, now: int) -> None:
        self._set_running(app, True)
        timeout = 0 if app.stateaware_disabled() else self.settings.starting_timeout_ns
        self._timer(now + timeout, _T_STARTING, app.app_id, app.state_gen)
        if timeout == 0:
            self.app_event(app, AppEvent.RUN, now)

    def _enter_running(self, app: Application, now: int) -> None:
        self._set_running(app, True)

    def _enter_completing(self, app: Application, now: int) -> None:
        self._set_running(app, False)
        self._timer(now + self.settings.completing_timeout_ns, _T_COMPLETING, app.app_id, app.state_gen)

    def _enter_final(self, app: Application, now: int) -> None:
        """Completed / Failed: leave the queue, kept for REST until it expires."""
        self._set_running(app, False)
        self._detach_app(app)
        app.finished_ns = now
        self._remember_finished(app, now)
        self._queues_dirty = True

    def _enter_failing(self, app: Application, now: int) -> None:
        self._set_running(app, False)
        if app.is_idle():
            self.app_event(app, AppEvent.FAIL, now)

    def _enter_expired(self, app: Application, now: int) -> None:
        self.finished_apps.pop(app.app_id, None)

    def _noop_entry(self, app: Application, now: int) -> None:
        return None

    def fail_application(self, app_id: str, message: str, now: int) -> None:
        """Fail an app (partition removal, RM): Failing, work released, then Failed."""
        app = self.apps.get(app_id)
        if app is None:
            return
        if self.app_event(app, AppEvent.FAIL, now, message) and app.state is AppState.FAILING:
            self._drop_app_work(app, Termination.STOPPED_BY_RM, message, now)
            if app.state is AppState.FAILING:
                self.app_event(app, AppEvent.FAIL, now, message)

    def _maybe_complete(self, app: Application, now: int) -> None:
        if app.state is AppState.FAILING and app.is_idle():
            self.app_event(app, AppEvent.FAIL, now)
        elif app.state in (AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING) and app.is_idle():
            self.app_event(app, AppEvent.COMPLETE, now)

    def _on_starting_timer(self, app_id: str, gen: int, now: int) -> None:
        app = self.apps.get(app_id)
        if app is not None and app.state_gen == gen and app.state is AppState.STARTING:
            self.app_event(app, AppEvent.RUN, now)

    def _on_completing_timer(self, app_id: str, gen: int, now: int) -> None:
        app = self.apps.get(app_id)
        if app is not None and app.state_gen == gen and app.state is AppState.COMPLETING:
            self.app_event(app, AppEvent.COMPLETE, now)

    def _on_expire_timer(self, app_id: str, gen: int, now: int) -> None:
        app = self.finished_apps.get(app_id)
        if app is not None and app.state_gen == gen:
            self.app_event(app, AppEvent.EXPIRE, now)

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
        ask.reserved_node = node.node_id
        app.reservations[ask.key] = res
        self.reservations[(app.app_id, ask.key)] = res
        self.sched_state(ask, SchedState.RESERVED, f"reserved node {node.node_id}")

    def unreserve(self, res: Reservation) -> None:
        self.reservations.pop((res.app_id, res.ask_key), None)
        node = self.nodes.get(res.node_id)
        if node is not None and node.reservation is res:
            node.reservation = None
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
    def allocate(self, app: Application, ask: Ask, node, now: int) -> Allocation:
        """Place one repeat of ``ask`` on ``node`` (checks were done by the caller)."""
        r = ask.resource
        alloc = Allocation(uuid=self.new_uuid(), key=ask.key, app_id=app.app_id, node_id=node.node_id,
                           resource=r, priority=ask.priority, create_time_ns=now,
                           queue_path=app.queue.path, tags=ask.tags, task_group=ask.task_group,
                           placeholder=ask.placeholder, originator=ask.originator)
        ask.pending -= 1
        app.pending = app.pending.sub(r)
        app.allocated = app.allocated.add(r)
        q = app.queue
        while q is not None:
            q.pending = q.pending.sub(r)
            q.allocated = q.allocated.add(r)
            q = q.parent
        app.allocations[alloc.uuid] = alloc
        node.allocations[alloc.uuid] = alloc
        self.nodes.update_allocated(node, r, 1)
        self.allocations[alloc.uuid] = alloc
        if ask.execution_timeout_ms > 0:
            alloc.timeout_at_ns = now + ask.execution_timeout_ms * 1_000_000
            self._timer(alloc.timeout_at_ns, _T_ALLOC_TIMEOUT, alloc.uuid)
        self.outcomes.allocations.append(AllocationNew(alloc))
        if ask.sched_state:
            self.sched_state(ask, SchedState.SCHEDULED, f"allocated on node {node.node_id}")
        if ask.pending <= 0 and ask.reserved_node:
            self._unreserve_ask(app, ask)
        if not alloc.placeholder and app.state is not AppState.RUNNING:
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
                app.allocated_placeholder = app.allocated_placeholder.sub_eliminate_negative(r)
            app.queue.sub_allocated(r)
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
        self.placement.update_rules(config.placementrules)
        created, draining = self.queues.update(config.root)
        self.nodes.set_policy(policy, dict(config.nodesortpolicy.resourceweights))
        self.root.max = self.total if self.nodes.nodes else None
        self.config = config
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
        for app_id in list(self.apps):
            self.fail_application(app_id, message, now)
        for node_id in list(self.nodes.nodes):
            self._remove_node(RemoveNode(node_id), now)


class _Reject(Exception):
    pass


def _gang(style: str) -> str:
    return style if style in ("Soft", "Hard") else "Soft"


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
    _T_STARTING: Partition._on_starting_timer,
    _T_COMPLETING: Partition._on_completing_timer,
    _T_EXPIRE: Partition._on_expire_timer,
    _T_ALLOC_TIMEOUT: Partition._on_alloc_timer,
}

_ENTRY = {
    AppState.NEW: Partition._noop_entry,
    AppState.ACCEPTED: Partition._noop_entry,
    AppState.RESUMING: Partition._noop_entry,
    AppState.STARTING: Partition._enter_starting,
    AppState.RUNNING: Partition._enter_running,
    AppState.COMPLETING: Partition._enter_completing,
    AppState.COMPLETED: Partition._enter_final,
    AppState.FAILING: Partition._enter_failing,
    AppState.FAILED: Partition._enter_final,
    AppState.REJECTED: Partition._noop_entry,
    AppState.EXPIRED: Partition._enter_expired,
}
