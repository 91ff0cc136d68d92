"""The node an ask goes to now (``find_node``), for the scheduling cycle.

What it owns: walking the node order (policy order, set-aside nodes excluded) and the
per-cycle memo of sizes that fitted no node. Who may use it: ``scheduler`` and
``reservations`` (the reserved-asks pass). The predicates are the one chain of
``feasibility`` (``Chain.walker``: the checks the node order has not pre-filtered by); this
module only decides where to look and in which order.
"""

from __future__ import annotations

from heapq import merge
from typing import TYPE_CHECKING, Hashable

from .feasibility import CHAIN, Purpose, signature

if TYPE_CHECKING:  # pragma: no cover
    from common.resources import Resource

    from .cycle import Cycle
    from .node import Node
    from .objects import Ask

__all__ = ["find_node", "known_to_fail", "remember_failure", "MAX_SHAPES"]

MAX_SHAPES = 32  # sizes remembered per cycle and signature as fitting no node (and no reservation)

Memo = dict[Hashable, list["Resource"]]  # signature (None: plain) -> sizes that failed


def known_to_fail(memo: Memo, sig: Hashable, res: "Resource") -> bool:
    """``res`` is at least as large as a size that failed this cycle for asks of signature
    ``sig`` (``feasibility.signature``): within a cycle nodes only fill up, so it fails too
    (a pod landing may let an ask with inter-pod terms pass: its signature changes with it)."""
    shapes = memo.get(sig)
    if shapes:
        for shape in shapes:
            if shape.fits_in(res):
                return True
    return False


def remember_failure(memo: Memo, sig: Hashable, res: "Resource") -> None:
    """Add ``res`` to the sizes that failed for ``sig`` (bounded by ``MAX_SHAPES``)."""
    shapes = memo.setdefault(sig, [])
    if len(shapes) < MAX_SHAPES:
        shapes.append(res)


def find_node(c: "Cycle", ask: "Ask") -> "Node | None":
    """The first node in policy order that passes ``feasibility.CHAIN`` for ``ask`` now.

    A required-node ask looks at its node only; when the chain lets it take an ordinary ask's
    reservation there, that reservation is cancelled (YuniKorn v1.2). Other asks walk
    ``NodeCollection.order``, which holds only nodes ``open_for_asks`` (an ask's own reserved
    node is not among them: the reserved pass tries it before calling this), evaluating the
    checks that do not pre-filter (``Chain.walker``); an ask that passes some nodes a
    widenable check set aside (it tolerates their taints) walks ``NodeCollection.wide`` with
    them, in policy order. The nodes set aside for a used-up weighted type are looked at only
    by an ask that leaves such a type at zero. An ask at least as large as one of the same
    signature that already fitted no node this cycle is not tried again; one that every node
    rejects (``Walker.never``) walks nothing. ``c`` is the cycle (``cycle.Cycle``): its nodes,
    apps and ledger, and its memo of sizes that fitted no node. An ask of a gang pinned to a
    topology domain walks that domain's nodes in the pin's packing order (``topology.py``)."""
    nodes = c.nodes
    res = ask.resource
    if ask.required_node:
        node = nodes.get(ask.required_node)
        if node is None or not CHAIN.bind(ask, Purpose.ALLOCATE, c.apps, nodes=nodes).passes(node):
            return None
        held = node.reservation
        if held is not None and (held.app_id, held.ask_key) != (ask.app_id, ask.key):
            c.ledger.unreserve(held)  # an ordinary ask's reservation yields to a daemon-set ask
        return node
    t = ask.topology
    if t is not None and t.pin is not None:  # a pinned gang: its domain's nodes, in packing order
        passes = CHAIN.bind(ask, Purpose.ALLOCATE, c.apps, nodes=nodes).passes
        byid = nodes.nodes
        for nid in t.pin.order:
            node = byid.get(nid)
            if node is not None and passes(node):
                return node
        return None
    sig = signature(ask, nodes)
    failed = c.failed_shapes
    if failed and known_to_fail(failed, sig, res):
        return None
    walker = CHAIN.walker(ask, c.apps, nodes, sig is None)
    if walker.never is not None:
        return None
    byid = nodes.nodes
    if walker.widens:
        passes = walker.passes
        for key in merge(nodes.order, nodes.wide):
            node = byid[key[1]]
            if passes(node):
                return node
    else:
        passes = walker.in_order
        for key in nodes.order:
            node = byid[key[1]]
            if passes(node):
                return node
    if nodes.full and nodes.needs_full_scan(res):  # rare: e.g. a best-effort ask
        for node in nodes.full_in_order():
            if (node.open or walker.widens) and passes(node):
                return node
    remember_failure(failed, sig, res)
    return None
