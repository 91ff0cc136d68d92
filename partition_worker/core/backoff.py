"""Unschedulable-ask backoff (YuniKorn 1.8, YUNIKORN-3115): an app whose asks fit nowhere is
not retried every cycle.

What it owns: the rule, on the app's leaf queue properties ``application.unschedasks.backoff``
(a count, 0: off) and ``application.unschedasks.backoff.delay`` (default 30 s). While the
scheduler walks an app's asks in one attempt it counts the asks that passed the user/group
limits and the queue headroom, have no required node, are not a gang member taking its
placeholder, and still found no node (preemption did not help either). Before it looks at
the next ask, once the count reached the threshold, the app backs off: its
``backoff_deadline_ns`` is set to now + delay and the scheduler skips the app until then
(the deadline is never cleared, it expires; REST ``backoffDeadline``). Reserved asks and
placeholder replacement are not affected. As upstream, with N unschedulable asks and a
threshold of N the backoff only starts when an (N+1)th ask exists.

Who may use it: ``scheduler`` (``backing_off``, ``start_backoff``). Costs nothing when the
leaf has no threshold: one integer test per app attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .outcomes import EventType

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .outcomes import Outcomes

__all__ = ["backing_off", "start_backoff", "MSG_BACKOFF"]

MSG_BACKOFF = "too many unschedulable asks in the application, waiting"


def backing_off(app: "Application", now: int) -> bool:
    """The app is in its backoff: the scheduler does not try it."""
    return app.backoff_deadline_ns > now


def start_backoff(outcomes: "Outcomes", app: "Application", now: int) -> None:
    """``app`` reached its leaf's threshold: no attempts before now + the leaf's delay (the
    partition's idle cycles, at least once a second while asks wait, try it again after)."""
    q = app.queue
    app.backoff_deadline_ns = now + q.backoff_delay_ns
    outcomes.event(EventType.APP, app.app_id, "UnschedulableAsksBackoff",
            f"{MSG_BACKOFF}: {q.backoff_threshold} asks fit no node, next attempt in "
            f"{q.backoff_delay_ns / 1e9:g}s", now)
