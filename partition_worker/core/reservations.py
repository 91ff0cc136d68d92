"""Reservations in the scheduling cycle: reserving a node for an ask that fits no node now,
and trying reserved asks first (their node, then any other node).

What it owns: the reservation policy (which node, when, how many). Who may use it: the
``scheduler``. Nodes are judged by ``feasibility.CHAIN`` (``RESERVE``: the node must be able
to hold the ask once its allocations end); the books are the ``ledger``'s.

YuniKorn: an ask older than the reservation delay that fits no node reserves the node it
fits best once it frees up (lowest FitInScore among nodes whose capacity - occupied can
hold it); one reservation per node; reserved nodes take no other asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .app_state import AppState
from .feasibility import CHAIN, RESOURCES, Purpose, signature
from .node_choice import find_node, known_to_fail, remember_failure
from .preemption import budgeted_queue_preemption, try_required_node_preemption

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .objects import Ask

__all__ = ["maybe_reserve", "try_reserved", "RESERVED", "NOT_RESERVED", "NO_NODE",
           "RESERVE_CANDIDATES"]

# a reservation picks the best fit among at most this many nodes that could hold the ask
RESERVE_CANDIDATES = 1000
_SCHEDULABLE_APP_STATES = frozenset({AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING,
                                     AppState.COMPLETING})


RESERVED, NOT_RESERVED, NO_NODE = 0, 1, 2


def maybe_reserve(c, app: "Application", ask: "Ask") -> int:
    """Reserve the node the ask fits best once it frees up (YuniKorn: lowest FitInScore among
    nodes whose capacity can hold it). Only asks older than the reservation delay, one
    reservation per ask, a bounded number per partition. Returns RESERVED, NOT_RESERVED
    (not eligible now) or NO_NODE (no node could ever hold an ask of this size)."""
    p = c.p
    if len(p.reservations) >= p.settings.max_reservations:
        c.no_reserve = True  # reservations only grow during a cycle
        return NOT_RESERVED
    if ask.reserved_node or c.now - ask.create_time_ns < p.settings.reservation_delay_ns:
        return NOT_RESERVED
    res = ask.resource
    chain = CHAIN.bind(ask, Purpose.RESERVE, p.apps, nodes=p.nodes)
    if chain.everywhere is not None:
        return NO_NODE
    if ask.required_node:
        node = p.nodes.get(ask.required_node)
        if node is None:
            return NOT_RESERVED
        rejection = chain.first_rejection(node)
        if rejection is not None and rejection.stage != RESOURCES.name:
            return NOT_RESERVED
        if node.reservation is not None:
            # a daemon set ask cancels another app's reservation of an ordinary ask (v1.2)
            p.ledger.unreserve(node.reservation)
        if rejection is not None:
            return NO_NODE  # its node cannot hold it even empty
        p.ledger.reserve(app, ask, node, c.now)
        return RESERVED
    sig = signature(ask, p.nodes)
    if c.unreservable and known_to_fail(c.unreservable, sig, res):
        return NO_NODE
    best, best_score = None, 0.0
    seen = 0
    for node in p.nodes.nodes.values():
        if not chain.passes(node):
            continue
        score = res.fit_in_score(node.available)
        if best is None or score < best_score:
            best, best_score = node, score
        seen += 1
        if seen >= RESERVE_CANDIDATES:
            break  # bounded cost: the best of the first candidates is good enough
    if best is None:
        remember_failure(c.unreservable, sig, res)
        return NO_NODE
    p.ledger.reserve(app, ask, best, c.now)
    return RESERVED


def try_reserved(c) -> int:
    """Reserved asks first: their reserved node, then any other node."""
    p = c.p
    ledger = p.ledger
    n = 0
    for res in list(p.reservations.values()):
        app = p.apps.get(res.app_id)
        ask = app.asks.get(res.ask_key) if app is not None else None
        node = p.nodes.get(res.node_id)
        if ask is None or ask.pending <= 0 or node is None:
            ledger.unreserve(res)
            continue
        if app.state not in _SCHEDULABLE_APP_STATES:
            continue
        blocker = app.queue.fits_headroom(ask.resource)
        if p.limits.active and p.limits.check(app, ask.resource) is not None:
            c.blocked.add(ask)
            continue  # a user/group limit holds it; the reservation stays
        if blocker is not None and blocker.parent is not None:
            c.blocked.add(ask)
            continue  # a quota blocks it; the reservation stays until the queue has room
        if CHAIN.bind(ask, Purpose.ALLOCATE, p.apps, nodes=p.nodes).passes(node):
            target = node
        else:
            target = find_node(c, ask)
        if target is None:
            c.blocked.add(ask)
            if ask.required_node:
                if node.node_id == ask.required_node:
                    try_required_node_preemption(p, app, ask, node, c.now)
            else:  # a reserved ask may still preempt (its node or another), once due
                budgeted_queue_preemption(p, c, app, ask)
            continue
        ledger.unreserve(res)
        ledger.allocate(app, ask, target, c.now)
        if ask.pending <= 0:
            app.mark_exhausted()
        n += 1
    return n
