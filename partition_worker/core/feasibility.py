"""Node feasibility: the one list of node checks that says whether a node can take an ask.

What it owns: every node predicate of the core, each a small class written once (STYLE #8),
and the typed reason a node turns an ask down, saying whether waiting can help (STYLE #9).
Who may use it: the policies (``scheduler`` through ``node_choice.find_node``,
``reservations``, ``preemption``), ``node_registry`` (a changed node keeps a reservation only
while it can hold the ask), ``node`` (the node order leaves out the nodes the pre-filtering
checks reject) and ``diagnosis`` (``korral explain``), so none of them can disagree.

The checks, in ``CHAIN`` order (cheap first); the first that rejects names the reason:

| check | rejects when | reason (``korral explain``) | waiting can help | pre-filters the order |
|---|---|---|---|---|
| ``schedulable`` | the node is drained | node drained | yes (undrain) | yes |
| ``ready`` | the node is not ready | node not ready | yes | yes |
| ``reservation`` | another ask holds the node reserved (a required-node ask may take an ordinary ask's reservation, see ``ReservationCheck``) | node reserved by another ask | yes | yes |
| ``required-node`` | the ask names another node (``yunikorn.apache.org/requiredNode``) | not the required node | no | |
| ``selector`` | a ``korral.io/node-selector/<attr>`` tag does not match | node selector does not match | no | |
| ``resources`` | the ask does not fit the room the purpose asks for | insufficient free resources | yes while capacity − occupied holds it, else no | |

A check is a ``Check``: ``bind(ask, purpose, apps) -> Bound | None`` (None: it cannot reject
this ask, so it costs the ask nothing), and the ``Bound`` check has ``passes(node)`` and
``rejection(node)``. Adding a check is one class and one line in ``CHAIN``.

The ``purpose`` says which room counts: ``ALLOCATE`` needs it free now (capacity − occupied −
allocated); ``RESERVE`` (reservations, preemption) needs the node to hold the ask once its
allocations end (capacity − occupied).

Pre-filtering: a check with ``prefilter`` has ``open(node)``, true when the node passes it for
every ask (its ``passes`` for any ask holds wherever ``open`` does). ``NodeCollection`` keeps
the nodes that are not ``open_for_asks`` (every pre-filtering check open) out of its order, so
``find_node`` walks only nodes that pass those checks and evaluates the rest
(``Chain.walker``). An ask's own reserved node is the reserved pass's; a required-node ask
looks at its node only.

Speed: a bound chain is a tuple of bound checks whose ``passes`` are plain closures over the
ask's values, and-ed together (``all_of``). A plain ask (no selector, no required node) binds
only the checks that apply to every ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node, NodeCollection
    from .objects import Ask, Reservation

__all__ = ["Purpose", "Rejection", "Check", "Bound", "BoundChain", "Chain", "Walker", "CHAIN",
           "SCHEDULABLE", "READY", "RESERVATION", "REQUIRED_NODE", "SELECTOR", "RESOURCES",
           "open_for_asks", "is_plain", "all_of", "NO_ROOM_NOW", "NEVER_FITS"]

Predicate = Callable[["Node"], bool]
PLAIN_WALKERS = 256  # plain asks' walkers kept, by size (cleared when full)
Apps = Mapping[str, "Application"]


class Purpose(Enum):
    """Which room a node must have for the ask (the ``resources`` check) and how a required-node
    ask treats another ask's reservation (the ``reservation`` check)."""

    ALLOCATE = "allocate"  # free now: capacity - occupied - allocated
    RESERVE = "reserve"  # once its allocations end: capacity - occupied (reservation, preemption)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a node turned an ask down: the check (``stage``), the reason ``korral explain``
    counts it under, and whether waiting (allocations ending, a node coming back) can make the
    node take it."""

    stage: str
    reason: str
    retry_can_help: bool


def is_plain(ask: "Ask") -> bool:
    """The ask carries nothing a node could reject it for besides the checks every ask gets
    (no selector, no required node): plain asks of one size fare the same on every node."""
    return not ask.selector and not ask.required_node


class Bound:
    """One check bound to one ask: ``passes(node)``, and ``rejection(node)`` for a node it
    does not pass (``why`` gives it when it depends on the node). ``ordinary``: a
    pre-filtering check that passes exactly the nodes it is ``open`` for."""

    __slots__ = ("check", "passes", "why", "ordinary")

    def __init__(self, check: "Check", passes: Predicate,
                 why: Callable[["Node"], Rejection] | None = None, ordinary: bool = False) -> None:
        self.check = check
        self.passes = passes
        self.why = why
        self.ordinary = ordinary

    def rejection(self, node: "Node") -> Rejection:
        return self.check.rejection if self.why is None else self.why(node)

    def __repr__(self) -> str:
        return f"<bound {self.check.name}>"


class Check:
    """One named node check (see the module doc). ``rejection`` is its usual rejection;
    ``prefilter``: the node order may leave out the nodes ``open`` says no to; ``for_plain``:
    it may reject a plain ask (``is_plain``), else ``bind`` is not even asked for one."""

    name = ""
    rejection: Rejection
    prefilter = False
    for_plain = True

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps) -> Bound | None:
        raise NotImplementedError

    def open(self, node: "Node") -> bool:
        """(pre-filtering checks) The node passes this check for every ask."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<check {self.name}>"


class _NodeStateCheck(Check):
    """A check on the node's own state, the same for every ask."""

    prefilter = True

    def __init__(self) -> None:
        self._bound = Bound(self, self.open, ordinary=True)

    def bind(self, ask, purpose, apps):
        return self._bound


class SchedulableCheck(_NodeStateCheck):
    """A drained node (DRAIN_NODE, a cordoned k8s node) takes no new work."""

    name = "schedulable"
    rejection = Rejection("schedulable", "node drained", True)

    @staticmethod
    def open(node: "Node") -> bool:
        return node.schedulable


class ReadyCheck(_NodeStateCheck):
    """A node whose ``ready`` attribute says false takes no new work until it is ready."""

    name = "ready"
    rejection = Rejection("ready", "node not ready", True)

    @staticmethod
    def open(node: "Node") -> bool:
        return node.ready


class ReservationCheck(Check):
    """A node reserved by another ask takes no other ask. A required-node (daemon set) ask may
    take the node from an ordinary ask's reservation (YuniKorn v1.2; the caller cancels it once
    the whole chain passed), never from another required-node ask's, and when reserving
    (``RESERVE``) never from an ask of its own application."""

    name = "reservation"
    rejection = Rejection("reservation", "node reserved by another ask", True)
    prefilter = True

    def __init__(self) -> None:
        self._ordinary = Bound(self, self.open, ordinary=True)  # an ask that holds no reservation

    @staticmethod
    def open(node: "Node") -> bool:
        return node.reservation is None

    def bind(self, ask, purpose, apps):
        app_id, key = ask.app_id, ask.key
        if not ask.required_node:
            if not ask.reserved_node:
                return self._ordinary
            def passes(node: "Node") -> bool:
                r = node.reservation
                return r is None or (r.ask_key == key and r.app_id == app_id)
            return Bound(self, passes)
        spare_own_app = purpose is Purpose.RESERVE

        def may_use(r: "Reservation") -> bool:
            if r.ask_key == key and r.app_id == app_id:
                return True
            if spare_own_app and r.app_id == app_id:
                return False
            holder = apps.get(r.app_id)
            held = holder.asks.get(r.ask_key) if holder is not None else None
            return held is None or not held.required_node

        def passes_required(node: "Node") -> bool:
            r = node.reservation
            return r is None or may_use(r)
        return Bound(self, passes_required)


class RequiredNodeCheck(Check):
    """An ask tagged ``yunikorn.apache.org/requiredNode`` (a daemon set pod) goes to that node."""

    name = "required-node"
    rejection = Rejection("required-node", "not the required node", False)
    for_plain = False

    def bind(self, ask, purpose, apps):
        want = ask.required_node
        if not want:
            return None
        return Bound(self, lambda node: node.node_id == want)


class SelectorCheck(Check):
    """Every ``korral.io/node-selector/<attr>`` tag of the ask matches the node's attribute
    (or its k8s label, see ``Node.attribute``)."""

    name = "selector"
    rejection = Rejection("selector", "node selector does not match", False)
    for_plain = False

    def bind(self, ask, purpose, apps):
        selector = ask.selector
        if not selector:
            return None

        def passes(node: "Node") -> bool:
            for attr, want in selector:
                if node.attribute(attr) != want:
                    return False
            return True
        return Bound(self, passes)


NO_ROOM_NOW = Rejection("resources", "insufficient free resources", retry_can_help=True)
NEVER_FITS = Rejection("resources", "insufficient free resources", retry_can_help=False)


class ResourcesCheck(Check):
    """The ask fits the node's free room (``ALLOCATE``) or capacity − occupied (``RESERVE``).
    A node whose capacity − occupied cannot hold it rejects with ``NEVER_FITS``."""

    name = "resources"
    rejection = NO_ROOM_NOW

    @staticmethod
    def has_room(rv: dict, node: "Node") -> bool:
        """``rv`` (a Resource's values) fits the node's free room now."""
        av = node.available._v
        for k, v in rv.items():
            if v > av.get(k, 0):
                return False
        return True

    @staticmethod
    def can_hold(rv: dict, node: "Node") -> bool:
        """``rv`` fits the node's capacity − occupied (YuniKorn's FitIn: a negative room counts
        as 0): the node can take it once its allocations end."""
        cap, occ = node.capacity._v, node.occupied._v
        for k, v in rv.items():
            if v > 0 and v > cap.get(k, 0) - occ.get(k, 0):
                return False
        return True

    def bind(self, ask, purpose, apps):
        rv = ask.resource._v
        can_hold = self.can_hold
        if purpose is Purpose.RESERVE:
            def passes(node: "Node") -> bool:  # can_hold, inlined: reservation scans
                cap, occ = node.capacity._v, node.occupied._v
                for k, v in rv.items():
                    if v > 0 and v > cap.get(k, 0) - occ.get(k, 0):
                        return False
                return True
        else:
            def passes(node: "Node") -> bool:  # has_room, inlined: the allocation hot path
                av = node.available._v
                for k, v in rv.items():
                    if v > av.get(k, 0):
                        return False
                return True
        return Bound(self, passes, lambda node: NO_ROOM_NOW if can_hold(rv, node) else NEVER_FITS)


def _always(node: "Node") -> bool:
    return True


def all_of(predicates: list[Predicate]) -> Predicate:
    """The conjunction of ``predicates`` in order, as one callable (short ones unrolled: a scan
    over many nodes calls it once per node)."""
    n = len(predicates)
    if n == 0:
        return _always
    if n == 1:
        return predicates[0]
    if n == 2:
        a, b = predicates
        return lambda node: a(node) and b(node)
    if n == 3:
        a, b, c = predicates
        return lambda node: a(node) and b(node) and c(node)
    if n == 4:
        a, b, c, d = predicates
        return lambda node: a(node) and b(node) and c(node) and d(node)
    rest = tuple(predicates)

    def every(node: "Node") -> bool:
        for p in rest:
            if not p(node):
                return False
        return True
    return every


_node_open = attrgetter("open")


class BoundChain:
    """The checks of a chain that can reject one ask, bound to it (``Chain.bind``):
    ``passes(node) -> bool`` and ``first_rejection(node) -> Rejection | None``.

    ``collapse``: the chain holds every pre-filtering check, each ``ordinary``, and its nodes
    are a ``NodeCollection``'s: ``passes`` then reads the collection's verdict on them
    (``Node.open``, kept by the collection whenever a node's state changes) in one step."""

    __slots__ = ("checks", "passes")

    def __init__(self, checks: tuple[Bound, ...], collapse: bool = False) -> None:
        self.checks = checks
        if collapse:
            preds = [_node_open] + [b.passes for b in checks if not b.check.prefilter]
        else:
            preds = [b.passes for b in checks]
        self.passes = all_of(preds)

    def first_rejection(self, node: "Node") -> Rejection | None:
        for b in self.checks:
            if not b.passes(node):
                return b.rejection(node)
        return None


class Walker:
    """``find_node``'s view of an ask (``Chain.walker``): ``in_order(node)`` is the bound
    chain without the pre-filtering checks, for the nodes of ``NodeCollection.order`` (they
    pass those already)."""

    __slots__ = ("in_order",)

    def __init__(self, in_order: Predicate) -> None:
        self.in_order = in_order


class Chain:
    """An ordered tuple of checks (``CHAIN`` is the core's one chain)."""

    __slots__ = ("checks", "prefilters", "_plain", "_walk", "_plain_walk", "_plain_walkers")

    def __init__(self, checks: tuple[Check, ...]) -> None:
        names = [c.name for c in checks]
        if len(set(names)) != len(names):
            raise ValueError(f"node checks must have distinct names: {names}")
        self.checks = checks
        self.prefilters = tuple(c for c in checks if c.prefilter)
        self._plain = tuple(c for c in checks if c.for_plain)
        self._walk = tuple(c for c in checks if not c.prefilter)
        # the checks a plain ask's walker binds: they must depend on the ask's size only
        self._plain_walk = tuple(c for c in self._walk if c.for_plain)
        self._plain_walkers: dict[object, Walker] = {}  # ask size -> walker

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps,
             skip: tuple[Check, ...] = (), nodes: "NodeCollection | None" = None) -> BoundChain:
        """The chain for ``ask``: the checks that can reject it, in order, minus ``skip``.
        ``apps`` resolves the holder of a reservation (``ReservationCheck``); ``nodes``: the
        collection the nodes to check belong to (its cached verdicts may be used)."""
        bound = []
        ordinary = 0
        for check in self._plain if is_plain(ask) else self.checks:
            if skip and check in skip:
                continue
            b = check.bind(ask, purpose, apps)
            if b is not None:
                bound.append(b)
                ordinary += b.ordinary
        collapse = nodes is not None and ordinary == len(self.prefilters)
        return BoundChain(tuple(bound), collapse)

    def walker(self, ask: "Ask", apps: Apps) -> Walker:
        """The ``ALLOCATE`` chain for walking ``NodeCollection.order`` (see ``Walker``). A
        plain ask's walker depends on its size only (``is_plain``), so it is made once per
        size and kept (bounded): the allocation hot path binds nothing."""
        if not is_plain(ask):
            return self._make_walker(ask, apps, self._walk)
        cache = self._plain_walkers
        walker = cache.get(ask.resource)
        if walker is None:
            if len(cache) >= PLAIN_WALKERS:
                cache.clear()
            walker = cache[ask.resource] = self._make_walker(ask, apps, self._plain_walk)
        return walker

    @staticmethod
    def _make_walker(ask: "Ask", apps: Apps, checks: tuple[Check, ...]) -> Walker:
        preds = []
        for check in checks:
            b = check.bind(ask, Purpose.ALLOCATE, apps)
            if b is not None:
                preds.append(b.passes)
        return Walker(all_of(preds))

    def first_rejection(self, node: "Node", ask: "Ask", purpose: Purpose, apps: Apps) -> Rejection | None:
        """One node, one ask: the first check that rejects, or None (binds the chain each call;
        bind once with ``bind`` to check many nodes)."""
        return self.bind(ask, purpose, apps).first_rejection(node)


SCHEDULABLE = SchedulableCheck()
READY = ReadyCheck()
RESERVATION = ReservationCheck()
REQUIRED_NODE = RequiredNodeCheck()
SELECTOR = SelectorCheck()
RESOURCES = ResourcesCheck()

CHAIN = Chain((SCHEDULABLE, READY, RESERVATION, REQUIRED_NODE, SELECTOR, RESOURCES))

_OPEN = all_of([c.open for c in CHAIN.prefilters])


def open_for_asks(node: "Node") -> bool:
    """The node passes every pre-filtering check for every ask (``Check.open``):
    ``NodeCollection`` keeps only such nodes in its order."""
    return _OPEN(node)
