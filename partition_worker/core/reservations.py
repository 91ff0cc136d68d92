"""Reservations in the scheduling cycle: reserving a node for an ask that fits no node now.

What it owns: the reservation policy (which node, when, how many). Who may use it: the
``scheduler`` (whose reserved-asks pass places reserved asks first). Nodes are judged by
``feasibility.CHAIN`` (``RESERVE``: the node must be able to hold the ask once its
allocations end); the books are the cycle's ledger's.

YuniKorn: an ask older than the reservation delay that fits no node reserves the node it
fits best once it frees up (lowest FitInScore among nodes whose capacity - occupied can
hold it); one reservation per node; reserved nodes take no other asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .feasibility import CHAIN, RESOURCES, Purpose, signature
from .node_choice import known_to_fail, remember_failure

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .cycle import Cycle
    from .objects import Ask
    from .settings import CoreSettings

__all__ = ["maybe_reserve", "RESERVED", "NOT_RESERVED", "NO_NODE", "RESERVE_CANDIDATES"]

# a reservation picks the best fit among at most this many nodes that could hold the ask
RESERVE_CANDIDATES = 1000


RESERVED, NOT_RESERVED, NO_NODE = 0, 1, 2


def maybe_reserve(c: "Cycle", app: "Application", ask: "Ask", settings: "CoreSettings") -> int:
    """Reserve the node the ask fits best once it frees up (YuniKorn: lowest FitInScore among
    nodes whose capacity can hold it). Only asks older than the reservation delay, one
    reservation per ask, a bounded number per partition. Returns RESERVED, NOT_RESERVED
    (not eligible now) or NO_NODE (no node could ever hold an ask of this size)."""
    ledger = c.ledger
    if len(ledger.reservations) >= settings.max_reservations:
        c.budgets.reservations_full = True  # reservations only grow during a cycle
        return NOT_RESERVED
    if ask.reserved_node or c.now - ask.create_time_ns < settings.reservation_delay_ns:
        return NOT_RESERVED
    res = ask.resource
    chain = CHAIN.bind(ask, Purpose.RESERVE, c.apps, nodes=c.nodes)
    if chain.everywhere is not None:
        return NO_NODE
    if ask.required_node:
        node = c.nodes.get(ask.required_node)
        if node is None:
            return NOT_RESERVED
        rejection = chain.first_rejection(node)
        if rejection is not None and rejection.stage != RESOURCES.name:
            return NOT_RESERVED
        if node.reservation is not None:
            # a daemon set ask cancels another app's reservation of an ordinary ask (v1.2)
            ledger.unreserve(node.reservation)
        if rejection is not None:
            return NO_NODE  # its node cannot hold it even empty
        ledger.reserve(app, ask, node, c.now)
        return RESERVED
    sig = signature(ask, c.nodes)
    if c.unreservable and known_to_fail(c.unreservable, sig, res):
        return NO_NODE
    best, best_score = None, 0.0
    seen = 0
    for node in c.nodes.nodes.values():
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
    ledger.reserve(app, ask, best, c.now)
    return RESERVED
