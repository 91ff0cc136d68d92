"""Nodes and the partition's node collection with its incrementally maintained order.

Node order (YUNIKORN_BEHAVIOUR.md 1.6 "Node sort"): ascending by (score, nodeID).
Usage share per resource type = 1 - available/capacity; the fair score is the
weighted mean of the shares over the weighted types (least used first);
binpacking uses 1 - fair score (most used first). Weights default to
``{vcore: 1, memory: 1}``.

The order is a sorted list of ``(score, node_id)`` kept up to date by
``NodeCollection.update(node)`` (bisect remove + insert) whenever a node's usage
changes, so choosing a node never sorts all nodes (seed 003's performance note).

A node also carries what the node checks read, parsed once per attribute change
(``Node.apply_attributes``): readiness, its k8s labels and its NoSchedule / NoExecute taints;
and the host ports its allocations use (``PortsInUse``), kept up to date by the collection as
allocations come and go. The collection also feeds the partition's ``interpod.PodIndex``
(``pods``): the pods on each node, for the inter-pod checks.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Callable, Mapping

from common.config.policies import NodeSortPolicy, parse_node_sort_policy
from common.constants import (NODE_LABELS, NODE_READY_ATTRIBUTE, NODE_TAINTS, TAG_HOST_PORTS, TAG_POD_AFFINITY,
                              TAG_POD_LABELS)
from common.resources import ZERO, Resource

from .interpod import PodIndex
from .node_terms import Constraints, PortsInUse, Taint, host_ports_of, parse_labels, parse_taints
from .objects import Allocation, Reservation

__all__ = ["Node", "NodeCollection", "NodeSortPolicy", "parse_node_sort_policy", "parse_ready", "OPEN", "WIDE",
           "CLOSED"]

OPEN, WIDE, CLOSED = 0, 1, 2  # a node's gate: open for every ask / only for asks that widen / for none
IN_ORDER, IN_WIDE, IN_FULL = 0, 1, 2  # where the collection keeps a node
_TOLERATED_MEMO = 4096  # asks' tolerations remembered as tolerating a present taint or not


def parse_ready(attrs: Mapping[str, str]) -> bool:
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
    labels: dict[str, str] | None = None  # the k8s labels (NODE_LABELS); None: not read yet
    # foreign allocations here (key -> foreign.ForeignAllocation), counted in ``occupied``
    foreign: dict[str, object] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()  # NoSchedule / NoExecute taints (NODE_TAINTS)
    ports: PortsInUse | None = None  # host ports its allocations and foreign allocations use
    # the collection's ``gate`` (``feasibility.gate``) as of the last time the collection looked at the node's state (add,
    # refresh, update): an allocation does not change it, so the hot path reads these
    open: bool = True  # passes every pre-filtering check for every ask (open_for_asks)
    gate: int = OPEN
    where: int = IN_ORDER  # the collection's list it is in
    counted_taints: tuple[Taint, ...] = ()  # the taints the collection counted for it
    domains: tuple[str | None, ...] = ()  # its topology domain per level (topology.TopologyIndex)

    def recompute_available(self) -> None:
        self.available = self.capacity.sub(self.occupied).sub(self.allocated)

    @property
    def usable(self) -> bool:
        return self.schedulable and self.ready

    def apply_attributes(self, changed: Mapping[str, str] | None = None) -> list[str]:
        """Read what the node checks use from the attributes (all of them, or the ``changed``
        ones): readiness, labels, taints. Returns what could not be read, naming the attribute
        (the node then has no labels from it; unreadable taints keep every ask off it)."""
        attrs = self.attributes
        names = attrs if changed is None else changed
        errors = []
        if NODE_READY_ATTRIBUTE in names:
            self.ready = parse_ready(attrs)
        if NODE_LABELS in names or changed is None:
            raw = attrs.get(NODE_LABELS)
            self.labels, err = parse_labels(raw) if raw else ({}, "")
            if err:
                errors.append(err)
        if NODE_TAINTS in names:
            self.taints, err = parse_taints(attrs.get(NODE_TAINTS))
            if err:
                errors.append(err)
        return errors

    def label_map(self) -> Mapping[str, str]:
        """What node affinity matches: the k8s labels (``si.io/nodelabels``), or the
        attributes of a node whose RM sends no labels."""
        if NODE_LABELS not in self.attributes:
            return self.attributes
        if self.labels is None:
            self.apply_attributes({NODE_LABELS: ""})
        return self.labels  # type: ignore[return-value]

    def attribute(self, name: str) -> str | None:
        """An attribute, falling back to the k8s node labels in ``NODE_LABELS`` (JSON)."""
        v = self.attributes.get(name)
        if v is not None:
            return v
        if self.labels is None:
            self.apply_attributes({NODE_LABELS: ""})
        return self.labels.get(name)  # type: ignore[union-attr]


class NodeCollection:
    """All nodes of a partition plus their policy order (see module doc).

    Nodes that no ask can take now are kept aside instead of in ``order``: a node a
    pre-filtering check of the feasibility chain rejects (the collection is given the checks'
    verdict on a node, ``feasibility.gate``: it knows no check itself) for every ask without a reservation
    (drained, not ready, reserved; YuniKorn also leaves reserved nodes out of its iterator),
    and a node with a weighted resource type used up (available <= 0), which an ask that
    requests every weighted type cannot fit. So no ask walks past them: binpacking (fullest
    first) and fair (drained, emptying nodes first) stay cheap. A node rejected only by a
    check some asks pass (``Check.widenable``: tainted) is kept in ``wide``, in policy order,
    for those asks to walk with ``order``; the others are in ``full``. Asks that leave a
    weighted type at zero (e.g. best-effort pods) also look at the nodes in ``full``.

    ``taints`` counts the nodes per distinct NoSchedule / NoExecute taint (the taint check
    costs nothing while it is empty); ``taints_version`` changes whenever its keys do.
    """

    __slots__ = ("nodes", "order", "wide", "full", "policy", "weights", "taints", "taints_version", "pods",
                 "topology", "_gate_of", "_wsum", "_wkeys", "_tolerated", "_tolerated_version")

    def __init__(self, gate: Callable[[Node], int], policy: NodeSortPolicy = NodeSortPolicy.FAIR,
                 weights: dict[str, float] | None = None) -> None:
        self._gate_of = gate  # the pre-filtering checks' verdict on a node (feasibility.gate)
        self.nodes: dict[str, Node] = {}
        self.pods = PodIndex(self.nodes)  # the pods on each node (inter-pod checks)
        # the domains' free room (topology.TopologyIndex, given by the partition; None: no levels)
        self.topology = None
        self.order: list[tuple[float, str]] = []
        self.wide: list[tuple[float, str]] = []
        self.full: dict[str, Node] = {}
        self.taints: dict[Taint, int] = {}
        self.taints_version = 0
        self._tolerated: dict[Constraints, bool] = {}
        self._tolerated_version = 0
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
        self.order, self.wide, self.full = [], [], {}
        for node in self.nodes.values():
            self._gate(node)
            node.sort_key = (self._score(node), node.node_id)
            self._put(node, self._where(node))
        self.order.sort()
        self.wide.sort()

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

    def _gate(self, node: Node) -> None:
        """Ask the feasibility chain's pre-filtering checks about the node (its state changed)
        and count its taints."""
        node.gate = g = self._gate_of(node)
        node.open = g == OPEN
        if node.taints is not node.counted_taints:
            self._count_taints(node.counted_taints, -1)
            self._count_taints(node.taints, 1)
            node.counted_taints = node.taints

    def _count_taints(self, taints: tuple[Taint, ...], sign: int) -> None:
        counts = self.taints
        for t in taints:
            n = counts.get(t, 0) + sign
            if n > 0:
                if t not in counts:
                    self.taints_version += 1
                counts[t] = n
            else:
                counts.pop(t, None)
                self.taints_version += 1

    def any_tolerated(self, constraints: Constraints) -> bool:
        """``constraints``' tolerations tolerate a taint some node has (remembered until the set
        of taints changes): if not, its ask is checked like one without tolerations."""
        memo = self._tolerated
        if self._tolerated_version != self.taints_version or len(memo) > _TOLERATED_MEMO:
            memo.clear()
            self._tolerated_version = self.taints_version
        known = memo.get(constraints)
        if known is None:
            known = memo[constraints] = constraints.tolerates_any(self.taints)
        return known

    def _where(self, node: Node) -> int:
        """The list the node belongs in (see the class doc)."""
        g = node.gate
        if g == CLOSED:
            return IN_FULL
        avail = node.available._v
        for k in self._wkeys:
            if avail.get(k, 0) <= 0:
                return IN_FULL
        return IN_ORDER if g == OPEN else IN_WIDE

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
        node.counted_taints = ()  # new here: count its taints
        self._gate(node)
        node.sort_key = (self._score(node), node.node_id)
        self.nodes[node.node_id] = node
        self._put(node, self._where(node))
        if self.topology is not None:
            self.topology.relabel(node)
        self.pods.nodes_changed()

    def remove(self, node_id: str) -> Node | None:
        node = self.nodes.pop(node_id, None)
        if node is not None:
            self._take(node)
            self._count_taints(node.counted_taints, -1)
            node.counted_taints = ()
            self.pods.node_removed(node)
            if self.topology is not None:
                self.topology.removed(node)
        return node

    def _put(self, node: Node, where: int) -> None:
        node.where = where
        if where == IN_ORDER:
            insort(self.order, node.sort_key)
        elif where == IN_WIDE:
            insort(self.wide, node.sort_key)
        else:
            self.full[node.node_id] = node

    def _take(self, node: Node) -> None:
        where = node.where
        if where == IN_FULL:
            self.full.pop(node.node_id, None)
        else:
            _drop_key(self.order if where == IN_ORDER else self.wide, node.sort_key)

    def _replace(self, node: Node) -> None:
        key = (self._score(node), node.node_id)
        where = self._where(node)
        if where == node.where:
            if key != node.sort_key and where != IN_FULL:
                keys = self.order if where == IN_ORDER else self.wide
                _drop_key(keys, node.sort_key)
                insort(keys, key)
            node.sort_key = key
            if self.topology is not None:
                self.topology.changed(node)
            return
        self._take(node)
        node.sort_key = key
        self._put(node, where)
        if self.topology is not None:
            self.topology.changed(node)

    def refresh(self, node: Node) -> None:
        """Re-place ``node`` after its drain/ready/reservation state changed."""
        self._gate(node)
        self._replace(node)

    def update(self, node: Node) -> None:
        """Re-place ``node`` after its capacity/occupied/allocated or attributes changed."""
        node.recompute_available()
        self._gate(node)
        if self.topology is not None:
            self.topology.relabel(node)  # (its labels may have changed)
        self._replace(node)

    def update_allocated(self, node: Node, delta: Resource, sign: int,
                         tags: Mapping[str, str] | None = None) -> None:
        """Hot path of allocate/release: ``allocated += sign*delta`` and re-place the node;
        ``tags``: the allocation's, for the host ports it uses."""
        if sign > 0:
            node.allocated = node.allocated.add(delta)
            node.available = node.available.sub(delta)
        else:
            node.allocated = node.allocated.sub_checked(delta, f"node {node.node_id} allocated")
            node.available = node.available.add(delta)
        if tags:
            if TAG_HOST_PORTS in tags:
                self.track_ports(node, tags, sign)
            if TAG_POD_LABELS in tags or TAG_POD_AFFINITY in tags:
                self.pods.track(node, tags, sign)
        self._replace(node)

    def track_ports(self, node: Node, tags: Mapping[str, str], sign: int) -> str:
        """An allocation with ``tags`` came (``sign`` 1) to or left (-1) ``node``: its host
        ports are in use there or free again. Returns what is wrong with its ports tag ("" if
        nothing; such ports are not tracked)."""
        ports, err = host_ports_of(tags)
        if ports:
            if sign > 0:
                if node.ports is None:
                    node.ports = PortsInUse()
                node.ports.add(ports)
            elif node.ports is not None:
                node.ports.remove(ports)
                if not node.ports:
                    node.ports = None
        return err

    def total_capacity(self) -> Resource:
        total = ZERO
        for n in self.nodes.values():
            total = total.add(n.capacity)
        return total


def _drop_key(keys: list[tuple[float, str]], key: tuple[float, str]) -> None:
    i = bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        del keys[i]
    else:  # should not happen; keep the collection consistent anyway
        keys.remove(key)
