"""Why an ask waits: the node pipeline run over every node, rejections counted by stage.

For diagnosis on demand (``PartitionSession.explain``); never called by the cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .limits import describe
from .predicates import fits, selector_ok

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .objects import Ask
    from .partition import Partition

__all__ = ["explain"]


def explain(p: "Partition", app: "Application", ask: "Ask") -> dict:
    """Why ``ask`` waits: the node selection pipeline run over every node with each rejection
    counted by stage (cheap filters first), plus the queue that blocks it, if any. O(nodes);
    for diagnosis on demand, never called by the cycle."""
    stages = {"node drained": 0, "node not ready": 0, "node reserved by another ask": 0,
              "not the required node": 0, "node selector does not match": 0,
              "insufficient free resources": 0, "fits": 0}
    rv = ask.resource._v
    for node in p.nodes.nodes.values():
        if not node.schedulable:
            stages["node drained"] += 1
        elif not node.ready:
            stages["node not ready"] += 1
        elif node.reservation is not None and (node.reservation.app_id, node.reservation.ask_key) \
                != (app.app_id, ask.key):
            stages["node reserved by another ask"] += 1
        elif ask.required_node and node.node_id != ask.required_node:
            stages["not the required node"] += 1
        elif ask.selector and not selector_ok(node, ask):
            stages["node selector does not match"] += 1
        elif not fits(rv, node):
            stages["insufficient free resources"] += 1
        else:
            stages["fits"] += 1
    blocker = app.queue.fits_headroom(ask.resource)
    held = p.limits.check(app, ask.resource)
    limit = describe(held[0], held[1], app, p.limits.group_of(app))[1] if held is not None else ""
    return {
        "applicationID": app.app_id, "allocationKey": ask.key, "pending": ask.pending,
        "state": ask.sched_state.value if ask.sched_state is not None else "",
        "reason": ask.sched_reason, "reservedNode": ask.reserved_node,
        "queueHeadroomBlockedBy": blocker.path if blocker is not None else "",
        "limitBlockedBy": limit,  # the user/group limit that holds it ("" = none)
        "nodes": {k: v for k, v in stages.items() if v},
    }
