"""What an application used, in resource-seconds, and its summary when it ends (YuniKorn 1.3,
YUNIKORN-1385 ``YK_APP_SUMMARY``; REST ``resourceHistory`` since 1.7).

What it owns: ``track_release`` (called by the ledger as an allocation leaves its app) adds
``quantity x whole seconds since the allocation was made`` per resource, under the node's
instance type (attribute ``si/instance-type``, ``UNKNOWN`` without one), to one of three
kinds: ``preemptedResource`` (preempted), ``placeholderResource`` (placeholders), else
``resourceUsage``. ``summarise`` (called by the lifecycle when an app that ran reaches
Completed or Failed, or the RM removes it) emits an ``AppSummary`` outcome; the worker shell
writes the log line (the core does no logging). Korral keeps the numbers on the finished
app, so REST shows them after completion too (YuniKorn discards them once logged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.constants import INSTANCE_TYPE

from .outcomes import AppSummary, Termination

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node
    from .objects import Allocation
    from .outcomes import Outcomes

__all__ = ["track_release", "summarise", "summary_line", "USAGE", "PREEMPTED", "PLACEHOLDER",
           "UNKNOWN_INSTANCE_TYPE"]

USAGE, PREEMPTED, PLACEHOLDER = "resourceUsage", "preemptedResource", "placeholderResource"
UNKNOWN_INSTANCE_TYPE = "UNKNOWN"
_NS = 1_000_000_000


def track_release(app: "Application", alloc: "Allocation", node: "Node | None", term: Termination,
                  now: int) -> None:
    """Book the resource-seconds of ``alloc``, which leaves ``app`` at ``now``."""
    seconds = (now - alloc.create_time_ns) // _NS
    if seconds <= 0:
        return
    kind = PREEMPTED if term is Termination.PREEMPTED_BY_SCHEDULER else \
        PLACEHOLDER if alloc.placeholder else USAGE
    itype = (node.attributes.get(INSTANCE_TYPE) if node is not None else None) or UNKNOWN_INSTANCE_TYPE
    book = app.resource_history.setdefault(kind, {}).setdefault(itype, {})
    for name, q in alloc.resource._v.items():
        book[name] = book.get(name, 0) + q * seconds


def summarise(outcomes: "Outcomes", app: "Application", now: int) -> None:
    """The summary of an app that ran (``start_ns`` set); apps that never ran have none."""
    if not app.start_ns:
        return
    outcomes.app_summaries.append(AppSummary(
        app.app_id, app.submission_time_ns, app.start_ns, now, app.user, app.queue.path,
        app.state.value, app.resource_history))


def _tracked(m: dict[str, dict[str, int]]) -> str:
    items = ",".join(f"{itype}:{res}={v}" for itype, per in sorted(m.items()) for res, v in sorted(per.items()))
    return f"TrackedResource{{{items}}}"


def summary_line(s: AppSummary, rm_id: str) -> str:
    """YuniKorn's ``YK_APP_SUMMARY`` log message for ``s`` (times in Unix milliseconds)."""
    u = s.usage
    return (f"YK_APP_SUMMARY: {{ApplicationID: {s.app_id}, SubmissionTime: {s.submission_ns // 1_000_000}, "
            f"StartTime: {s.start_ns // 1_000_000}, FinishTime: {s.finish_ns // 1_000_000}, User: {s.user}, "
            f"Queue: {s.queue}, State: {s.state}, RmID: {rm_id}, ResourceUsage: {_tracked(u.get(USAGE, {}))}, "
            f"PreemptedResource: {_tracked(u.get(PREEMPTED, {}))}, "
            f"PlaceholderResource: {_tracked(u.get(PLACEHOLDER, {}))}}}")
