"""The application lifecycle of one partition: add (placement, ACLs, rejections), remove,
and the seed 004 state machine with its entry actions and timers.

What it owns: the partition's active ``apps`` (the dict the partition hands it, which the
ledger reads) and its ``finished_apps`` (Completed, Failed, Rejected, kept for REST until they
expire), the entry action of each state (``_ENTRY``) and the app timers (Starting ->
Running, Completing -> Completed, expiry). The transitions are the table in ``app_state``.
``queue_changes`` counts what may leave a queue empty (an app left it, or placement made
queues no app took): the partition removes empty queues after the next cycle.

What it uses, given at construction: the queue tree, the placement rules, the user/group
limits, the ledger and the gangs (an app's work released when it is removed or fails, its
leftover placeholders when it completes), the outcomes, the timers, the settings.

Who may use it: the partition (commands ``AddApp`` / ``RemoveApp``, an allocation or release
that moves an app on, partition stop), through ``add``, ``remove``, ``adopt_recovered``,
``fire``, ``fail``, ``maybe_complete``, ``close``. Reasons are YuniKorn's
(YUNIKORN_BEHAVIOUR.md 1.1 S4-S7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from common.constants import APP_TAG_CREATE_FORCE

from .app_history import AppHistory, GoneApp
from .app_state import RUNNING_STATES, AppEvent, AppState, IllegalTransition, next_state
from .app_usage import summarise
from .application import Application
from .commands import AddApp, RemoveApp
from .gang import MSG_APP_COMPLETE, gang_style
from .namespace_tags import apply_namespace_tags
from .outcomes import AppAccepted, AppRejected, AppStateChanged, EventType, Termination
from .placement_bridge import GroupLookupError, PlacementError
from .queue import RECOVERY_QUEUE, Queue, QueueCreateError
from .topology import request_of

if TYPE_CHECKING:  # pragma: no cover
    from common.compat import Compat

    from .gang import Gangs
    from .ledger import Ledger
    from .limits import LimitTracker
    from .outcomes import Outcomes
    from .placement_bridge import PlacementBridge
    from .queue import QueueTree
    from .settings import CoreSettings
    from .timers import Timers

__all__ = ["AppLifecycle", "PlacementRejected", "place_app", "report_queues_created",
           "T_STARTING", "T_COMPLETING", "T_EXPIRE"]

T_STARTING, T_COMPLETING, T_EXPIRE = "starting", "completing", "expire"
FALLBACK_QUEUE = "root.default"  # compatibility 1.6+: where an app no rule places goes
NO_GROUP = "nogroup"  # groups of a forced app whose user cannot be resolved (YuniKorn)


def _forced(cmd: AddApp) -> bool:
    """The RM recovers an app it already runs (app tag ``application.create.force``)."""
    return next((v for k, v in cmd.tags.items() if k.lower() == APP_TAG_CREATE_FORCE), "").strip().lower() in ("1", "t", "true")
_COMPLETABLE = (AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING)
_RAN = (AppState.STARTING, AppState.RUNNING)  # an app entering one has run (its summary is due)


class PlacementRejected(Exception):
    """An app rejection: ``reason`` is YuniKorn's exact text, ``detail`` says more (an event)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def report_queues_created(outcomes: "Outcomes", paths: list[str], now: int) -> None:
    """Report queues made by placement, recovery or a config update (QUEUE events)."""
    for path in paths:
        outcomes.event(EventType.QUEUE, path, "QueueAdded", f"queue {path} created", now)


class AppLifecycle:
    """Applications of one partition and their state machine (see module doc). ``full_name``
    is the partition's ``[rmID]name`` for messages; ``seq`` numbers apps and asks in arrival
    order (shared with the partition's asks)."""

    __slots__ = ("apps", "finished_apps", "gone", "ended", "queue_changes", "_closed", "_full_name",
                 "_queues", "_placement", "_limits", "_ledger", "_gangs", "_outcomes", "_timers",
                 "_settings", "_seq")

    def __init__(self, apps: dict[str, Application], full_name: str, queues: "QueueTree",
                 placement: "PlacementBridge", limits: "LimitTracker", ledger: "Ledger",
                 gangs: "Gangs", outcomes: "Outcomes", timers: "Timers", settings: "CoreSettings",
                 seq: Iterator[int]) -> None:
        self.apps = apps
        self.finished_apps: dict[str, Application] = {}  # Completed/Failed/Rejected until expiry
        self.gone = AppHistory(settings.max_gone_apps)  # removed and expired apps, for explain
        # apps that ended, by (queue path, "completed" | "failed" | "rejected"), for as long as the
        # partition lives, its queues removed or not (YuniKorn's yunikorn_queue_app_total)
        self.ended: dict[tuple[str, str], int] = {}
        self.queue_changes = 0
        self._closed = False
        self._full_name = full_name
        self._queues = queues
        self._placement = placement
        self._limits = limits
        self._ledger = ledger
        self._gangs = gangs
        self._outcomes = outcomes
        self._timers = timers
        self._settings = settings
        self._seq = seq
        timers.register(T_STARTING, self._on_starting_timer)
        timers.register(T_COMPLETING, self._on_completing_timer)
        timers.register(T_EXPIRE, self._on_expire_timer)

    def close(self) -> None:
        """The partition stops: every app added from now on is rejected."""
        self._closed = True

    # ---------------------------------------------------------------- add
    def add(self, cmd: AddApp, now: int) -> None:
        """The ``AddApp`` command: place the app in a queue and accept it, or reject it."""
        out = self._outcomes
        app_id = cmd.app_id
        if not app_id:
            out.apps_rejected.append(AppRejected(app_id, "application ID must not be empty"))
            return
        # YuniKorn records the new application before it places (or rejects) it
        out.event(EventType.APP, app_id, "AppAdded", f"application {app_id} added for queue "
                                                     f"{cmd.queue or '(none)'} by user {cmd.user or '(none)'}", now)
        if self._closed:
            self._reject(cmd, f"partition {self._full_name} is stopped cannot add a new application {app_id}", now)
            return
        if not cmd.user:
            self._reject(cmd, "empty user cannot resolve", now)
            return
        if cmd.placeholder_ask.has_negative():
            self._reject(cmd, f"application {app_id}: placeholderAsk {cmd.placeholder_ask} has a negative quantity", now)
            return
        topology = request_of(f"application {app_id}", cmd.tags)
        if isinstance(topology, str):
            self._reject(cmd, topology, now)
            return
        existing = self.apps.get(app_id)
        if existing is not None and not existing.recovered_only:
            self._reject(cmd, f"adding application {app_id} to partition {self._full_name}, but application already existed", now, store=False)
            return
        try:
            groups = self._placement.resolve_groups(cmd.user, cmd.groups, now)
        except GroupLookupError as exc:  # the lookup is down (LDAP): YuniKorn rejects, or forces
            if _forced(cmd):
                groups = (NO_GROUP,)
            else:
                self._reject(cmd, f"user {cmd.user}: group resolution failed: {exc}", now)
                return
        try:
            queue, created = place_app(self._placement, self._queues, cmd, groups, self._settings.compat)
        except PlacementRejected as r:
            if r.detail:
                out.event(EventType.APP, cmd.app_id, "QueueCreationFailed", r.detail, now)
            self._reject(cmd, r.reason, now)
            return
        if queue.path in (FALLBACK_QUEUE, RECOVERY_QUEUE):
            self.queue_changes += 1  # a rule may have made a queue before it failed
        report_queues_created(out, created, now)
        self._apply_namespace_tags(queue, cmd, now)  # before the gang check, as YuniKorn
        if cmd.placeholder_ask.strictly_greater_than_zero():
            if queue.sort_policy.value == "fair":
                self._reject(cmd, f"queue {queue.path} cannot run application {app_id} with task group request: unsupported sort type", now)
                return
            qmax = queue.effective_max()
            if not cmd.placeholder_ask.fits_in_max_undef(qmax):
                self._reject(cmd, f"queue {queue.path} cannot fit application {app_id}: task group request {cmd.placeholder_ask} larger than max queue allocation {qmax}", now)
                return
        ph_timeout_ns = self._gangs.timeout_ns(cmd, now)
        if existing is not None:  # adopt an app first seen through recovered allocations
            self._move(existing, queue)
            existing.user, existing.groups, existing.tags = cmd.user, groups, dict(cmd.tags)
            existing.execution_timeout_ms = cmd.execution_timeout_ms
            existing.ph_timeout_ns = ph_timeout_ns
            existing.placeholder_ask, existing.gang_style = cmd.placeholder_ask, gang_style(cmd)
            existing.recovered_only = False
            existing.topology = topology
            existing.requested_queue = cmd.queue
            self._limits.forget_app(app_id)
            self._limits.rebuild(self.apps.values())  # its usage now counts for its real user
            out.apps_accepted.append(AppAccepted(app_id, queue.path, existing.state.value, now))
            return
        app = Application(app_id=app_id, queue=queue, user=cmd.user, groups=groups,
                          tags=dict(cmd.tags), submission_time_ns=now, seq=next(self._seq),
                          execution_timeout_ms=cmd.execution_timeout_ms,
                          ph_timeout_ns=ph_timeout_ns,
                          placeholder_ask=cmd.placeholder_ask, gang_style=gang_style(cmd),
                          state_time_ns=now, requested_queue=cmd.queue, topology=topology)
        self.apps[app_id] = app
        queue.apps[app_id] = app
        self.finished_apps.pop(app_id, None)
        self.gone.discard(app_id)
        out.apps_accepted.append(AppAccepted(app_id, queue.path, app.state.value, now))

    def _apply_namespace_tags(self, queue: Queue, cmd: AddApp, now: int) -> None:
        """The namespace tags of the app (quota, guaranteed, max apps) on its dynamic leaf, as
        YuniKorn does (``namespace_tags``); a value that is ignored is named in an APP event."""
        def report(tag: str, message: str) -> None:
            self._outcomes.event(EventType.APP, cmd.app_id, "InvalidNamespaceTag", message, now)
        apply_namespace_tags(queue, cmd.app_id, cmd.tags, report)

    def _reject(self, cmd: AddApp, reason: str, now: int, store: bool = True) -> None:
        self.queue_changes += 1  # placement may have created queues that are now empty
        self._count_ended(self._queues.root.path, AppState.REJECTED)  # a rejected app is kept in root
        self._outcomes.apps_rejected.append(AppRejected(cmd.app_id, reason))
        self._outcomes.event(EventType.APP, cmd.app_id, "ApplicationRejected", reason, now)
        if store and cmd.app_id not in self.apps:
            app = Application(app_id=cmd.app_id, queue=self._queues.root, user=cmd.user, groups=tuple(cmd.groups),
                              tags=dict(cmd.tags), submission_time_ns=now, seq=next(self._seq),
                              state=AppState.REJECTED, state_time_ns=now, message=reason,
                              finished_ns=now)
            self._remember_finished(app, now)

    def _remember_finished(self, app: Application, now: int) -> None:
        fin = self.finished_apps
        fin.pop(app.app_id, None)
        fin[app.app_id] = app
        while len(fin) > self._settings.max_completed_apps:
            self._forget_finished(fin.pop(next(iter(fin))))
        self._timers.schedule(now + self._settings.expire_timeout_ns, T_EXPIRE, app.app_id, app.state_gen)

    def adopt_recovered(self, app_id: str, now: int) -> Application:
        """The app of a recovered allocation: the known one, else a new app in
        ``root.@recovery@``, moved to its placed queue when the RM adds it (``add``)."""
        app = self.apps.get(app_id)
        if app is not None:
            return app
        queue, created = self._queues.create_dynamic(RECOVERY_QUEUE, "", (), check_acl=False)
        report_queues_created(self._outcomes, created, now)
        app = Application(app_id=app_id, queue=queue, user="", groups=(), tags={},
                          submission_time_ns=now, seq=next(self._seq), state_time_ns=now,
                          recovered_only=True)
        self.apps[app_id] = app
        queue.apps[app_id] = app
        return app

    # ---------------------------------------------------------------- remove
    def remove(self, cmd: RemoveApp, now: int) -> None:
        """The ``RemoveApp`` command: release all its work and forget it (unknown: ignored)."""
        app = self.apps.get(cmd.app_id)
        if app is None:
            return  # unknown app: ignored (YuniKorn)
        self._drop_work(app, Termination.STOPPED_BY_RM, f"Application {app.app_id} Removed", now)
        self._detach(app)
        if app.state in RUNNING_STATES or app.counted_running:
            self._set_running(app, False)
        app.finished_ns = now
        summarise(self._outcomes, app, now)  # Korral: also when the RM removes it (state as it was then)
        self.gone.add(GoneApp(app.app_id, app.queue.path, app.user, app.state.value, now,
                              "removed by the RM (RemoveApplication)", removed=True))
        self.queue_changes += 1

    def _drop_work(self, app: Application, term: Termination, message: str, now: int) -> None:
        """Release every ask, reservation and allocation of ``app`` (allocations are reported)."""
        ledger = self._ledger
        for key in list(app.asks):
            ledger.remove_ask(app, key)
        for alloc in list(app.allocations.values()):
            ledger.release(alloc, term, message, now, report=True)

    def _detach(self, app: Application) -> None:
        if app.state is AppState.STARTING and app.queue.apps.get(app.app_id) is app:
            app.queue.starting_changed(-1)
        self.apps.pop(app.app_id, None)
        app.queue.apps.pop(app.app_id, None)
        self._limits.forget_app(app.app_id)

    def _move(self, app: Application, queue: Queue) -> None:
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
        if app.state is AppState.STARTING:
            old.starting_changed(-1)
            queue.starting_changed(1)
        app.queue = queue
        queue.apps[app.app_id] = app
        queue.add_pending(app.pending)
        queue.add_allocated(app.allocated)
        for alloc in app.allocations.values():
            alloc.queue_path = queue.path
        self._limits.rebuild(self.apps.values())  # usage moves with the app (rare: recovery)
        if running:
            self._set_running(app, True)
        self.queue_changes += 1

    # ---------------------------------------------------------------- state machine
    def fire(self, app: Application, event: AppEvent, now: int, message: str = "") -> bool:
        """Apply ``event`` to ``app``: the new state's entry action runs and the change is
        reported. Returns False (and emits an APP event) for an illegal transition."""
        out = self._outcomes
        try:
            new = next_state(app.app_id, app.state, event)
        except IllegalTransition as exc:
            out.event(EventType.APP, app.app_id, "IllegalTransition", str(exc), now)
            return False
        if new is None:
            return True
        if new is AppState.STARTING and self._settings.compat.no_starting_state:
            new = AppState.RUNNING  # 1.6+: Accepted -> Running on the first allocation
            if new is app.state:
                return True
        if new in _RAN and not app.start_ns:
            app.start_ns = now
        if app.state is AppState.STARTING:
            app.queue.starting_changed(-1)
        elif new is AppState.STARTING:
            app.queue.starting_changed(1)
        app.state = new
        app.state_time_ns = now
        app.state_log.append((now, new.value))
        app.state_gen += 1
        msg = message or event.value
        if message and new in (AppState.FAILING, AppState.FAILED):
            app.message = message  # why it failed (explain of a gone app says it)
        if new is not AppState.REJECTED:
            out.app_states.append(AppStateChanged(app.app_id, new.value, now, msg))
        out.event(EventType.APP, app.app_id, f"AppState{new.value}", msg, now)
        _ENTRY[new](self, app, now)
        return True

    def fail(self, app_id: str, message: str, now: int) -> None:
        """Fail an app (partition removal, RM): Failing, work released, then Failed."""
        app = self.apps.get(app_id)
        if app is None:
            return
        if self.fire(app, AppEvent.FAIL, now, message) and app.state is AppState.FAILING:
            self._drop_work(app, Termination.STOPPED_BY_RM, message, now)
            if app.state is AppState.FAILING:
                self.fire(app, AppEvent.FAIL, now, message)

    def maybe_complete(self, app: Application, now: int) -> None:
        """Move an app with no work left on: Failing -> Failed, or on to Completing."""
        if app.state is AppState.FAILING and app.is_idle():
            self.fire(app, AppEvent.FAIL, now)
        elif app.state in _COMPLETABLE and app.is_idle():
            self.fire(app, AppEvent.COMPLETE, now)

    def _set_running(self, app: Application, running: bool) -> None:
        if running == app.counted_running:
            return
        app.counted_running = running
        for q in app.queue.chain():
            q.running_apps += 1 if running else -1

    # ---------------------------------------------------------------- entry actions
    def _enter_starting(self, app: Application, now: int) -> None:
        self._set_running(app, True)
        timeout = 0 if app.stateaware_disabled() else self._settings.starting_timeout_ns
        self._timers.schedule(now + timeout, T_STARTING, app.app_id, app.state_gen)
        if timeout == 0:
            self.fire(app, AppEvent.RUN, now)

    def _enter_running(self, app: Application, now: int) -> None:
        self._set_running(app, True)

    def _enter_completing(self, app: Application, now: int) -> None:
        self._set_running(app, False)
        self._timers.schedule(now + self._settings.completing_timeout_ns, T_COMPLETING, app.app_id,
                              app.state_gen)

    def _enter_final(self, app: Application, now: int) -> None:
        """Completed / Failed: leave the queue, kept for REST until it expires."""
        self._set_running(app, False)
        self._detach(app)
        app.finished_ns = now
        self._count_ended(app.queue.path, app.state)
        summarise(self._outcomes, app, now)
        self._remember_finished(app, now)
        self.queue_changes += 1

    def _count_ended(self, queue_path: str, state: AppState) -> None:
        key = (queue_path, state.value.lower())
        self.ended[key] = self.ended.get(key, 0) + 1

    def _enter_failing(self, app: Application, now: int) -> None:
        self._set_running(app, False)
        if app.is_idle():
            self.fire(app, AppEvent.FAIL, now)

    def _enter_expired(self, app: Application, now: int) -> None:
        self.finished_apps.pop(app.app_id, None)

    def _forget_finished(self, app: Application) -> None:
        """A finished app leaves the books (it expires, or newer ones push it out): remember how it ended."""
        self.gone.add(GoneApp(app.app_id, app.queue.path, app.user, app.state.value,
                              app.finished_ns or app.state_time_ns, app.message, removed=False))

    def _no_entry_action(self, app: Application, now: int) -> None:
        return None

    # ---------------------------------------------------------------- timers
    def _on_starting_timer(self, app_id: str, gen: int, now: int) -> None:
        app = self.apps.get(app_id)
        if app is not None and app.state_gen == gen and app.state is AppState.STARTING:
            self.fire(app, AppEvent.RUN, now)

    def _on_completing_timer(self, app_id: str, gen: int, now: int) -> None:
        app = self.apps.get(app_id)
        if app is not None and app.state_gen == gen and app.state is AppState.COMPLETING:
            if app.placeholders:  # leftover placeholders go first (YuniKorn, S17)
                self._gangs.release_placeholders(app, MSG_APP_COMPLETE, now, timedout=False)
            self.fire(app, AppEvent.COMPLETE, now)

    def _on_expire_timer(self, app_id: str, gen: int, now: int) -> None:
        app = self.finished_apps.get(app_id)
        if app is not None and app.state_gen == gen:
            self._forget_finished(app)  # in the state it ended in, before it becomes Expired
            self.fire(app, AppEvent.EXPIRE, now)


def place_app(placement: "PlacementBridge", queues: "QueueTree", cmd: AddApp,
              groups: tuple[str, ...], compat: Compat) -> tuple[Queue, list[str]]:
    """The leaf ``cmd``'s app goes to under ``placement``'s rules in ``queues`` (creating dynamic
    queues there when a rule says so), and the paths created; ``PlacementRejected`` with
    YuniKorn's reason otherwise. After the rules, as YuniKorn's chain ends:

    - the recovery rule (``compat`` 1.4+, YUNIKORN-1793): a forced app (``application.create.force``,
      what an RM sends for work it already runs) goes to ``root.@recovery@`` (made when needed,
      no ACL: the app runs already);
    - the default queue (``compat`` 1.6+, YUNIKORN-2703): any other app goes to ``root.default``
      if that queue exists and takes it (leaf, ACL, not draining); it is never created.

    Used by ``AppLifecycle.add`` and by the config what-if (``whatif``) on a shadow queue tree."""
    try:
        return _place_by_rules(placement, queues, cmd, groups)
    except PlacementRejected:
        if compat.recovery_rule and _forced(cmd):
            return queues.create_dynamic(RECOVERY_QUEUE, "", (), check_acl=False)
        q = queues.find(FALLBACK_QUEUE) if compat.placement_fallback else None
        if q is None or not q.is_leaf or not q.accepts_new_work or not q.check_submit_access(cmd.user, groups):
            raise
        return q, []


def _place_by_rules(placement: "PlacementBridge", queues: "QueueTree", cmd: AddApp,
                    groups: tuple[str, ...]) -> tuple[Queue, list[str]]:
    app_id = cmd.app_id
    created: list[str] = []
    if placement.initialised:
        try:
            path = placement.place(cmd, groups, queues)
        except PlacementError as exc:  # carries YuniKorn's message
            raise PlacementRejected(f"failed to place application {app_id}: {exc}") from None
        queue = queues.find(path)
        if queue is None:
            try:
                queue, created = queues.create_dynamic(path, cmd.user, groups)
            except QueueCreateError as exc:
                raise PlacementRejected(f"failed to create rule based queue {path} for application {app_id}",
                                        str(exc)) from None
    else:
        queue = queues.find(cmd.queue) if cmd.queue else None
        if queue is None:
            raise PlacementRejected(f"application '{app_id}' rejected, cannot create queue '{cmd.queue}' without "
                                    "placement rules")
    if not queue.is_leaf or not queue.check_submit_access(cmd.user, groups):
        raise PlacementRejected(f"failed to find queue {queue.path} for application {app_id}")
    if not queue.accepts_new_work:
        # Korral: a draining queue takes no new applications (v1.2 still accepts them)
        raise PlacementRejected(f"queue {queue.path} is {queue.state.value.lower()}, cannot add application {app_id}")
    return queue, created


# the entry action of each state (seed 004); side effects come back as outcomes
_ENTRY: dict[AppState, Callable[[AppLifecycle, Application, int], None]] = {
    AppState.NEW: AppLifecycle._no_entry_action,
    AppState.ACCEPTED: AppLifecycle._no_entry_action,
    AppState.RESUMING: AppLifecycle._no_entry_action,
    AppState.STARTING: AppLifecycle._enter_starting,
    AppState.RUNNING: AppLifecycle._enter_running,
    AppState.COMPLETING: AppLifecycle._enter_completing,
    AppState.COMPLETED: AppLifecycle._enter_final,
    AppState.FAILING: AppLifecycle._enter_failing,
    AppState.FAILED: AppLifecycle._enter_final,
    AppState.REJECTED: AppLifecycle._no_entry_action,
    AppState.EXPIRED: AppLifecycle._enter_expired,
}
