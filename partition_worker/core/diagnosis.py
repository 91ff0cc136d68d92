"""Why an ask waits: the feasibility chain run over every node, rejections counted by check.

What it owns: the ``explain`` answer and the FAILED reason of an ask that is not plain
(``why_unplaced``, kube-scheduler's ``0/N nodes are available: ...``). What it uses: the
nodes, the apps and (explain) the user/group limits, given per call. Who may use it:
``PartitionSession.explain`` (REST ``korral explain``), on demand; the ``scheduler``, once per
ask that starts waiting. Nodes are judged by the same ``feasibility.CHAIN`` the scheduler
allocates with (``ALLOCATE``), so the two agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .feasibility import CHAIN, Purpose, Rejection, signature
from .limits import describe

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from .application import Application
    from .limits import LimitTracker
    from .node import NodeCollection
    from .objects import Ask

__all__ = ["explain", "why_unplaced", "unavailable_message", "FITS"]

FITS = "fits"  # the count of nodes that pass every check
_ORDER = {check.name: i for i, check in enumerate(CHAIN.checks)}


def _tally(nodes: "NodeCollection", apps: "Mapping[str, Application]",
           ask: "Ask") -> tuple[dict[str, int], dict[str, int], Rejection | None]:
    """Every node's first rejection for ``ask`` (``ALLOCATE``), counted by check name (with
    ``fits``) and by reason (in chain order), and the rejection every node gives, if any."""
    by_check = {check.name: 0 for check in CHAIN.checks}
    by_check[FITS] = 0
    by_reason: dict[Rejection, int] = {}
    chain = CHAIN.bind(ask, Purpose.ALLOCATE, apps, nodes=nodes)
    for node in nodes.nodes.values():
        rejection = chain.first_rejection(node)
        if rejection is None:
            by_check[FITS] += 1
            continue
        by_check[rejection.stage] += 1
        by_reason[rejection] = by_reason.get(rejection, 0) + 1
    reasons: dict[str, int] = {}
    for rejection in sorted(by_reason, key=lambda r: _ORDER[r.stage]):
        reasons[rejection.reason] = reasons.get(rejection.reason, 0) + by_reason[rejection]
    return {k: v for k, v in by_check.items() if v}, reasons, chain.everywhere


def unavailable_message(total: int, reasons: dict[str, int], everywhere: Rejection | None) -> str:
    """kube-scheduler's message for a pod no node takes: ``0/5 nodes are available: 2
    Insufficient memory, 3 node(s) had untolerated taint {dedicated: gpu}.`` (``count reason``
    sorted as strings; a rejection every node gives is said once)."""
    if everywhere is not None:
        return f"0/{total} nodes are available: {everywhere.reason}."
    return f"0/{total} nodes are available: {', '.join(sorted(f'{n} {r}' for r, n in reasons.items()))}."


def why_unplaced(nodes: "NodeCollection", apps: "Mapping[str, Application]", ask: "Ask",
                 memo: dict | None = None) -> str | None:
    """The reason an ask no node takes now is FAILED for, naming the checks that rejected the
    nodes (``unavailable_message``); None when no node is known or some node would take it
    (the caller says it waits for cluster resources). O(nodes): the scheduler asks once per
    ask that starts waiting, only for an ask that is not plain, and keeps the answer for the
    cycle in ``memo`` by signature and size (the pods of one workload are told once)."""
    key = (signature(ask, nodes), ask.resource)
    if memo is not None and key in memo:
        return memo[key]
    checks, reasons, everywhere = _tally(nodes, apps, ask)
    total = len(nodes)
    why = None if not total or checks.get(FITS) else unavailable_message(total, reasons, everywhere)
    if memo is not None:
        memo[key] = why
    return why


def explain(nodes: "NodeCollection", apps: "Mapping[str, Application]", limits: "LimitTracker",
            app: "Application", ask: "Ask") -> dict:
    """Why ``ask`` waits: every node run through the feasibility chain, each node counted under
    the first check that rejects it (``checks``: by the check's name, in chain order) and that
    rejection's reason (``nodes``), kube-scheduler's one-line ``message`` when no node takes
    it, plus the queue headroom or the user/group limit that holds it, if any, and why its gang
    has no topology domain (``gangTopology``). O(nodes)."""
    checks, reasons, everywhere = _tally(nodes, apps, ask)
    fits = checks.get(FITS, 0)
    if fits:
        reasons[FITS] = fits
    total = len(nodes)
    blocker = app.queue.fits_headroom(ask.resource)
    held = limits.check(app, ask.resource)
    limit = describe(held[0], held[1], app, limits.group_of(app))[1] if held is not None else ""
    return {
        "applicationID": app.app_id, "allocationKey": ask.key, "pending": ask.pending,
        "state": ask.sched_state.value if ask.sched_state is not None else "",
        "reason": ask.sched_reason, "reservedNode": ask.reserved_node,
        "queueHeadroomBlockedBy": blocker.path if blocker is not None else "",
        "limitBlockedBy": limit,  # the user/group limit that holds it ("" = none)
        "nodes": reasons,  # reason -> nodes rejected for it; "fits" -> nodes that take it
        "checks": checks,  # check name -> nodes it rejected first; "fits"
        "message": unavailable_message(total, reasons, everywhere) if total and not fits else "",
        # Korral: why its gang has no topology domain (per level, topology.choose); "" = none asked or it has one
        "gangTopology": app.topology.reason if app.topology is not None and app.topology.pin is None else "",
    }
