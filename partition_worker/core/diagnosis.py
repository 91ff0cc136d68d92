"""Why an ask waits: the feasibility chain run over every node, rejections counted by reason.

What it owns: the ``explain`` answer. Who may use it: ``PartitionSession.explain`` (REST
``korral explain``), on demand only; never called by the cycle. Nodes are judged by the
same ``feasibility.CHAIN`` the scheduler allocates with (``ALLOCATE``), so the two agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .feasibility import CHAIN, Purpose
from .limits import describe

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .objects import Ask
    from .partition import Partition

__all__ = ["explain", "FITS"]

FITS = "fits"  # the count of nodes that pass every stage


def explain(p: "Partition", app: "Application", ask: "Ask") -> dict:
    """Why ``ask`` waits: every node run through the feasibility chain, each rejection counted
    under its reason (the chain's first rejecting stage), plus the queue headroom or the
    user/group limit that holds it, if any. O(nodes)."""
    counts = {stage.rejection.reason: 0 for stage in CHAIN.stages}
    counts[FITS] = 0
    chain = CHAIN.bind(ask, Purpose.ALLOCATE, p.apps)
    for node in p.nodes.nodes.values():
        rejection = chain.first_rejection(node)
        counts[rejection.reason if rejection is not None else FITS] += 1
    blocker = app.queue.fits_headroom(ask.resource)
    held = p.limits.check(app, ask.resource)
    limit = describe(held[0], held[1], app, p.limits.group_of(app))[1] if held is not None else ""
    return {
        "applicationID": app.app_id, "allocationKey": ask.key, "pending": ask.pending,
        "state": ask.sched_state.value if ask.sched_state is not None else "",
        "reason": ask.sched_reason, "reservedNode": ask.reserved_node,
        "queueHeadroomBlockedBy": blocker.path if blocker is not None else "",
        "limitBlockedBy": limit,  # the user/group limit that holds it ("" = none)
        "nodes": {k: v for k, v in counts.items() if v},
    }
