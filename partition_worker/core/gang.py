"""Gang scheduling: placeholders, their replacement by real asks, and the placeholder timeout.

What it owns: the placeholder timer of each app and the gang rules below. Who may use it:
``ledger`` (a placeholder was allocated), ``lifecycle`` (timeout at add, leftovers on
complete), ``node_registry`` (recovered placeholders) and the ``scheduler`` (replacement,
too-big real asks), through ``timeout_ns``, ``start_timer``, ``placeholder_allocated``,
``real_ask_too_big``, ``reject_if_too_big``, ``replace``, ``release_placeholders``.
YUNIKORN_BEHAVIOUR.md 1.9 "Gang scheduling", S10, S16, S17.

Contract:
- A placeholder ask (``placeholder`` + ``taskGroupName``) is scheduled like any ask. Its
  allocation is kept per task group on the app (``Application.placeholders``); the first one
  starts the app's placeholder timer (app ``executionTimeoutMilliSeconds``, <= 0 -> the
  ``CoreSettings.placeholder_timeout_ns`` default of 15 min), shortened by the time since the
  app tag ``yunikorn.apache.org/creationTime`` (unix seconds), so an app re-added after a
  restart keeps its original deadline; an expired one times out at once. An RM that passes
  the k8s shim's annotation ``yunikorn.apache.org/schedulingPolicyParameters``
  (``placeholderTimeoutInSeconds=60 gangSchedulingStyle=Hard``) as an app tag instead of the
  SI fields gets the same: the SI fields win when set. Once the allocated placeholders
  cover the app's ``placeholderAsk`` the app goes Accepted -> Starting.
- A real ask of a task group with an allocated placeholder replaces the oldest one on that
  placeholder's node, in one step (``replace``): the placeholder is released
  (``PLACEHOLDER_REPLACED``, ``replacing uuid: <real uuid>``) and the real allocation made
  in its place; the resources are never counted twice nor free in between. The RM's later
  release of the placeholder (PLACEHOLDER_REPLACED, S10) finds it gone: nothing to do.
- All or nothing: a real ask with a task group waits (SKIPPED) while any placeholder ask of
  its app is still pending; with no placeholder of its group left (all replaced or timed
  out) it is scheduled normally.
- A real ask larger than its group's placeholders is rejected when it is added.
- Timeout: a started app (Starting/Running/Completing) releases its unused placeholders
  (asks: ``releasedAsks`` TIMEOUT; allocations: ``released`` TIMEOUT, ``timedout`` counted).
  An app still New/Accepted: Hard -> Failing (every ask and placeholder released) -> Failed;
  Soft -> Resuming (placeholders released) -> Accepted, its real asks then scheduled normally.
- Completing -> Completed releases leftover placeholders first (TIMEOUT,
  ``releasing placeholders on app complete``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.constants import TAG_APP_CREATION_TIME, TAG_SCHEDULING_POLICY_PARAMETERS

from .app_state import AppEvent, AppState
from .outcomes import AskRejected, AskReleased, EventType, Termination

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .commands import AddApp
    from .objects import Allocation, Ask
    from .partition import Partition
    from .timers import Timers

__all__ = ["Gangs", "gang_style", "policy_parameters", "T_PLACEHOLDER", "MSG_TIMEOUT_ALLOCS",
           "MSG_TIMEOUT_ASKS", "MSG_APP_COMPLETE", "REASON_RESERVATION_TIMEOUT"]

T_PLACEHOLDER = "placeholder"
MSG_TIMEOUT_ALLOCS = "releasing allocated placeholders on placeholder timeout"
MSG_TIMEOUT_ASKS = "releasing placeholders asks on placeholder timeout"
MSG_APP_COMPLETE = "releasing placeholders on app complete"
REASON_RESERVATION_TIMEOUT = "ResourceReservationTimeout"
_STARTED = (AppState.STARTING, AppState.RUNNING, AppState.COMPLETING)


def policy_parameters(tags: dict[str, str]) -> dict[str, str]:
    """``key=value`` pairs of the ``schedulingPolicyParameters`` tag, separated by spaces."""
    out = {}
    for item in tags.get(TAG_SCHEDULING_POLICY_PARAMETERS, "").split():
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def gang_style(cmd: "AddApp") -> str:
    """``Hard`` or ``Soft`` (anything else is Soft, as YuniKorn): the SI field, else the tag."""
    style = cmd.gang_style or policy_parameters(cmd.tags).get("gangSchedulingStyle", "")
    return style if style in ("Soft", "Hard") else "Soft"


class Gangs:
    """The gang rules of one partition (see module doc)."""

    __slots__ = ("p", "_timers")

    def __init__(self, p: "Partition", timers: "Timers") -> None:
        self.p = p
        self._timers = timers
        timers.register(T_PLACEHOLDER, self._on_timer)

    # ---------------------------------------------------------------- placeholders placed
    def timeout_ns(self, cmd: "AddApp", now: int) -> int:
        """The app's placeholder timeout: its executionTimeoutMilliSeconds (<= 0: the default)
        minus the time since its ``yunikorn.apache.org/creationTime`` tag, at least 1 ms.
        A creation time in the future (clock skew) or not a number is ignored."""
        ms = cmd.execution_timeout_ms
        if ms <= 0:
            try:
                ms = int(policy_parameters(cmd.tags).get("placeholderTimeoutInSeconds", "")) * 1000
            except ValueError:
                ms = 0
        timeout = ms * 1_000_000 if ms > 0 else self.p.settings.placeholder_timeout_ns
        try:
            created_ns = int(cmd.tags.get(TAG_APP_CREATION_TIME, "")) * 1_000_000_000
        except ValueError:
            return timeout
        return max(timeout - max(0, now - created_ns), 1_000_000)

    def start_timer(self, app: "Application", now: int) -> None:
        """Start the app's placeholder timer (at its first placeholder; later calls do nothing)."""
        if app.ph_timeout_at:
            return
        at = now + (app.ph_timeout_ns or self.p.settings.placeholder_timeout_ns)
        app.ph_timeout_at = at
        self._timers.schedule(at, T_PLACEHOLDER, app.app_id, app.seq)

    def placeholder_allocated(self, app: "Application", alloc: "Allocation", now: int) -> None:
        """Book a new placeholder allocation; the gang is complete (Accepted -> Starting) when
        the allocated placeholders cover the app's placeholderAsk."""
        app.add_placeholder(alloc)
        self.start_timer(app, now)
        if not app.has_pending_placeholders():
            self.p.changed = True  # the gang is placed: its real asks may go next cycle
        if app.state is AppState.ACCEPTED and not app.placeholder_ask.is_zero() \
                and app.placeholder_ask.fits_in(app.allocated_placeholder):
            self.p.lifecycle.fire(app, AppEvent.RUN, now)

    def real_ask_too_big(self, app: "Application", ask: "Ask") -> str:
        """Rejection reason for a real ask larger than its group's placeholders, else ""."""
        if ask.placeholder or not ask.task_group:
            return ""
        size = app.placeholder_size(ask.task_group)
        if size is None or ask.resource.fits_in(size):
            return ""
        return _too_big(app, ask, size)

    def reject_if_too_big(self, app: "Application", ask: "Ask", ph: "Allocation") -> bool:
        """Reject (and remove) a real ask that does not fit in the placeholder it would take."""
        if ask.resource.fits_in(ph.resource):
            return False
        p = self.p
        reason = _too_big(app, ask, ph.resource)
        p.outcomes.rejected_asks.append(AskRejected(app.app_id, ask.key, reason))
        p.event(EventType.REQUEST, ask.key, "PlaceholderTooSmall", reason, p.now, group=app.app_id)
        p.ledger.remove_ask(app, ask.key)
        return True

    # ---------------------------------------------------------------- replacement
    def replace(self, app: "Application", ask: "Ask", ph: "Allocation", now: int) -> "Allocation":
        """Swap ``ph`` for one repeat of ``ask`` on the placeholder's node, atomically."""
        p = self.p
        node = p.nodes.get(ph.node_id)
        uuid = ask.key if p.key_is_uuid else p.new_uuid()
        p.ledger.release(ph, Termination.PLACEHOLDER_REPLACED, f"replacing uuid: {uuid}", now,
                         report=True, check_app=False)
        d = app.ph_data.get(ph.task_group)
        if d is not None:
            d.replaced += 1
        return p.ledger.allocate(app, ask, node, now, uuid=uuid)

    # ---------------------------------------------------------------- release
    def release_placeholders(self, app: "Application", message: str, now: int,
                             timedout: bool = True) -> None:
        """Release every allocated placeholder of ``app`` with TIMEOUT (reported)."""
        ledger = self.p.ledger
        for group in list(app.placeholders.values()):
            for alloc in list(group.values()):
                ledger.release(alloc, Termination.TIMEOUT, message, now, report=True, check_app=False)
                d = app.ph_data.get(alloc.task_group)
                if d is not None and timedout:
                    d.timedout += 1

    def _release_asks(self, app: "Application", placeholders_only: bool) -> None:
        p = self.p
        for ask in list(app.asks.values()):
            if ask.pending <= 0 or (placeholders_only and not ask.placeholder):
                continue
            p.outcomes.released_asks.append(
                AskReleased(app.app_id, ask.key, Termination.TIMEOUT, MSG_TIMEOUT_ASKS))
            p.ledger.remove_ask(app, ask.key)

    def _on_timer(self, app_id: str, gen: int, now: int) -> None:
        p = self.p
        lifecycle = p.lifecycle
        app = p.apps.get(app_id)
        if app is None or app.seq != gen or not app.ph_timeout_at or app.ph_timeout_at > now:
            return
        app.ph_timeout_at = 0
        if app.state in _STARTED:
            self._release_asks(app, placeholders_only=True)
            self.release_placeholders(app, MSG_TIMEOUT_ALLOCS, now)
            lifecycle.maybe_complete(app, now)
        elif app.state in (AppState.NEW, AppState.ACCEPTED):
            hard = app.gang_style == "Hard"
            p.event(EventType.APP, app_id, REASON_RESERVATION_TIMEOUT,
                    f"placeholder timeout of application {app_id} ({app.gang_style} gang)", now)
            # release first: Failing with nothing left goes on to Failed (and leaves the queue)
            self._release_asks(app, placeholders_only=not hard)
            self.release_placeholders(app, MSG_TIMEOUT_ALLOCS, now)
            if hard:
                lifecycle.fire(app, AppEvent.FAIL, now, REASON_RESERVATION_TIMEOUT)
                if app.state is AppState.FAILING:
                    lifecycle.maybe_complete(app, now)
            elif lifecycle.fire(app, AppEvent.RESUME, now, REASON_RESERVATION_TIMEOUT):
                lifecycle.fire(app, AppEvent.RUN, now)  # Resuming -> Accepted: normal scheduling
        p.changed = True


def _too_big(app: "Application", ask: "Ask", size) -> str:
    return (f"ask {ask.key} of application {app.app_id} requests {ask.resource}, larger than "
            f"the placeholders of task group {ask.task_group} ({size}): a real ask must fit "
            f"in its placeholder")
