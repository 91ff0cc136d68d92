"""Application lifecycle of the partition: add (placement, ACLs, rejections), remove,
the state machine's entry actions and timers.

A mixin of ``Partition`` (kept apart to keep files small). Reasons are YuniKorn's
(YUNIKORN_BEHAVIOUR.md 1.1 S4-S7); the transitions are the table in ``app_state``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from common.resources import Resource

from ._gang import MSG_APP_COMPLETE, gang_style
from .app_state import RUNNING_STATES, AppEvent, AppState, IllegalTransition, next_state
from .application import TAG_NAMESPACE_QUOTA, Application
from .commands import AddApp, RemoveApp
from .outcomes import AppAccepted, AppRejected, AppStateChanged, EventType, Termination
from .placement_bridge import PlacementError
from .queue import ObjectState, Queue, QueueCreateError

if TYPE_CHECKING:  # pragma: no cover
    from .partition import Partition

__all__ = ["AppOps"]

T_STARTING, T_COMPLETING, T_EXPIRE = "starting", "completing", "expire"


class _Reject(Exception):
    """An app rejection: ``reason`` is YuniKorn's exact text, ``detail`` says more (an event)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class AppOps:
    def _add_app(self: "Partition", cmd: AddApp, now: int) -> None:
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
        if cmd.placeholder_ask.has_negative():
            self._reject_app(cmd, f"application {app_id}: placeholderAsk {cmd.placeholder_ask} has a negative quantity", now)
            return
        existing = self.apps.get(app_id)
        if existing is not None and not existing.recovered_only:
            self._reject_app(cmd, f"adding application {app_id} to partition {self.full_name}, but application already existed", now, store=False)
            return
        groups = self.placement.resolve_groups(cmd.user, cmd.groups, now)
        try:
            queue, created = self._place(cmd, groups)
        except _Reject as r:
            if r.detail:
                self.event(EventType.APP, cmd.app_id, "QueueCreationFailed", r.detail, now)
            self._reject_app(cmd, r.reason, now)
            return
        self._queues_created(created, now)
        if cmd.placeholder_ask.strictly_greater_than_zero():
            if queue.sort_policy.value == "fair":
                self._reject_app(cmd, f"queue {queue.path} cannot run application {app_id} with task group request: unsupported sort type", now)
                return
            qmax = queue.effective_max()
            if not cmd.placeholder_ask.fits_in_max_undef(qmax):
                self._reject_app(cmd, f"queue {queue.path} cannot fit application {app_id}: task group request {cmd.placeholder_ask} larger than max queue allocation {qmax}", now)
                return
        if queue.dynamic and TAG_NAMESPACE_QUOTA in cmd.tags:
            self._apply_namespace_quota(queue, cmd.tags[TAG_NAMESPACE_QUOTA])
        if existing is not None:  # adopt an app first seen through recovered allocations
            self._move_app(existing, queue, now)
            existing.user, existing.groups, existing.tags = cmd.user, groups, dict(cmd.tags)
            existing.execution_timeout_ms = cmd.execution_timeout_ms
            existing.ph_timeout_ns = self.placeholder_timeout_ns(cmd, now)
            existing.placeholder_ask, existing.gang_style = cmd.placeholder_ask, gang_style(cmd)
            existing.recovered_only = False
            self.limits.forget_app(app_id)
            self.limits.rebuild(self.apps.values())  # its usage now counts for its real user
            out.apps_accepted.append(AppAccepted(app_id, queue.path, existing.state.value, now))
            return
        app = Application(app_id=app_id, queue=queue, user=cmd.user, groups=groups,
                          tags=dict(cmd.tags), submission_time_ns=now, seq=self.next_seq(),
                          execution_timeout_ms=cmd.execution_timeout_ms,
                          ph_timeout_ns=self.placeholder_timeout_ns(cmd, now),
                          placeholder_ask=cmd.placeholder_ask, gang_style=gang_style(cmd),
                          state_time_ns=now)
        self.apps[app_id] = app
        queue.apps[app_id] = app
        self.finished_apps.pop(app_id, None)
        out.apps_accepted.append(AppAccepted(app_id, queue.path, app.state.value, now))

    def _place(self: "Partition", cmd: AddApp, groups: tuple[str, ...]) -> tuple[Queue, list[str]]:
        app_id = cmd.app_id
        created: list[str] = []
        if self.placement.initialised:
            try:
                path = self.placement.place(cmd, groups, self.queues)
            except PlacementError as exc:  # carries YuniKorn's message
                raise _Reject(f"failed to place application {app_id}: {exc}") from None
            queue = self.queues.find(path)
            if queue is None:
                try:
                    queue, created = self.queues.create_dynamic(path, cmd.user, groups)
                except QueueCreateError as exc:
                    raise _Reject(f"failed to create rule based queue {path} for application {app_id}",
                                  str(exc)) from None
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

    def _apply_namespace_quota(self: "Partition", queue: Queue, raw: str) -> None:
        """App tag ``namespace.resourcequota`` (JSON si.Resource, ``{"resources": {"memory":
        {"value": 1}}}``; a plain ``{"memory": 1}`` map is accepted too) sets the max of a
        dynamic leaf when strictly > 0. Unparsable values are ignored, as YuniKorn does."""
        quota = parse_quota(raw)
        if quota is not None and quota.strictly_greater_than_zero():
            queue.max = quota

    def _reject_app(self: "Partition", cmd: AddApp, reason: str, now: int, store: bool = True) -> None:
        self._queues_dirty = True  # placement may have created queues that are now empty
        self.outcomes.apps_rejected.append(AppRejected(cmd.app_id, reason))
        self.event(EventType.APP, cmd.app_id, "ApplicationRejected", reason, now)
        if store and cmd.app_id not in self.apps:
            app = Application(app_id=cmd.app_id, queue=self.root, user=cmd.user, groups=tuple(cmd.groups),
                              tags=dict(cmd.tags), submission_time_ns=now, seq=self.next_seq(),
                              state=AppState.REJECTED, state_time_ns=now, message=reason,
                              finished_ns=now)
            self._remember_finished(app, now)

    def _remember_finished(self: "Partition", app: Application, now: int) -> None:
        fin = self.finished_apps
        fin.pop(app.app_id, None)
        fin[app.app_id] = app
        while len(fin) > self.settings.max_completed_apps:
            fin.pop(next(iter(fin)))
        self._timer(now + self.settings.expire_timeout_ns, T_EXPIRE, app.app_id, app.state_gen)

    def _remove_app(self: "Partition", cmd: RemoveApp, now: int) -> None:
        app = self.apps.get(cmd.app_id)
        if app is None:
            return  # unknown app: ignored (YuniKorn)
        self._drop_app_work(app, Termination.STOPPED_BY_RM, f"Application {app.app_id} Removed", now)
        self._detach_app(app)
        if app.state in RUNNING_STATES or app.counted_running:
            self._set_running(app, False)
        app.finished_ns = now
        self._queues_dirty = True

    def _drop_app_work(self: "Partition", app: Application, term: Termination, message: str, now: int) -> None:
        """Release every ask, reservation and allocation of ``app`` (allocations are reported)."""
        for key in list(app.asks):
            self._remove_ask(app, key)
        for alloc in list(app.allocations.values()):
            self._release_alloc(alloc, term, message, now, report=True, check_app=False)

    def _detach_app(self: "Partition", app: Application) -> None:
        if app.state is AppState.STARTING and app.queue.apps.get(app.app_id) is app:
            app.queue.starting_changed(-1)
        self.apps.pop(app.app_id, None)
        app.queue.apps.pop(app.app_id, None)
        self.limits.forget_app(app.app_id)

    def _move_app(self: "Partition", app: Application, queue: Queue, now: int) -> None:
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
        self.limits.rebuild(self.apps.values())  # usage moves with the app (rare: recovery)
        if running:
            self._set_running(app, True)
        self._queues_dirty = True

    # ---------------------------------------------------------------- state machine
    def app_event(self: "Partition", app: Application, event: AppEvent, now: int, message: str = "") -> bool:
        """Apply an event to ``app``; performs the entry actions and reports the change.
        Returns False (and emits an APP event) for an illegal transition."""
        try:
            new = next_state(app.app_id, app.state, event)
        except IllegalTransition as exc:
            self.event(EventType.APP, app.app_id, "IllegalTransition", str(exc), now)
            return False
        if new is None:
            return True
        if app.state is AppState.STARTING:
            app.queue.starting_changed(-1)
        elif new is AppState.STARTING:
            app.queue.starting_changed(1)
        app.state = new
        app.state_time_ns = now
        app.state_log.append((now, new.value))
        app.state_gen += 1
        self.app_state_version += 1
        msg = message or event.value
        if new is not AppState.REJECTED:
            self.outcomes.app_states.append(AppStateChanged(app.app_id, new.value, now, msg))
        self.event(EventType.APP, app.app_id, f"AppState{new.value}", msg, now)
        _ENTRY[new](self, app, now)
        return True

    def _set_running(self: "Partition", app: Application, running: bool) -> None:
        if running == app.counted_running:
            return
        app.counted_running = running
        for q in app.queue.chain():
            q.running_apps += 1 if running else -1

    def _enter_starting(self: "Partition", app: Application, now: int) -> None:
        self._set_running(app, True)
        timeout = 0 if app.stateaware_disabled() else self.settings.starting_timeout_ns
        self._timer(now + timeout, T_STARTING, app.app_id, app.state_gen)
        if timeout == 0:
            self.app_event(app, AppEvent.RUN, now)

    def _enter_running(self: "Partition", app: Application, now: int) -> None:
        self._set_running(app, True)

    def _enter_completing(self: "Partition", app: Application, now: int) -> None:
        self._set_running(app, False)
        self._timer(now + self.settings.completing_timeout_ns, T_COMPLETING, app.app_id, app.state_gen)

    def _enter_final(self: "Partition", app: Application, now: int) -> None:
        """Completed / Failed: leave the queue, kept for REST until it expires."""
        self._set_running(app, False)
        self._detach_app(app)
        app.finished_ns = now
        self._remember_finished(app, now)
        self._queues_dirty = True

    def _enter_failing(self: "Partition", app: Application, now: int) -> None:
        self._set_running(app, False)
        if app.is_idle():
            self.app_event(app, AppEvent.FAIL, now)

    def _enter_expired(self: "Partition", app: Application, now: int) -> None:
        self.finished_apps.pop(app.app_id, None)

    def _noop_entry(self: "Partition", app: Application, now: int) -> None:
        return None

    def fail_application(self: "Partition", app_id: str, message: str, now: int) -> None:
        """Fail an app (partition removal, RM): Failing, work released, then Failed."""
        app = self.apps.get(app_id)
        if app is None:
            return
        if self.app_event(app, AppEvent.FAIL, now, message) and app.state is AppState.FAILING:
            self._drop_app_work(app, Termination.STOPPED_BY_RM, message, now)
            if app.state is AppState.FAILING:
                self.app_event(app, AppEvent.FAIL, now, message)

    def _maybe_complete(self: "Partition", app: Application, now: int) -> None:
        if app.state is AppState.FAILING and app.is_idle():
            self.app_event(app, AppEvent.FAIL, now)
        elif app.state in (AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING) and app.is_idle():
            self.app_event(app, AppEvent.COMPLETE, now)

    def _on_starting_timer(self: "Partition", app_id: str, gen: int, now: int) -> None:
        app = self.apps.get(app_id)
        if app is not None and app.state_gen == gen and app.state is AppState.STARTING:
            self.app_event(app, AppEvent.RUN, now)

    def _on_completing_timer(self: "Partition", app_id: str, gen: int, now: int) -> None:
        app = self.apps.get(app_id)
        if app is not None and app.state_gen == gen and app.state is AppState.COMPLETING:
            if app.placeholders:  # leftover placeholders go first (YuniKorn, S17)
                self.release_placeholders(app, MSG_APP_COMPLETE, now, timedout=False)
            self.app_event(app, AppEvent.COMPLETE, now)

    def _on_expire_timer(self: "Partition", app_id: str, gen: int, now: int) -> None:
        app = self.finished_apps.get(app_id)
        if app is not None and app.state_gen == gen:
            self.app_event(app, AppEvent.EXPIRE, now)


_ENTRY = {
    AppState.NEW: AppOps._noop_entry,
    AppState.ACCEPTED: AppOps._noop_entry,
    AppState.RESUMING: AppOps._noop_entry,
    AppState.STARTING: AppOps._enter_starting,
    AppState.RUNNING: AppOps._enter_running,
    AppState.COMPLETING: AppOps._enter_completing,
    AppState.COMPLETED: AppOps._enter_final,
    AppState.FAILING: AppOps._enter_failing,
    AppState.FAILED: AppOps._enter_final,
    AppState.REJECTED: AppOps._noop_entry,
    AppState.EXPIRED: AppOps._enter_expired,
}


def parse_quota(raw: str) -> Resource | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    items = data.get("resources", data)
    if not isinstance(items, dict):
        return None
    values: dict[str, int] = {}
    for name, v in items.items():
        if isinstance(v, dict):
            v = v.get("value")
        if isinstance(v, bool) or not isinstance(v, int):
            return None
        values[str(name)] = v
    return Resource(values) if values else None
