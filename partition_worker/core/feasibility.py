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

Speed: each stage is written once, as a condition; ``Chain.bind(ask, purpose, apps)``
compiles the conditions of the stages that can reject this ask (a plain ask has no selector
or required-node check) into one function, so a scan over many nodes (reservation,
preemption, explain) pays one call per node.
The allocation fast path (``find_node``) walks ``NodeCollection.order``, which holds only
nodes ``open_for_asks`` (the ``schedulable``, ``ready`` and ``reservation`` stages for an
ask without a reservation; the collection sets the others aside), and checks the remaining
stages through the same stage objects (``RESOURCES.has_room``, ``SELECTOR.matches``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from string import Formatter
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node
    from .objects import Ask, Reservation

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


Apps = Mapping[str, "Application"]


class Stage:
    """One named check. ``condition`` is a Python expression over ``node`` that holds when the
    node passes; its ``{field}``s name the values ``bind`` gives for one ask (None from
    ``bind``: the stage cannot reject that ask, so a bound chain leaves it out). ``why`` is the
    rejection when the condition fails."""

    __slots__ = ("name", "rejection", "condition")

    def __init__(self, name: str, rejection: Rejection, condition: str) -> None:
        self.name = name
        self.rejection = rejection
        self.condition = condition

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps) -> dict[str, object] | None:
        return {}

    def why(self, node: "Node", values: dict[str, object]) -> Rejection:
        return self.rejection

    def __repr__(self) -> str:
        return f"<stage {self.name}>"


class ReservationStage(Stage):
    """A node reserved by another ask takes no other ask. A required-node (daemon set) ask may
    take the node from an ordinary ask's reservation (YuniKorn v1.2; the caller cancels it once
    the whole chain passed), never from another required-node ask's, and when reserving
    (``RESERVE``) never from an ask of its own application."""

    __slots__ = ()

    def bind(self, ask, purpose, apps):
        app_id, key = ask.app_id, ask.key
        if not ask.required_node:
            return {"may_use": lambda r: r.ask_key == key and r.app_id == app_id}
        spare_own_app = purpose is Purpose.RESERVE

        def may_use(r: "Reservation") -> bool:
            if r.ask_key == key and r.app_id == app_id:
                return True
            if spare_own_app and r.app_id == app_id:
                return False
            holder = apps.get(r.app_id)
            held = holder.asks.get(r.ask_key) if holder is not None else None
            return held is None or not held.required_node
        return {"may_use": may_use}


class _RequiredNode(Stage):
    __slots__ = ()

    def bind(self, ask, purpose, apps):
        return {"want": ask.required_node} if ask.required_node else None


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
        return {"matches": self.matches, "ask": ask} if ask.selector else None


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
        fits = self.can_hold if purpose is Purpose.RESERVE else self.has_room
        return {"fits": fits, "rv": ask.resource._v}

    def why(self, node, values):
        return NO_ROOM_NOW if self.can_hold(values["rv"], node) else NEVER_FITS


SCHEDULABLE = Stage("schedulable", Rejection("schedulable", "node drained", True), "node.schedulable")
READY = Stage("ready", Rejection("ready", "node not ready", True), "node.ready")
RESERVATION = ReservationStage("reservation",
                               Rejection("reservation", "node reserved by another ask", True),
                               "node.reservation is None or {may_use}(node.reservation)")
REQUIRED_NODE = _RequiredNode("required-node",
                              Rejection("required-node", "not the required node", False),
                              "node.node_id == {want}")
SELECTOR = SelectorStage("selector", Rejection("selector", "node selector does not match", False),
                         "{matches}(node, {ask})")
RESOURCES = ResourcesStage("resources", NO_ROOM_NOW, "{fits}({rv}, node)")


def open_for_asks(node: "Node") -> bool:
    """The node passes ``schedulable``, ``ready`` and ``reservation`` for every ask that holds
    no reservation: ``NodeCollection`` keeps only such nodes in its order (the fast path)."""
    return node.schedulable and node.ready and node.reservation is None


class BoundChain:
    """The stages of a chain that can reject one ask, bound to it (``Chain.bind``):
    ``passes(node) -> bool`` and ``first_rejection(node) -> Rejection | None``."""

    __slots__ = ("stages", "passes", "first_rejection")

    def __init__(self, stages: tuple[Stage, ...], passes: Callable[["Node"], bool],
                 first_rejection: Callable[["Node"], "Rejection | None"]) -> None:
        self.stages = stages
        self.passes = passes
        self.first_rejection = first_rejection


class Chain:
    """An ordered tuple of stages (``CHAIN`` is the core's one chain).

    ``bind`` compiles the conditions of the stages that can reject an ask into one function
    (``passes``: their conjunction, in order; ``first_rejection``: the same conditions one by
    one), built once per set of stages and cached: checking a node then costs one call, as the
    hand-written predicates did, instead of one call per stage. The values of each ask are
    bound as closure variables."""

    __slots__ = ("stages", "_compiled")

    def __init__(self, stages: tuple[Stage, ...]) -> None:
        self.stages = stages
        self._compiled: dict[tuple[int, ...], Callable] = {}

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps,
             skip: tuple[Stage, ...] = ()) -> BoundChain:
        """The chain for ``ask``: only the stages that can reject it, in order, minus ``skip``.
        ``apps`` resolves the holder of a reservation (``ReservationStage``)."""
        used: list[int] = []
        values: list[dict] = []
        for i, stage in enumerate(self.stages):
            if stage in skip:
                continue
            v = stage.bind(ask, purpose, apps)
            if v is not None:
                used.append(i)
                values.append(v)
        key = tuple(used)
        make = self._compiled.get(key)
        if make is None:
            make = self._compiled[key] = self._compile(key)
        passes, first_rejection = make(self.stages, values)
        return BoundChain(tuple(self.stages[i] for i in key), passes, first_rejection)

    def first_rejection(self, node: "Node", ask: "Ask", purpose: Purpose, apps: Apps) -> Rejection | None:
        """One node, one ask: the first stage that rejects, or None (binds the chain each call;
        bind once with ``bind`` to check many nodes)."""
        return self.bind(ask, purpose, apps).first_rejection(node)

    def _compile(self, key: tuple[int, ...]) -> Callable:
        """``make(stages, values) -> (passes, first_rejection)`` for the stages at indexes ``key``,
        compiled from their conditions (``values[j]`` holds the bound values of the j-th)."""
        setup: list[str] = []
        conditions: list[str] = []
        for j, i in enumerate(key):
            stage = self.stages[i]
            fields = sorted({f for _, f, _, _ in Formatter().parse(stage.condition) if f})
            setup += [f"    s{i}_{f} = values[{j}][{f!r}]" for f in fields]
            setup.append(f"    why{i}, values{i} = stages[{i}].why, values[{j}]")
            conditions.append(stage.condition.format(**{f: f"s{i}_{f}" for f in fields}))
        src = ["def make(stages, values):", *setup,
               "    def passes(node):",
               "        return " + (" and ".join(f"({c})" for c in conditions) or "True"),
               "    def first_rejection(node):"]
        for i, c in zip(key, conditions):
            src += [f"        if not ({c}):", f"            return why{i}(node, values{i})"]
        src += ["        return None", "    return passes, first_rejection"]
        namespace: dict = {}
        exec(compile("\n".join(src), f"<feasibility chain {key}>", "exec"), namespace)
        return namespace["make"]


CHAIN = Chain((SCHEDULABLE, READY, RESERVATION, REQUIRED_NODE, SELECTOR, RESOURCES))
