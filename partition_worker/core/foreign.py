"""Foreign allocations (YuniKorn 1.7, YUNIKORN-2791/2832): pods the RM runs without the
scheduler (other schedulers, static pods), reported as allocations with the tag ``foreign``.

What it owns: ``by_key`` (allocation key -> ``ForeignAllocation``) and each node's share
(``Node.foreign``). A foreign allocation occupies its node: it is counted in the node's
``occupied`` (so ``available = capacity - occupied - allocated`` leaves room for it) and in
no queue, app, user or partition total. Tag value ``static`` is not preemptable, ``default``
(or any other value, as YuniKorn, which warns) is; it is informational only: foreign
allocations are never victims (preemption only looks at ``Node.allocations``). A second
report with the same key replaces the first (occupied moves by the difference). A node's
foreign allocations go with the node.

Rejections are YuniKorn's: no node (``trying to add a foreign request (non-allocation)``) or an
unknown node. What it uses: the node collection and the outcomes. ``changes`` counts the
changes of a node's room (a cycle may act on them). Who may use it: the partition (commands
``AddForeign`` / ``ReleaseForeign``, node removal), ``node_registry`` (``foreign_total``),
``dao`` (``Node.foreign``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.constants import TAG_FOREIGN
from common.resources import ZERO, Resource

from .commands import AddForeign, ReleaseForeign
from .outcomes import AskRejected, EventType

if TYPE_CHECKING:  # pragma: no cover
    from .node import Node, NodeCollection
    from .outcomes import Outcomes

__all__ = ["ForeignAllocation", "ForeignAllocations", "TAG_FOREIGN", "FOREIGN_STATIC", "foreign_total"]

FOREIGN_STATIC, FOREIGN_DEFAULT = "static", "default"


@dataclass(slots=True, eq=False)
class ForeignAllocation:
    key: str
    node_id: str
    resource: Resource
    priority: int
    create_time_ns: int
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def preemptable(self) -> bool:
        return self.tags.get(TAG_FOREIGN) != FOREIGN_STATIC


def foreign_total(node: "Node") -> Resource:
    total = ZERO
    for fa in node.foreign.values():
        total = total.add(fa.resource)
    return total


class ForeignAllocations:
    """The foreign allocations of one partition (see module doc)."""

    __slots__ = ("by_key", "changes", "_nodes", "_outcomes")

    def __init__(self, nodes: "NodeCollection", outcomes: "Outcomes") -> None:
        self.by_key: dict[str, ForeignAllocation] = {}
        self.changes = 0
        self._nodes = nodes
        self._outcomes = outcomes

    def add(self, cmd: AddForeign, now: int) -> None:
        reject = self._outcomes.rejected_asks
        if not cmd.node_id:
            reject.append(AskRejected("", cmd.key, f"trying to add a foreign request (non-allocation) {cmd.key}"))
            return
        node = self._nodes.get(cmd.node_id)
        if node is None:
            reject.append(AskRejected("", cmd.key, f"failed to find node {cmd.node_id} for allocation {cmd.key}"))
            return
        if cmd.resource.has_negative() or cmd.resource.is_zero():
            reject.append(AskRejected("", cmd.key, f"foreign allocation {cmd.key} on node {cmd.node_id}: "
                                                   f"invalid resource {cmd.resource}"))
            return
        value = cmd.tags.get(TAG_FOREIGN, FOREIGN_DEFAULT)
        if value not in (FOREIGN_STATIC, FOREIGN_DEFAULT):
            self._outcomes.event(EventType.NODE, cmd.node_id, "ForeignTagIllegal",
                                 f"Foreign tag has illegal value, using default: allocation {cmd.key} has {TAG_FOREIGN}={value}", now)
        old = self.by_key.get(cmd.key)
        if old is not None:
            self._drop(old)
        fa = ForeignAllocation(cmd.key, node.node_id, cmd.resource, cmd.priority, now, dict(cmd.tags))
        self.by_key[cmd.key] = fa
        node.foreign[cmd.key] = fa
        node.occupied = node.occupied.add(fa.resource)
        # a bad ports tag: its ports are not known (a pod that wants them may still be placed
        # there); bad pod tags: inter-pod terms do not count it
        for bad in (self._nodes.track_ports(node, fa.tags, 1), self._nodes.pods.track(node, fa.tags, 1)):
            if bad:
                self._outcomes.event(EventType.NODE, cmd.node_id, "ForeignTagIllegal",
                                     f"foreign allocation {cmd.key} on node {cmd.node_id}: {bad}", now)
        self._nodes.update(node)
        self.changes += 1

    def release(self, cmd: ReleaseForeign, now: int) -> None:
        """Unknown keys are ignored (YuniKorn)."""
        fa = self.by_key.get(cmd.key)
        if fa is not None:
            self._drop(fa)
            self.changes += 1

    def node_removed(self, node: "Node") -> None:
        """(the node's pods leave the inter-pod index with the node: ``NodeCollection.remove``)"""
        for key in node.foreign:
            self.by_key.pop(key, None)
        node.foreign.clear()

    def _drop(self, fa: ForeignAllocation) -> None:
        del self.by_key[fa.key]
        node = self._nodes.get(fa.node_id)
        if node is not None and node.foreign.pop(fa.key, None) is not None:
            node.occupied = node.occupied.sub_eliminate_negative(fa.resource)
            self._nodes.track_ports(node, fa.tags, -1)
            self._nodes.pods.track(node, fa.tags, -1)
            self._nodes.update(node)
