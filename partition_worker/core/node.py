"""Nodes and the partition's node collection with its incrementally maintained order.

Node order (YUNIKORN_BEHAVIOUR.md 1.6 "Node sort"): ascending by (score, nodeID).
Usage share per resource type = 1 - available/capacity; the fair score is the
weighted mean of the shares over the weighted types (least used first);
binpacking uses 1 - fair score (most used first). Weights default to
``{vcore: 1, memory: 1}``.

The order is a sorted list of ``(score, node_id)`` kept up to date by
``NodeCollection.update(node)`` (bisect remove + insert) whenever a node's usage
changes, so choosing a node never sorts all nodes (seed 003's performance note).
"""

from __future__ import annotations

import json
from bisect import bisect_left, insort
from dataclasses import dataclass, field

from common.config.policies import NodeSortPolicy, parse_node_sort_policy
from common.constants import NODE_LABELS, NODE_READY_ATTRIBUTE
from common.resources import ZERO, Resource

from .feasibility import open_for_asks
from .objects import Allocation, Reservation

__all__ = ["Node", "NodeCollection", "NodeSortPolicy", "parse_node_sort_policy", "parse_ready"]


def parse_ready(attrs: dict[str, str]) -> bool:
    """``ready`` attribute: a bool string; missing or unparsable -> True (YuniKorn)."""
    v = attrs.get(NODE_READY_ATTRIBUTE)
    if v is None:
        return True
    v = v.strip().lower()
    if v in ("false", "f", "0"):
        return False
    return True


@dataclass(slots=True, eq=False)
class Node:
    """A node of the partition. ``available = capacity - occupied - allocated`` (may go negative
    after a shrink: the node then stays over-allocated until allocations end)."""

    node_id: str
    attributes: dict[str, str]
    capacity: Resource
    occupied: Resource = ZERO
    allocated: Resource = ZERO
    available: Resource = ZERO
    schedulable: bool = True  # False while drained (DRAIN_NODE)
    ready: bool = True
    allocations: dict[str, Allocation] = field(default_factory=dict)
    reservation: Reservation | None = None
    sort_key: tuple[float, str] = (0.0, "")
    labels: dict[str, str] | None = None
    # foreign allocations here (key -> foreign.ForeignAllocation), counted in ``occupied``
    foreign: dict[str, object] = field(default_factory=dict)
    # ``open_for_asks`` as of the last time the collection looked at the node's state (add,
    # refresh, update): an allocation does not change it, so the hot path reads this
    open: bool = True

    def recompute_available(self) -> None:
        self.available = self.capacity.sub(self.occupied).sub(self.allocated)

    @property
    def usable(self) -> bool:
        return self.schedulable and self.ready

    def attribute(self, name: str) -> str | None:
        """An attribute, falling back to the k8s node labels in ``NODE_LABELS`` (JSON)."""
        v = self.attributes.get(name)
        if v is not None:
            return v
        if self.labels is None:
            raw = self.attributes.get(NODE_LABELS)
            labels: dict[str, str] = {}
            if raw:
                try:
                    parsed = json.loads(raw)
                    if isinstance(parsed, dict):
                        labels = {str(k): str(x) for k, x in parsed.items()}
                except ValueError:
                    labels = {}
            self.labels = labels
        return self.labels.get(name)


class NodeCollection:
    """All nodes of a partition plus their policy order (see module doc).

    Nodes that no ask can take now are kept aside in ``full`` instead of ``order``: drained,
    not ready or reserved nodes (YuniKorn also leaves reserved nodes out of its iterator),
    and nodes with a weighted resource type used up (available <= 0), which an ask that
    requests every weighted type cannot fit. So no ask walks past them: binpacking (fullest
    first) and fair (drained, emptying nodes first) stay cheap. Asks that leave a weighted
    type at zero (e.g. best-effort pods) also look at the usable nodes in ``full``.
    """

    __slots__ = ("nodes", "order", "full", "policy", "weights", "_wsum", "_wkeys")

    def __init__(self, policy: NodeSortPolicy = NodeSortPolicy.FAIR,
                 weights: dict[str, float] | None = None) -> None:
        self.nodes: dict[str, Node] = {}
        self.order: list[tuple[float, str]] = []
        self.full: dict[str, Node] = {}
        self.policy = policy
        self.weights: dict[str, float] = {}
        self._wsum = 0.0
        self._wkeys: tuple[str, ...] = ()
        self._set_weights(weights)

    def _set_weights(self, weights: dict[str, float] | None) -> None:
        w = dict(weights) if weights else {"vcore": 1.0, "memory": 1.0}
        self.weights = {k: float(v) for k, v in w.items() if v > 0}
        self._wsum = sum(self.weights.values())
        self._wkeys = tuple(self.weights)

    def set_policy(self, policy: NodeSortPolicy, weights: dict[str, float] | None) -> None:
        """Change policy/weights and rebuild the order (config update; O(n log n), rare)."""
        self.policy = policy
        self._set_weights(weights)
        self.order = []
        self.full = {}
        for node in self.nodes.values():
            node.open = open_for_asks(node)
            node.sort_key = (self._score(node), node.node_id)
            if self._is_full(node):
                self.full[node.node_id] = node
            else:
                self.order.append(node.sort_key)
        self.order.sort()

    def _score(self, node: Node) -> float:
        cap = node.capacity._v  # hot path: read the dicts directly
        avail = node.available._v
        total = 0.0
        for k, w in self.weights.items():
            c = cap.get(k, 0)
            if c > 0:
                total += w * (1.0 - avail.get(k, 0) / c)
        score = total / self._wsum if self._wsum else 0.0
        if self.policy is NodeSortPolicy.BINPACKING:
            return 1.0 - score
        return score

    def _is_full(self, node: Node) -> bool:
        """Set aside: not ``open_for_asks`` (a pre-filtering check of the feasibility chain,
        e.g. drained, not ready or reserved, rejects it for every ask without a reservation;
        cached in ``Node.open``), or a weighted type used up (the chain's resources check
        rejects every ask that requests every weighted type)."""
        if not node.open:
            return True
        avail = node.available._v
        for k in self._wkeys:
            if avail.get(k, 0) <= 0:
                return True
        return False

    def needs_full_scan(self, ask_resource: Resource) -> bool:
        """True if the ask leaves some weighted type at zero, so set-aside nodes may fit it."""
        rv = ask_resource._v
        for k in self._wkeys:
            if rv.get(k, 0) <= 0:
                return True
        return False

    def full_in_order(self) -> list[Node]:
        return sorted(self.full.values(), key=lambda n: n.sort_key)

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, node_id: str) -> Node | None:
        return self.nodes.get(node_id)

    def add(self, node: Node) -> None:
        node.recompute_available()
        node.open = open_for_asks(node)
        node.sort_key = (self._score(node), node.node_id)
        self.nodes[node.node_id] = node
        if self._is_full(node):
            self.full[node.node_id] = node
        else:
            insort(self.order, node.sort_key)

    def remove(self, node_id: str) -> Node | None:
        node = self.nodes.pop(node_id, None)
        if node is not None:
            if self.full.pop(node_id, None) is None:
                self._drop_key(node.sort_key)
        return node

    def _drop_key(self, key: tuple[float, str]) -> None:
        order = self.order
        i = bisect_left(order, key)
        if i < len(order) and order[i] == key:
            del order[i]
        else:  # should not happen; keep the collection consistent anyway
            order.remove(key)

    def _replace(self, node: Node) -> None:
        key = (self._score(node), node.node_id)
        was_full = node.node_id in self.full
        is_full = self._is_full(node)
        if not was_full and not is_full:
            if key != node.sort_key:
                self._drop_key(node.sort_key)
                node.sort_key = key
                insort(self.order, key)
            return
        if was_full:
            if not is_full:
                del self.full[node.node_id]
                insort(self.order, key)
        else:
            self._drop_key(node.sort_key)
            self.full[node.node_id] = node
        node.sort_key = key

    def refresh(self, node: Node) -> None:
        """Re-place ``node`` after its drain/ready/reservation state changed."""
        node.open = open_for_asks(node)
        self._replace(node)

    def update(self, node: Node) -> None:
        """Re-place ``node`` after its capacity/occupied/allocated or attributes changed."""
        node.recompute_available()
        node.open = open_for_asks(node)
        self._replace(node)

    def update_allocated(self, node: Node, delta: Resource, sign: int) -> None:
        """Hot path of allocate/release: ``allocated += sign*delta`` and re-place the node."""
        if sign > 0:
            node.allocated = node.allocated.add(delta)
            node.available = node.available.sub(delta)
        else:
            node.allocated = node.allocated.sub_checked(delta, f"node {node.node_id} allocated")
            node.available = node.available.add(delta)
        self._replace(node)

    def total_capacity(self) -> Resource:
        total = ZERO
        for n in self.nodes.values():
            total = total.add(n.capacity)
        return total
