"""The node an ask goes to now (``find_node``), for the scheduling cycle.

What it owns: walking the node order (policy order, set-aside nodes excluded) and the
per-cycle memo of sizes that fitted no node. Who may use it: ``scheduler`` and
``reservations`` (the reserved-asks pass). The predicates are the one chain of
``feasibility`` (``Chain.walker``: the checks the node order has not pre-filtered by); this
module only decides where to look and in which order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .feasibility import CHAIN, Purpose, is_plain, open_for_asks

if TYPE_CHECKING:  # pragma: no cover
    from common.resources import Resource

    from .node import Node
    from .objects import Ask

__all__ = ["find_node", "known_to_fail", "remember_failure", "MAX_SHAPES"]

MAX_SHAPES = 32  # sizes remembered per cycle as fitting no node (and no reservation)


def known_to_fail(shapes: list["Resource"], res: "Resource") -> bool:
    """``res`` is at least as large as a size in ``shapes`` (a per-cycle memo of failures):
    within a cycle nodes only fill up, so it fails too."""
    for shape in shapes:
        if shape.fits_in(res):
            return True
    return False


def remember_failure(shapes: list["Resource"], res: "Resource") -> None:
    """Add ``res`` to the memo ``shapes`` (bounded by ``MAX_SHAPES``)."""
    if len(shapes) < MAX_SHAPES:
        shapes.append(res)


def find_node(c, ask: "Ask") -> "Node | None":
    """The first node in policy order that passes ``feasibility.CHAIN`` for ``ask`` now.

    A required-node ask looks at its node only; when the chain lets it take an ordinary ask's
    reservation there, that reservation is cancelled (YuniKorn v1.2). Other asks walk
    ``NodeCollection.order``, which holds only nodes ``open_for_asks`` (an ask's own reserved
    node is not among them: the reserved pass tries it before calling this), checking the
    checks that do not pre-filter (``Chain.walker``); the nodes set aside for a used-up
    weighted type are looked at only by an ask that leaves such a type at zero. A plain ask at
    least as large as one that already fitted no node this cycle is not tried again."""
    p = c.p
    nodes = p.nodes
    res = ask.resource
    if ask.required_node:
        node = nodes.get(ask.required_node)
        if node is None or not CHAIN.bind(ask, Purpose.ALLOCATE, p.apps).passes(node):
            return None
        held = node.reservation
        if held is not None and (held.app_id, held.ask_key) != (ask.app_id, ask.key):
            p.ledger.unreserve(held)  # an ordinary ask's reservation yields to a daemon-set ask
        return node
    plain = is_plain(ask)
    if plain and c.failed_shapes and known_to_fail(c.failed_shapes, res):
        return None
    passes = CHAIN.walker(ask, p.apps).in_order
    byid = nodes.nodes
    for key in nodes.order:
        node = byid[key[1]]
        if passes(node):
            return node
    if nodes.full and nodes.needs_full_scan(res):  # rare: e.g. a best-effort ask
        for node in nodes.full_in_order():
            if open_for_asks(node) and passes(node):
                return node
    if plain:
        remember_failure(c.failed_shapes, res)
    return None
