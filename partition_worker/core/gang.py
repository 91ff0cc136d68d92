"""Gang scheduling: placeholders, their replacement by real asks, and the placeholder timeout.

What it owns: the placeholder timer of each app and the gang rules below. What it uses: the
ledger (releases, asks, the replacing allocation), the nodes, the outcomes, the timers and the
settings. The app's state machine is not its business: ``placeholder_allocated`` says when the
gang is complete and ``timed_out`` what the timeout means for the app, and the partition moves
the app on. Who may use it: the partition (a placeholder allocated or recovered, the timer),
``lifecycle`` (timeout at add, leftovers on complete) and the ``scheduler`` (too-big real
asks), through ``timeout_ns``, ``start_timer``, ``placeholder_allocated``,
``real_ask_too_big``, ``reject_if_too_big``, ``replace``, ``release_placeholders``,
``timed_out``. YUNIKORN_BEHAVIOUR.md 1.9 "Gang scheduling", S10, S16, S17.

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
  (``PLACEHOLDER_REPLACED``, ``replacing uuid: <real uuid>``; a v1.8 RM reads it as
  ``replacing allocationKey: <key>``, ``partition_worker/revision.py``) and the real allocation made
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

from enum import Enum
from typing import TYPE_CHECKING

from common.constants import TAG_APP_CREATION_TIME, TAG_SCHEDULING_POLICY_PARAMETERS

from .app_state import AppState
from .outcomes import AskRejected, AskReleased, EventType, Termination

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .commands import AddApp
    from .ledger import Ledger
    from .node import NodeCollection
    from .objects import Allocation, Ask
    from .outcomes import Outcomes
    from .settings import CoreSettings
    from .timers import Timers

__all__ = ["Gangs", "GangTimeout", "gang_style", "policy_parameters", "T_PLACEHOLDER",
           "MSG_TIMEOUT_ALLOCS", "MSG_TIMEOUT_ASKS", "MSG_APP_COMPLETE", "REASON_RESERVATION_TIMEOUT"]

T_PLACEHOLDER = "placeholder"
MSG_TIMEOUT_ALLOCS = "releasing allocated placeholders on placeholder timeout"
MSG_TIMEOUT_ASKS = "releasing placeholders asks on placeholder timeout"
MSG_APP_COMPLETE = "releasing placeholders on app complete"
REASON_RESERVATION_TIMEOUT = "ResourceReservationTimeout"
_STARTED = (AppState.STARTING, AppState.RUNNING, AppState.COMPLETING)


class GangTimeout(Enum):
    """What a placeholder timeout means for its app (``Gangs.timed_out``), once its placeholders
    are released: a started app may be done; a Hard gang fails; a Soft gang resumes."""

    STARTED = "started"
    HARD = "hard"
    SOFT = "soft"


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
    """The gang rules of one partition (see module doc). ``changes`` counts what lets a cycle
    place more: a gang fully placed (its real asks may go), a placeholder timeout."""

    __slots__ = ("changes", "_ledger", "_nodes", "_outcomes", "_timers", "_settings")

    def __init__(self, ledger: "Ledger", nodes: "NodeCollection", outcomes: "Outcomes",
                 timers: "Timers", settings: "CoreSettings") -> None:
        self.changes = 0
        self._ledger = ledger
        self._nodes = nodes
        self._outcomes = outcomes
        self._timers = timers  # T_PLACEHOLDER deadlines; the partition handles them (timed_out)
        self._settings = settings

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
        timeout = ms * 1_000_000 if ms > 0 else self._settings.placeholder_timeout_ns
        try:
            created_ns = int(cmd.tags.get(TAG_APP_CREATION_TIME, "")) * 1_000_000_000
        except ValueError:
            return timeout
        return max(timeout - max(0, now - created_ns), 1_000_000)

    def start_timer(self, app: "Application", now: int) -> None:
        """Start the app's placeholder timer (at its first placeholder; later calls do nothing)."""
        if app.ph_timeout_at:
            return
        at = now + (app.ph_timeout_ns or self._settings.placeholder_timeout_ns)
        app.ph_timeout_at = at
        self._timers.schedule(at, T_PLACEHOLDER, app.app_id, app.seq)

    def placeholder_recovered(self, app: "Application", alloc: "Allocation", now: int) -> None:
        """Book a placeholder allocation the RM reports as running (node recovery)."""
        app.add_placeholder(alloc)
        self.start_timer(app, now)

    def placeholder_allocated(self, app: "Application", alloc: "Allocation", now: int) -> bool:
        """Book a new placeholder allocation. True when the gang is complete: the allocated
        placeholders cover the app's placeholderAsk (an Accepted app may start)."""
        app.add_placeholder(alloc)
        self.start_timer(app, now)
        if not app.has_pending_placeholders():
            self.changes += 1  # the gang is placed: its real asks may go next cycle
        return not app.placeholder_ask.is_zero() and app.placeholder_ask.fits_in(app.allocated_placeholder)

    def real_ask_too_big(self, app: "Application", ask: "Ask") -> str:
        """Rejection reason for a real ask larger than its group's placeholders, else ""."""
        if ask.placeholder or not ask.task_group:
            return ""
        size = app.placeholder_size(ask.task_group)
        if size is None or ask.resource.fits_in(size):
            return ""
        return _too_big(app, ask, size)

    def reject_if_too_big(self, app: "Application", ask: "Ask", ph: "Allocation", now: int) -> bool:
        """Reject (and remove) a real ask that does not fit in the placeholder it would take."""
        if ask.resource.fits_in(ph.resource):
            return False
        reason = _too_big(app, ask, ph.resource)
        self._outcomes.rejected_asks.append(AskRejected(app.app_id, ask.key, reason))
        self._outcomes.event(EventType.REQUEST, ask.key, "PlaceholderTooSmall", reason, now, group=app.app_id)
        self._ledger.remove_ask(app, ask.key)
        return True

    # ---------------------------------------------------------------- replacement
    def replace(self, app: "Application", ask: "Ask", ph: "Allocation", now: int) -> "Allocation":
        """Swap ``ph`` for one repeat of ``ask`` on the placeholder's node, atomically (what
        follows for the app, as for any allocation, is the caller's)."""
        ledger = self._ledger
        node = self._nodes.get(ph.node_id)
        uuid = ledger.uuid_for(ask)
        ledger.release(ph, Termination.PLACEHOLDER_REPLACED, f"replacing uuid: {uuid}", now, report=True)
        d = app.ph_data.get(ph.task_group)
        if d is not None:
            d.replaced += 1
        return ledger.allocate(app, ask, node, now, uuid=uuid)

    # ---------------------------------------------------------------- release
    def release_placeholders(self, app: "Application", message: str, now: int,
                             timedout: bool = True) -> None:
        """Release every allocated placeholder of ``app`` with TIMEOUT (reported)."""
        ledger = self._ledger
        for group in list(app.placeholders.values()):
            for alloc in list(group.values()):
                ledger.release(alloc, Termination.TIMEOUT, message, now, report=True)
                d = app.ph_data.get(alloc.task_group)
                if d is not None and timedout:
                    d.timedout += 1

    def _release_asks(self, app: "Application", placeholders_only: bool) -> None:
        for ask in list(app.asks.values()):
            if ask.pending <= 0 or (placeholders_only and not ask.placeholder):
                continue
            self._outcomes.released_asks.append(
                AskReleased(app.app_id, ask.key, Termination.TIMEOUT, MSG_TIMEOUT_ASKS))
            self._ledger.remove_ask(app, ask.key)

    def timed_out(self, app: "Application", gen: int, now: int) -> GangTimeout | None:
        """A ``T_PLACEHOLDER`` deadline of ``app`` fired (``gen``: the app's seq when it was set).
        If it is still due: release what the timeout takes (a started app: its placeholder asks
        and placeholders; else a Hard gang every ask, a Soft one the placeholder asks, and the
        placeholders) and say what it means for the app; None when stale."""
        if app.seq != gen or not app.ph_timeout_at or app.ph_timeout_at > now:
            return None
        app.ph_timeout_at = 0
        self.changes += 1
        if app.state in _STARTED:
            self._release_asks(app, placeholders_only=True)
            self.release_placeholders(app, MSG_TIMEOUT_ALLOCS, now)
            return GangTimeout.STARTED
        if app.state not in (AppState.NEW, AppState.ACCEPTED):
            return None
        hard = app.gang_style == "Hard"
        self._outcomes.event(EventType.APP, app.app_id, REASON_RESERVATION_TIMEOUT,
                             f"placeholder timeout of application {app.app_id} ({app.gang_style} gang)", now)
        # release first: Failing with nothing left goes on to Failed (and leaves the queue)
        self._release_asks(app, placeholders_only=not hard)
        self.release_placeholders(app, MSG_TIMEOUT_ALLOCS, now)
        return GangTimeout.HARD if hard else GangTimeout.SOFT


def _too_big(app: "Application", ask: "Ask", size) -> str:
    return (f"ask {ask.key} of application {app.app_id} requests {ask.resource}, larger than "
            f"the placeholders of task group {ask.task_group} ({size}): a real ask must fit "
            f"in its placeholder")
