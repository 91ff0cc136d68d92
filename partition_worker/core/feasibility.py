"""Node feasibility: the one chain of named checks that says whether a node can take an ask.

What it owns: every node predicate of the core, written once (STYLE #8), and the typed
reason a node turns an ask down, saying whether waiting can help (STYLE #9). Who may use
it: the policies (``scheduler`` through ``find_node``, ``reservations``, ``preemption``),
``node_registry`` (a shrunk node keeps a reservation only while it can hold the ask) and
``diagnosis`` (``korral explain``), so explain cannot disagree with the scheduler.

The chain, cheap stages first; the first stage that rejects names the reason:

| stage | rejects when | reason (``korral explain``) | waiting can help |
|---|---|---|---|
| ``schedulable`` | the node is drained | node drained | yes (undrain) |
| ``ready`` | the node is not ready | node not ready | yes |
| ``reservation`` | another ask holds the node reserved (a required-node ask may take an ordinary ask's reservation, see ``ReservationStage``) | node reserved by another ask | yes |
| ``required-node`` | the ask names another node (``yunikorn.apache.org/requiredNode``) | not the required node | no |
| ``selector`` | a ``korral.io/node-selector/<attr>`` tag does not match | node selector does not match | no |
| ``resources`` | the ask does not fit the room the purpose asks for | insufficient free resources | yes while capacity − occupied holds it, else no |

The ``purpose`` of a check says which room counts: ``ALLOCATE`` needs it free now
(capacity − occupied − allocated); ``RESERVE`` (reservations, preemption) needs the node
to hold the ask once its allocations end (capacity − occupied).

Speed: ``Chain.bind(ask, purpose, apps)`` compiles the stages that can reject this ask
into a tuple of bound checks once (a plain ask has no selector or required-node check).
The allocation fast path (``find_node``) walks ``NodeCollection.order``, which holds only
nodes ``open_for_asks`` (the ``schedulable``, ``ready`` and ``reservation`` stages for an
ask without a reservation; the collection sets the others aside), and checks the remaining
stages through the same stage objects (``RESOURCES.has_room``, ``SELECTOR.matches``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node
    from .objects import Ask

__all__ = ["Purpose", "Rejection", "Stage", "Chain", "BoundChain", "CHAIN", "SCHEDULABLE", "READY",
           "RESERVATION", "REQUIRED_NODE", "SELECTOR", "RESOURCES", "open_for_asks",
           "NO_ROOM_NOW", "NEVER_FITS"]


class Purpose(Enum):
    """Which room a node must have for the ask (the ``resources`` stage) and how a required-node
    ask treats another ask's reservation (the ``reservation`` stage)."""

    ALLOCATE = "allocate"  # free now: capacity - occupied - allocated
    RESERVE = "reserve"  # once its allocations end: capacity - occupied (reservation, preemption)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a node turned an ask down: the stage, the reason ``korral explain`` counts it under,
    and whether waiting (allocations ending, a node coming back) can make the node take it."""

    stage: str
    reason: str
    retry_can_help: bool


Check = Callable[["Node"], "Rejection | None"]
Apps = Mapping[str, "Application"]


class Stage:
    """One named check. ``bind`` returns the check of a node for one ask, or None when the
    stage cannot reject that ask (so a compiled chain skips it)."""

    __slots__ = ("name", "rejection")

    def __init__(self, name: str, rejection: Rejection) -> None:
        self.name = name
        self.rejection = rejection

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps) -> Check | None:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<stage {self.name}>"


class _Schedulable(Stage):
    __slots__ = ()

    def bind(self, ask, purpose, apps):
        rej = self.rejection
        return lambda node: None if node.schedulable else rej


class _Ready(Stage):
    __slots__ = ()

    def bind(self, ask, purpose, apps):
        rej = self.rejection
        return lambda node: None if node.ready else rej


class ReservationStage(Stage):
    """A node reserved by another ask takes no other ask. A required-node (daemon set) ask may
    take the node from an ordinary ask's reservation (YuniKorn v1.2; the caller cancels it once
    the whole chain passed), never from another required-node ask's, and when reserving
    (``RESERVE``) never from an ask of its own application."""

    __slots__ = ()

    def bind(self, ask, purpose, apps):
        rej = self.rejection
        app_id, key, required = ask.app_id, ask.key, bool(ask.required_node)
        spare_own_app = purpose is Purpose.RESERVE

        def check(node: "Node") -> Rejection | None:
            r = node.reservation
            if r is None or (r.ask_key == key and r.app_id == app_id):
                return None
            if not required or (spare_own_app and r.app_id == app_id):
                return rej
            holder = apps.get(r.app_id)
            held = holder.asks.get(r.ask_key) if holder is not None else None
            return rej if held is not None and held.required_node else None
        return check


class _RequiredNode(Stage):
    __slots__ = ()

    def bind(self, ask, purpose, apps):
        want = ask.required_node
        if not want:
            return None
        rej = self.rejection
        return lambda node: None if node.node_id == want else rej


class SelectorStage(Stage):
    """Every ``korral.io/node-selector/<attr>`` tag of the ask matches the node's attribute
    (or its k8s label, see ``Node.attribute``)."""

    __slots__ = ()

    @staticmethod
    def matches(node: "Node", ask: "Ask") -> bool:
        for attr, want in ask.selector:
            if node.attribute(attr) != want:
                return False
        return True

    def bind(self, ask, purpose, apps):
        if not ask.selector:
            return None
        rej, matches = self.rejection, self.matches
        return lambda node: None if matches(node, ask) else rej


NO_ROOM_NOW = Rejection("resources", "insufficient free resources", retry_can_help=True)
NEVER_FITS = Rejection("resources", "insufficient free resources", retry_can_help=False)


class ResourcesStage(Stage):
    """The ask fits the node's free room (``ALLOCATE``) or capacity − occupied (``RESERVE``).
    A node whose capacity − occupied cannot hold it rejects with ``NEVER_FITS``."""

    __slots__ = ()

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
        has_room, can_hold = self.has_room, self.can_hold
        if purpose is Purpose.RESERVE:
            return lambda node: None if can_hold(rv, node) else NEVER_FITS
        return lambda node: None if has_room(rv, node) else (
            NO_ROOM_NOW if can_hold(rv, node) else NEVER_FITS)


SCHEDULABLE = _Schedulable("schedulable", Rejection("schedulable", "node drained", True))
READY = _Ready("ready", Rejection("ready", "node not ready", True))
RESERVATION = ReservationStage("reservation",
                               Rejection("reservation", "node reserved by another ask", True))
REQUIRED_NODE = _RequiredNode("required-node",
                              Rejection("required-node", "not the required node", False))
SELECTOR = SelectorStage("selector", Rejection("selector", "node selector does not match", False))
RESOURCES = ResourcesStage("resources", NO_ROOM_NOW)


def open_for_asks(node: "Node") -> bool:
    """The node passes ``schedulable``, ``ready`` and ``reservation`` for every ask that holds
    no reservation: ``NodeCollection`` keeps only such nodes in its order (the fast path)."""
    return node.schedulable and node.ready and node.reservation is None


class BoundChain:
    """The stages of a chain that can reject one ask, bound to it (``Chain.bind``)."""

    __slots__ = ("checks",)

    def __init__(self, checks: tuple[Check, ...]) -> None:
        self.checks = checks

    def first_rejection(self, node: "Node") -> Rejection | None:
        """The first stage that rejects ``node``, or None when the node passes them all."""
        for check in self.checks:
            rej = check(node)
            if rej is not None:
                return rej
        return None

    def passes(self, node: "Node") -> bool:
        for check in self.checks:
            if check(node) is not None:
                return False
        return True


class Chain:
    """An ordered tuple of stages (``CHAIN`` is the core's one chain)."""

    __slots__ = ("stages",)

    def __init__(self, stages: tuple[Stage, ...]) -> None:
        self.stages = stages

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps,
             skip: tuple[Stage, ...] = ()) -> BoundChain:
        """Compile the chain for ``ask`` once: only the stages that can reject it, in order,
        minus ``skip``. ``apps`` resolves the holder of a reservation (``ReservationStage``)."""
        checks = []
        for stage in self.stages:
            if stage in skip:
                continue
            check = stage.bind(ask, purpose, apps)
            if check is not None:
                checks.append(check)
        return BoundChain(tuple(checks))

    def first_rejection(self, node: "Node", ask: "Ask", purpose: Purpose, apps: Apps) -> Rejection | None:
        """One node, one ask: the first stage that rejects, or None (binds the chain each call;
        bind once with ``bind`` to check many nodes)."""
        return self.bind(ask, purpose, apps).first_rejection(node)


CHAIN = Chain((SCHEDULABLE, READY, RESERVATION, REQUIRED_NODE, SELECTOR, RESOURCES))
