"""Node predicates and node choice of the scheduling cycle (STYLE #8: a short pipeline).

``find_node`` walks the node order (policy order, set-aside nodes excluded) and returns
the first node that passes: schedulable and ready, not reserved, required node
(``yunikorn.apache.org/requiredNode``), node selector, fits the free resources. A per-cycle
memo of sizes that fitted no node skips asks at least as large.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .node import Node
    from .objects import Ask

__all__ = ["find_node", "fits", "selector_ok", "MAX_SHAPES"]

MAX_SHAPES = 32


def selector_ok(node: "Node", ask: "Ask") -> bool:
    for attr, want in ask.selector:
        if node.attribute(attr) != want:
            return False
    return True


def fits(rv: dict, node: "Node") -> bool:
    av = node.available._v
    for k, v in rv.items():
        if v > av.get(k, 0):
            return False
    return True


def find_node(c, ask: "Ask") -> "Node | None":
    """The first node in policy order that passes the predicates: schedulable and ready,
    not reserved, required node, selector, fits free resources."""
    nodes = c.p.nodes
    res = ask.resource
    rv = res._v
    if ask.required_node:
        node = nodes.get(ask.required_node)
        if node is None or not node.usable or not selector_ok(node, ask):
            return None
        if not fits(rv, node):
            return None  # (a reservation is only cancelled for an ask that can use the node)
        res_ = node.reservation
        if res_ is not None:
            other = c.p.apps.get(res_.app_id)
            other_ask = other.asks.get(res_.ask_key) if other is not None else None
            if other_ask is not None and other_ask.required_node:
                return None  # another daemon-set style ask holds it
            c.p.unreserve(res_)  # YuniKorn: a required-node ask cancels ordinary reservations
        return node
    plain = not ask.selector
    if plain:
        for shape in c.failed_shapes:
            if shape.fits_in(res):
                return None
    byid = nodes.nodes
    for key in nodes.order:
        node = byid[key[1]]
        if not node.schedulable or not node.ready or node.reservation is not None:
            continue
        av = node.available._v
        for k, v in rv.items():
            if v > av.get(k, 0):
                break
        else:
            if plain or selector_ok(node, ask):
                return node
    if nodes.full and nodes.needs_full_scan(res):  # rare: e.g. a best-effort ask
        for node in nodes.full_in_order():
            if node.usable and node.reservation is None and fits(rv, node) \
                    and (plain or selector_ok(node, ask)):
                return node
    if plain and len(c.failed_shapes) < MAX_SHAPES:
        c.failed_shapes.append(res)
    return None
