"""Why an ask waits: the feasibility chain run over every node, rejections counted by check.

What it owns: the ``explain`` answer. Who may use it: ``PartitionSession.explain`` (REST
``korral explain``), on demand only; never called by the cycle. Nodes are judged by the
same ``feasibility.CHAIN`` the scheduler allocates with (``ALLOCATE``), so the two agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .feasibility import CHAIN, Purpose, Rejection
from .limits import describe

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .objects import Ask
    from .partition import Partition

__all__ = ["explain", "FITS"]

FITS = "fits"  # the count of nodes that pass every check
_ORDER = {check.name: i for i, check in enumerate(CHAIN.checks)}


def explain(p: "Partition", app: "Application", ask: "Ask") -> dict:
    """Why ``ask`` waits: every node run through the feasibility chain, each node counted under
    the first check that rejects it (``checks``: by the check's name, in chain order) and that
    rejection's reason (``nodes``), plus the queue headroom or the user/group limit that holds
    it, if any. O(nodes)."""
    by_check = {check.name: 0 for check in CHAIN.checks}
    by_check[FITS] = 0
    by_reason: dict[Rejection, int] = {}
    chain = CHAIN.bind(ask, Purpose.ALLOCATE, p.apps)
    for node in p.nodes.nodes.values():
        rejection = chain.first_rejection(node)
        if rejection is None:
            by_check[FITS] += 1
            continue
        by_check[rejection.stage] += 1
        by_reason[rejection] = by_reason.get(rejection, 0) + 1
    nodes: dict[str, int] = {}
    for rejection in sorted(by_reason, key=lambda r: _ORDER[r.stage]):  # chain order
        nodes[rejection.reason] = nodes.get(rejection.reason, 0) + by_reason[rejection]
    if by_check[FITS]:
        nodes[FITS] = by_check[FITS]
    blocker = app.queue.fits_headroom(ask.resource)
    held = p.limits.check(app, ask.resource)
    limit = describe(held[0], held[1], app, p.limits.group_of(app))[1] if held is not None else ""
    return {
        "applicationID": app.app_id, "allocationKey": ask.key, "pending": ask.pending,
        "state": ask.sched_state.value if ask.sched_state is not None else "",
        "reason": ask.sched_reason, "reservedNode": ask.reserved_node,
        "queueHeadroomBlockedBy": blocker.path if blocker is not None else "",
        "limitBlockedBy": limit,  # the user/group limit that holds it ("" = none)
        "nodes": nodes,  # reason -> nodes rejected for it; "fits" -> nodes that take it
        "checks": {k: v for k, v in by_check.items() if v},  # check name -> nodes it rejected
    }
