"""Node feasibility: the one list of node checks that says whether a node can take an ask.

What it owns: every node predicate of the core, each a small class written once (STYLE #8),
and the typed reason a node turns an ask down, saying whether waiting can help (STYLE #9).
Who may use it: the policies (``scheduler`` through ``node_choice.find_node``,
``reservations``, ``preemption``), ``node_registry`` (a changed node keeps a reservation only
while it can hold the ask), ``node`` (the node order leaves out the nodes the pre-filtering
checks reject) and ``diagnosis`` (``korral explain``), so none of them can disagree.

The checks, in ``CHAIN`` order (cheap first); the first that rejects names the reason. The
reasons are kube-scheduler's where it has one (the k8s shim shows them in the pod's
``PodScheduled=False`` condition):

| check | rejects when | reason | waiting can help | pre-filters |
|---|---|---|---|---|
| ``unsupported`` | the ask is tagged ``korral.io/unsupported-constraints`` (every node) | unsupported constraint: <names> | no | |
| ``schedulable`` | the node is drained (cordoned) | node(s) were unschedulable | yes | yes |
| ``ready`` | the node is not ready | node(s) were not ready | yes | yes |
| ``reservation`` | another ask holds the node reserved (a required-node ask may take an ordinary ask's reservation, see ``ReservationCheck``) | node(s) were reserved for another ask | yes | yes |
| ``required-node`` | the ask names another node (``yunikorn.apache.org/requiredNode``) | node(s) didn't match the requested node name | no | |
| ``gang-topology`` | the ask's gang is pinned to another topology domain (``korral.io/gang-topology``, ``topology.py``) | node(s) didn't match the gang's topology domain (<block>/<rack>) | no | |
| ``taints`` | a NoSchedule / NoExecute taint the ask does not tolerate | node(s) had untolerated taint {key: value} | no | yes, widenable |
| ``selector`` | a ``korral.io/node-selector/<label>`` tag does not match | node(s) didn't match Pod's node affinity/selector | no | |
| ``node-affinity`` | the required node affinity does not match | node(s) didn't match Pod's node affinity/selector | no | |
| ``node-requirements`` | a ``korral.io/node-requirements`` selector does not match (volumes, devices, nodes excluded for a while) | the RM's reason for that selector, e.g. node(s) had volume node affinity conflict | as the RM says (``retry``) | |
| ``host-ports`` | a wanted host port is in use there | node(s) didn't have free ports for the requested pod ports | yes | |
| ``resources`` | the ask does not fit the room the purpose asks for | Insufficient <resource> | yes while capacity − occupied holds it, else no | |
| ``topology-spread`` | a ``korral.io/topology-spread`` DoNotSchedule constraint's skew would exceed maxSkew there, or the node lacks its key | node(s) didn't match pod topology spread constraints (``(missing required label)``) | yes (no for a missing label) | |
| ``pod-affinity`` | a required pod affinity term has no matching pod in the node's domain (``korral.io/pod-affinity`` ``required``) | node(s) didn't match pod affinity rules | yes (no when the node lacks a term's key) | |
| ``pod-anti-affinity`` | a required anti-affinity term has a matching pod in the node's domain (``requiredAnti``) | node(s) didn't match pod anti-affinity rules | yes | |
| ``existing-anti-affinity`` | an existing pod's required anti-affinity term matches the ask's pod and that pod is in the node's domain | node(s) didn't satisfy existing pods anti-affinity rules | yes | |

A bad tag value (not JSON, wrong shape) makes its check reject every node with a reason naming
the tag and what is wrong; waiting cannot help (a bad ``korral.io/pod-labels``: ``pod-affinity``).

The inter-pod checks (kube-scheduler's order: after the resources fit) read the partition's pod
index (``interpod.PodIndex``, ``NodeCollection.pods``): counts per topology domain kept up to
date as allocations land and leave, so a decision earlier in the same cycle counts. They bind
only with the node collection (without it they cannot reject). An ask they may reject is not
plain, and its ``signature`` carries the index's version (a pod landing may let it pass).
Preferred terms and ScheduleAnyway constraints are not evaluated (no scoring: the node order is
the policy's).

A check is a ``Check``: ``bind(ask, purpose, apps, nodes) -> Bound | None`` (None: it cannot
reject this ask, so it costs the ask nothing), and the ``Bound`` check has ``passes(node)`` and
``rejection(node)``. Adding a check is one class and one line in ``CHAIN``.

The ``purpose`` says which room counts: ``ALLOCATE`` needs it free now (capacity − occupied −
allocated); ``RESERVE`` (reservations, preemption) needs the node to hold the ask once its
allocations end (capacity − occupied).

Pre-filtering: a check with ``prefilter`` has ``open(node)``, true when the node passes it for
every ask (its ``passes`` for any ask holds wherever ``open`` does; it binds None only when it
is open for every node). ``NodeCollection`` keeps the nodes that are not ``open_for_asks`` out
of its order, so ``find_node`` walks only nodes that pass those checks and evaluates the rest
(``Chain.walker``). A ``widenable`` pre-filtering check (taints) is one some asks pass where it
is not open (they tolerate the taint): nodes only it rejects are kept in ``NodeCollection.wide``
and such asks walk both lists in policy order (``Bound.widens``). An ask's own reserved node is
the reserved pass's; a required-node ask looks at its node only.

Speed: a bound chain is a tuple of bound checks whose ``passes`` are plain closures over the
ask's values, and-ed together (``all_of``). A plain ask (``is_plain``) binds only the checks
that apply to every ask, and its walker is made once per size.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Hashable, Mapping

from common.constants import (NODE_TAINTS, TAG_HOST_PORTS, TAG_NODE_AFFINITY, TAG_NODE_REQUIREMENTS,
                              TAG_POD_AFFINITY, TAG_POD_LABELS, TAG_TOLERATIONS, TAG_TOPOLOGY_SPREAD)

from .node import CLOSED, OPEN, WIDE
from .node_terms import Taint, first_untolerated

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node, NodeCollection
    from .interpod import Spread
    from .objects import Ask, Reservation

__all__ = ["Purpose", "Rejection", "Check", "Bound", "BoundChain", "Chain", "Walker", "CHAIN",
           "UNSUPPORTED", "SCHEDULABLE", "READY", "RESERVATION", "REQUIRED_NODE", "TOPOLOGY", "TAINTS",
           "SELECTOR", "NODE_AFFINITY", "NODE_REQUIREMENTS", "HOST_PORTS", "RESOURCES", "TOPOLOGY_SPREAD",
           "POD_AFFINITY", "POD_ANTI_AFFINITY", "EXISTING_ANTI_AFFINITY", "INTERPOD", "interpod_applies",
           "open_for_asks", "gate",
           "is_plain", "signature", "all_of", "insufficient", "OPEN", "WIDE", "CLOSED",
           "AFFINITY_REASON"]

Predicate = Callable[["Node"], bool]
Apps = Mapping[str, "Application"]
PLAIN_WALKERS = 256  # plain asks' walkers kept, by size (cleared when full)
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"  # kube-scheduler's


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


def is_plain(ask: "Ask", nodes: "NodeCollection | None" = None) -> bool:
    """The ask carries nothing a node could reject it for besides the checks every ask gets:
    no selector, no required node, no node terms, or only tolerations that tolerate none of
    the taints on ``nodes`` (without ``nodes``: any tolerations count). Plain asks of one size
    fare the same on every node. An ask of a gang pinned to a topology domain is not."""
    if ask.selector or ask.required_node or (ask.topology is not None and ask.topology.pin is not None):
        return False
    c = ask.constraints
    if c is None:
        return True
    if c.affinity is not None or c.ports or c.unsupported or c.errors or c.requirements or nodes is None:
        return False
    if c.pod is not None and (c.pod_affinity is not None or c.spread or nodes.pods.anti_against(c.pod)):
        return False  # inter-pod terms of its own, or existing pods' anti-affinity against it
    return not nodes.taints or not nodes.any_tolerated(c)


def interpod_applies(ask: "Ask", nodes: "NodeCollection") -> bool:
    """Some inter-pod check may reject ``ask`` (its own terms, or existing pods' anti-affinity
    matching it): what it passes then depends on the pods where it goes."""
    c = ask.constraints
    return c is not None and c.pod is not None and (
        c.pod_affinity is not None or bool(c.spread) or bool(nodes.pods.anti_against(c.pod)))


def signature(ask: "Ask", nodes: "NodeCollection | None" = None) -> Hashable:
    """Asks with equal signatures and sizes fare the same on every node (None: plain). Pods of
    one workload share their ``Constraints`` object, hence their signature."""
    t = ask.topology
    pin = t.pin if t is not None else None
    if not ask.selector and not ask.required_node and pin is None and (ask.constraints is None or is_plain(ask, nodes)):
        return None  # (the common case inline: the allocation hot path)
    if pin is not None:
        return (ask.selector, ask.required_node, ask.constraints, pin)
    if nodes is not None and interpod_applies(ask, nodes):  # pods coming and going change its verdicts
        return (ask.selector, ask.required_node, ask.constraints, nodes.pods.version)
    return (ask.selector, ask.required_node, ask.constraints)


def _never(node: "Node") -> bool:
    return False


class Bound:
    """One check bound to one ask: ``passes(node)``, and ``rejection(node)`` for a node it
    does not pass (``why`` gives it when it depends on the node).

    ``ordinary``: a pre-filtering check that passes exactly the nodes it is ``open`` for;
    ``widens``: a widenable one that passes some nodes it is not open for; ``everywhere``: the
    ask is rejected by every node (``everywhere``'s check says why, e.g. a bad tag value)."""

    __slots__ = ("check", "passes", "why", "ordinary", "widens", "everywhere")

    def __init__(self, check: "Check", passes: Predicate,
                 why: Callable[["Node"], Rejection] | None = None, *, ordinary: bool = False,
                 widens: bool = False, everywhere: bool = False) -> None:
        self.check = check
        self.passes = passes
        self.why = why
        self.ordinary = ordinary
        self.widens = widens
        self.everywhere = everywhere

    def rejection(self, node: "Node") -> Rejection:
        return self.check.rejection if self.why is None else self.why(node)

    def __repr__(self) -> str:
        return f"<bound {self.check.name}>"


def rejects_everywhere(check: "Check", reason: str) -> Bound:
    """A bound check that no node passes, for ``reason`` (waiting cannot help)."""
    rejection = Rejection(check.name, reason, False)
    return Bound(check, _never, lambda node: rejection, everywhere=True)


class Check:
    """One named node check (see the module doc). ``rejection`` is its usual rejection;
    ``prefilter``: the node order may leave out the nodes ``open`` says no to; ``widenable``:
    (pre-filtering) some asks pass nodes it is not open for; ``for_plain``: it may reject a
    plain ask (``is_plain``), else ``bind`` is not even asked for one."""

    name = ""
    rejection: Rejection
    prefilter = False
    widenable = False
    for_plain = True

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps,
             nodes: "NodeCollection | None") -> Bound | None:
        raise NotImplementedError

    def open(self, node: "Node") -> bool:
        """(pre-filtering checks) The node passes this check for every ask."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<check {self.name}>"


class UnsupportedCheck(Check):
    """An ask whose pod has constraints the core does not evaluate (required inter-pod
    (anti-)affinity, topology spread with DoNotSchedule, ...: the RM names them in
    ``korral.io/unsupported-constraints``) is never placed blindly: every node rejects it."""

    name = "unsupported"
    rejection = Rejection("unsupported", "unsupported constraint", False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None or not c.unsupported:
            return None
        names = c.unsupported
        return rejects_everywhere(self, f"unsupported constraint{'s' if len(names) > 1 else ''}: "
                                        f"{', '.join(names)}")


class NodeStateCheck(Check):
    """A flag of the node's own state, the same for every ask: ``schedulable`` (a drained node,
    DRAIN_NODE, takes no new work; the k8s shim drains a cordoned node) and ``ready`` (a node
    whose ``ready`` attribute says false takes none until it is ready). Waiting can help."""

    prefilter = True

    def __init__(self, name: str, reason: str, flag: str) -> None:
        self.name = name
        self.rejection = Rejection(name, reason, True)
        self.open = attrgetter(flag)  # type: ignore[method-assign]
        self._bound = Bound(self, self.open, ordinary=True)

    def bind(self, ask, purpose, apps, nodes):
        return self._bound


class ReservationCheck(Check):
    """A node reserved by another ask takes no other ask. A required-node (daemon set) ask may
    take the node from an ordinary ask's reservation (YuniKorn v1.2; the caller cancels it once
    the whole chain passed), never from another required-node ask's, and when reserving
    (``RESERVE``) never from an ask of its own application."""

    name = "reservation"
    rejection = Rejection("reservation", "node(s) were reserved for another ask", True)
    prefilter = True

    def __init__(self) -> None:
        self._ordinary = Bound(self, self.open, ordinary=True)  # an ask that holds no reservation

    @staticmethod
    def open(node: "Node") -> bool:
        return node.reservation is None

    def bind(self, ask, purpose, apps, nodes):
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


class TopologyCheck(Check):
    """An ask of a gang pinned to a topology domain goes to that domain's nodes
    (``topology.py``: the pin lasts while a placeholder of the app is allocated)."""

    name = "gang-topology"
    rejection = Rejection("gang-topology", "node(s) didn't match the gang's topology domain", False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        t = ask.topology
        pin = t.pin if t is not None else None
        if pin is None:
            return None
        level, name = pin.level, pin.name
        rejection = Rejection(self.name, f"node(s) didn't match the gang's topology domain "
                                         f"({'/'.join(pin.path.values())})", False)

        def passes(node: "Node") -> bool:
            d = node.domains
            return len(d) > level and d[level] == name
        return Bound(self, passes, lambda node: rejection)


class RequiredNodeCheck(Check):
    """An ask tagged ``yunikorn.apache.org/requiredNode`` (a daemon set pod) goes to that node."""

    name = "required-node"
    rejection = Rejection("required-node", "node(s) didn't match the requested node name", False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        want = ask.required_node
        if not want:
            return None
        return Bound(self, lambda node: node.node_id == want)


@lru_cache(maxsize=1024)
def _untolerated(taint: Taint) -> Rejection:
    if taint.invalid:
        return Rejection("taints", f"node(s) had unreadable taints ({NODE_TAINTS})", False)
    return Rejection("taints", f"node(s) had untolerated taint {taint.describe()}", False)


def _first_taint(node: "Node") -> Rejection:
    return _untolerated(node.taints[0])


class TaintCheck(Check):
    """kube-scheduler's TaintToleration filter: every NoSchedule and NoExecute taint of the node
    (attribute ``korral.io/taints``) must be tolerated by the ask (tag ``korral.io/tolerations``;
    ``node_terms.Toleration.tolerates``); PreferNoSchedule is ignored. The reason names the
    node's first untolerated taint. Free while no node has such a taint; an ask whose
    tolerations tolerate none of the taints present is checked like one without any."""

    name = "taints"
    rejection = Rejection("taints", "node(s) had untolerated taint", False)
    prefilter = True
    widenable = True

    def __init__(self) -> None:
        self._ordinary = Bound(self, self.open, _first_taint, ordinary=True)

    @staticmethod
    def open(node: "Node") -> bool:
        return not node.taints

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is not None and c.errors and c.error(TAG_TOLERATIONS):
            return rejects_everywhere(self, f"invalid {c.error(TAG_TOLERATIONS)}")
        if nodes is not None and not nodes.taints:
            return None  # open for every node
        if c is None or not c.tolerations or (nodes is not None and not nodes.any_tolerated(c)):
            return self._ordinary
        tolerations = c.tolerations

        def passes(node: "Node") -> bool:
            taints = node.taints
            return not taints or first_untolerated(taints, tolerations) is None

        def why(node: "Node") -> Rejection:
            return _untolerated(first_untolerated(node.taints, tolerations))  # type: ignore[arg-type]
        return Bound(self, passes, why, widens=True)


class SelectorCheck(Check):
    """Every ``korral.io/node-selector/<label>`` tag of the ask (a pod's spec.nodeSelector)
    matches the node's attribute, or its k8s label (``Node.attribute``)."""

    name = "selector"
    rejection = Rejection("selector", AFFINITY_REASON, False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        selector = ask.selector
        if not selector:
            return None

        def passes(node: "Node") -> bool:
            for attr, want in selector:
                if node.attribute(attr) != want:
                    return False
            return True
        return Bound(self, passes)


class NodeAffinityCheck(Check):
    """kube-scheduler's required node affinity (tag ``korral.io/node-affinity``, a NodeSelector):
    terms ORed, expressions ANDed, operators In, NotIn, Exists, DoesNotExist, Gt, Lt over the
    node's labels (``Node.label_map``), matchFields on ``metadata.name`` (the node ID). A term
    Kubernetes would not accept matches nothing; the reason then says what is wrong with it."""

    name = "node-affinity"
    rejection = Rejection("node-affinity", AFFINITY_REASON, False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None:
            return None
        if c.errors and c.error(TAG_NODE_AFFINITY):
            return rejects_everywhere(self, f"{AFFINITY_REASON} (invalid {c.error(TAG_NODE_AFFINITY)})")
        affinity = c.affinity
        if affinity is None:
            return None
        matches = affinity.matches
        rejection = self.rejection if not affinity.error else \
            Rejection(self.name, f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY}: {affinity.error})", False)
        return Bound(self, lambda node: matches(node.label_map(), node.node_id), lambda node: rejection)


class NodeRequirementsCheck(Check):
    """Further node selectors the RM sends for what it alone can see (tag
    ``korral.io/node-requirements``): a bound volume's node affinity or zone, the nodes where an
    unbound volume or a claim's devices can be had, nodes excluded for a while. Every one must
    match; the first that does not names the reason the RM gave it."""

    name = "node-requirements"
    rejection = Rejection("node-requirements", "node(s) didn't match the pod's node requirements", False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None:
            return None
        if c.errors and c.error(TAG_NODE_REQUIREMENTS):
            return rejects_everywhere(self, f"invalid {c.error(TAG_NODE_REQUIREMENTS)}")
        required = c.requirements
        if not required:
            return None

        def passes(node: "Node") -> bool:
            labels, node_id = node.label_map(), node.node_id
            for r in required:
                if not r.matches(labels, node_id):
                    return False
            return True

        def why(node: "Node") -> Rejection:
            labels, node_id = node.label_map(), node.node_id
            first = next((r for r in required if not r.matches(labels, node_id)), required[0])
            return _requirement_rejection(first.reason, first.retry)
        return Bound(self, passes, why)


@lru_cache(maxsize=256)
def _requirement_rejection(reason: str, retry: bool) -> Rejection:
    return Rejection(NodeRequirementsCheck.name, reason, retry)


class HostPortsCheck(Check):
    """kube-scheduler's NodePorts filter: no wanted host port (tag ``korral.io/host-ports``)
    conflicts with one in use on the node by an allocation or a foreign allocation
    (``node_terms.PortsInUse``: same protocol and port, on the same IP or 0.0.0.0 on either
    side). Waiting can help: the port is free once that allocation ends."""

    name = "host-ports"
    rejection = Rejection("host-ports", "node(s) didn't have free ports for the requested pod ports", True)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None:
            return None
        if c.errors and c.error(TAG_HOST_PORTS):
            return rejects_everywhere(self, f"invalid {c.error(TAG_HOST_PORTS)}")
        wanted = c.ports
        if not wanted:
            return None

        def passes(node: "Node") -> bool:
            used = node.ports
            return used is None or not used.conflicts(wanted)
        return Bound(self, passes)


@lru_cache(maxsize=1024)
def insufficient(resource: str, retry_can_help: bool) -> Rejection:
    """kube-scheduler's ``Insufficient <resource>``."""
    return Rejection("resources", f"Insufficient {resource}", retry_can_help)


class ResourcesCheck(Check):
    """The ask fits the node's free room (``ALLOCATE``) or capacity − occupied (``RESERVE``).
    The reason names the first resource of the ask that does not fit; waiting can help only
    while capacity − occupied holds the ask."""

    name = "resources"
    rejection = Rejection("resources", "Insufficient resources", True)

    @staticmethod
    def can_hold(rv: dict, node: "Node") -> bool:
        """``rv`` fits the node's capacity − occupied (YuniKorn's FitIn: a negative room counts
        as 0): the node can take it once its allocations end."""
        cap, occ = node.capacity._v, node.occupied._v
        for k, v in rv.items():
            if v > 0 and v > cap.get(k, 0) - occ.get(k, 0):
                return False
        return True

    @staticmethod
    def why(rv: dict, node: "Node") -> Rejection:
        cap, occ = node.capacity._v, node.occupied._v
        for k, v in rv.items():
            if v > 0 and v > cap.get(k, 0) - occ.get(k, 0):
                return insufficient(k, False)
        av = node.available._v
        for k, v in rv.items():
            if v > av.get(k, 0):
                return insufficient(k, True)
        return ResourcesCheck.rejection

    def bind(self, ask, purpose, apps, nodes):
        rv = ask.resource._v
        if purpose is Purpose.RESERVE:
            def passes(node: "Node") -> bool:  # can_hold, inlined: reservation scans
                cap, occ = node.capacity._v, node.occupied._v
                for k, v in rv.items():
                    if v > 0 and v > cap.get(k, 0) - occ.get(k, 0):
                        return False
                return True
        else:
            def passes(node: "Node") -> bool:  # fits the free room now: the allocation hot path
                av = node.available._v
                for k, v in rv.items():
                    if v > av.get(k, 0):
                        return False
                return True
        why = self.why
        return Bound(self, passes, lambda node: why(rv, node))


SPREAD_REASON = "node(s) didn't match pod topology spread constraints"  # kube-scheduler's reasons
POD_AFFINITY_REASON = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"


def _eligible(ask: "Ask", spread: "Spread", keys: tuple[str, ...],
              nodes: "NodeCollection") -> tuple[frozenset[str], dict[str, str] | None]:
    """The domains of ``spread`` the ask's pod counts (its eligible nodes': they have every
    constraint's key and, per the policies, pass its node affinity / nodeSelector and tolerate
    their taints), and node ID -> domain of those nodes (None: every node with the key is
    eligible). O(nodes), remembered until nodes come, go or change labels or taints."""
    index = nodes.pods
    c = ask.constraints
    key = spread.term.topology_key
    affinity = c.affinity if c is not None and spread.honor_affinity else None
    selector = ask.selector if spread.honor_affinity else ()
    tolerations = c.tolerations if c is not None and spread.honor_taints else ()
    # what eligibility depends on (the pods of every workload spread the same way share it)
    memo_key = (key, keys, affinity, selector, spread.honor_taints, tolerations)
    known = index.eligible.get(memo_key)
    if known is not None:
        return known  # type: ignore[return-value]
    domains: set[str] = set()
    eligible: dict[str, str] = {}
    every = True
    for node in nodes.nodes.values():
        labels = node.label_map()
        d = labels.get(key)
        if d is None:
            continue
        ok = all(k in labels for k in keys)
        if ok and affinity is not None:
            ok = affinity.matches(labels, node.node_id)
        if ok and selector:
            ok = all(node.attribute(a) == v for a, v in selector)
        if ok and spread.honor_taints and node.taints:
            ok = first_untolerated(node.taints, tolerations) is None
        if ok:
            domains.add(d)
            eligible[node.node_id] = d
        else:
            every = False
    if len(index.eligible) >= 256:
        index.eligible.clear()
    result = index.eligible[memo_key] = (frozenset(domains), None if every else eligible)
    return result


class TopologySpreadCheck(Check):
    """kube-scheduler's PodTopologySpread filter, DoNotSchedule constraints (tag
    ``korral.io/topology-spread``): per constraint, the pods of the ask's namespace its selector
    matches are counted per domain of the eligible nodes (``_eligible``); the node passes when
    its domain's count, plus one if the pod matches the selector itself, minus the lowest count
    of an eligible domain (0 while there are fewer eligible domains than ``minDomains``) is at
    most ``maxSkew``. A node without a constraint's key never passes (missing required label)."""

    name = "topology-spread"
    rejection = Rejection("topology-spread", SPREAD_REASON, True)
    missing = Rejection("topology-spread", SPREAD_REASON + " (missing required label)", False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None:
            return None
        if c.errors and c.error(TAG_TOPOLOGY_SPREAD):
            return rejects_everywhere(self, f"{SPREAD_REASON} (invalid {c.error(TAG_TOPOLOGY_SPREAD)})")
        spreads = c.spread
        if not spreads or nodes is None:
            return None
        index, own = nodes.pods, c.pod.labels  # type: ignore[union-attr]
        keys = tuple(s.term.topology_key for s in spreads)
        limits = []  # (key, count per eligible domain, the highest count the node's domain may have)
        for s in spreads:
            domains, eligible = _eligible(ask, s, keys, nodes)
            counts = index.counts(s.term, positive=True)
            if eligible is None:
                by_domain = counts.by_domain
            else:
                by_domain = {}
                for nid, n in counts.by_node.items():
                    d = eligible.get(nid)
                    if d is not None:
                        by_domain[d] = by_domain.get(d, 0) + n
            low = 0 if len(domains) < s.min_domains or len(by_domain) < len(domains) else min(by_domain.values())
            self_match = 1 if s.term.selector.matches(own) else 0
            limits.append((s.term.topology_key, by_domain, s.max_skew + low - self_match))

        def passes(node: "Node") -> bool:
            labels = node.label_map()
            for key, by_domain, most in limits:
                d = labels.get(key)
                if d is None or by_domain.get(d, 0) > most:
                    return False
            return True

        def why(node: "Node") -> Rejection:
            labels = node.label_map()
            return self.missing if any(k not in labels for k in keys) else self.rejection
        return Bound(self, passes, why)


class PodAffinityCheck(Check):
    """kube-scheduler's InterPodAffinity filter, required pod affinity (tag
    ``korral.io/pod-affinity``, ``required``): for every term, the node has the term's
    topology key and its domain holds a pod the term matches (its selector, in its
    namespaces). The first pod of a self-affine group may go anywhere: when no pod matches any
    term anywhere and the pod matches all its own terms, a node with every key passes. A bad
    ``korral.io/pod-labels`` tag is rejected here too (the pod's labels are unknown)."""

    name = "pod-affinity"
    rejection = Rejection("pod-affinity", POD_AFFINITY_REASON, True)
    missing = Rejection("pod-affinity", POD_AFFINITY_REASON, False)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None:
            return None
        if c.errors:
            err = c.error(TAG_POD_AFFINITY) or c.error(TAG_POD_LABELS)
            if err:
                return rejects_everywhere(self, f"{POD_AFFINITY_REASON} (invalid {err})")
        aff = c.pod_affinity
        if aff is None or not aff.required or nodes is None:
            return None
        index = nodes.pods
        counted = [index.counts(t, positive=True) for t in aff.required]
        terms = tuple((t.topology_key, n.by_domain) for t, n in zip(aff.required, counted))
        first = all(n.total == 0 for n in counted) and all(t.counts(c.pod) for t in aff.required)

        def passes(node: "Node") -> bool:
            labels = node.label_map()
            found = True
            for key, by_domain in terms:
                d = labels.get(key)
                if d is None:
                    return False
                if found and by_domain.get(d, 0) <= 0:
                    found = False
            return found or first

        def why(node: "Node") -> Rejection:
            labels = node.label_map()
            return self.missing if any(k not in labels for k, _ in terms) else self.rejection
        return Bound(self, passes, why)


def _none_in_domain(terms: tuple[tuple[str, dict[str, int]], ...]) -> Predicate:
    """The node is in no domain (of each term's key) that holds a pod counted by the term."""
    def passes(node: "Node") -> bool:
        labels = node.label_map()
        for key, by_domain in terms:
            d = labels.get(key)
            if d is not None and by_domain.get(d, 0) > 0:
                return False
        return True
    return passes


class PodAntiAffinityCheck(Check):
    """kube-scheduler's InterPodAffinity filter, the pod's required anti-affinity (tag
    ``korral.io/pod-affinity``, ``requiredAnti``): no term's domain of the node holds a pod the
    term matches (a node without the key passes)."""

    name = "pod-anti-affinity"
    rejection = Rejection("pod-anti-affinity", POD_ANTI_AFFINITY_REASON, True)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        aff = c.pod_affinity if c is not None else None
        if aff is None or not aff.anti or nodes is None:
            return None
        index = nodes.pods
        return Bound(self, _none_in_domain(tuple((t.topology_key, index.counts(t).by_domain) for t in aff.anti)))


class ExistingAntiAffinityCheck(Check):
    """kube-scheduler's InterPodAffinity filter, the symmetric rule: an existing pod's required
    anti-affinity term that matches the ask's pod (its namespace and labels) keeps the pod out
    of that pod's domain (``PodIndex.anti_against``)."""

    name = "existing-anti-affinity"
    rejection = Rejection("existing-anti-affinity", EXISTING_ANTI_REASON, True)
    for_plain = False

    def bind(self, ask, purpose, apps, nodes):
        c = ask.constraints
        if c is None or c.pod is None or nodes is None:
            return None
        hits = nodes.pods.anti_against(c.pod)
        if not hits:
            return None
        return Bound(self, _none_in_domain(tuple((t.topology_key, n.by_domain) for t, n in hits)))


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
    ``passes(node) -> bool``, ``first_rejection(node) -> Rejection | None``, and
    ``everywhere``: the rejection every node gives (None: the nodes decide).

    ``collapse``: the chain holds every pre-filtering check, each ``ordinary`` (or not bound:
    open everywhere), and its nodes are a ``NodeCollection``'s: ``passes`` then reads the
    collection's verdict on them (``Node.open``, kept whenever a node's state changes) in one
    step instead of asking each of those checks."""

    __slots__ = ("checks", "passes", "everywhere")

    def __init__(self, checks: tuple[Bound, ...], collapse: bool = False) -> None:
        self.checks = checks
        self.everywhere = next((b.rejection(None) for b in checks if b.everywhere), None)  # type: ignore[arg-type]
        if self.everywhere is not None:
            self.passes: Predicate = _never
        elif collapse:
            self.passes = all_of([_node_open] + [b.passes for b in checks if not b.check.prefilter])
        else:
            self.passes = all_of([b.passes for b in checks])

    def first_rejection(self, node: "Node") -> Rejection | None:
        for b in self.checks:
            if not b.passes(node):
                return b.rejection(node)
        return None


class Walker:
    """``find_node``'s view of an ask (``Chain.walker``). ``never``: every node rejects it.
    ``in_order(node)``: the bound chain without the pre-filtering checks, for the nodes of
    ``NodeCollection.order`` (they pass those already). ``widens``: the ask also passes some
    nodes in ``NodeCollection.wide``; walk both in policy order with ``passes`` (the whole
    chain)."""

    __slots__ = ("in_order", "passes", "widens", "never")

    def __init__(self, in_order: Predicate, passes: Predicate | None = None, widens: bool = False,
                 never: Rejection | None = None) -> None:
        self.in_order = in_order
        self.passes = passes
        self.widens = widens
        self.never = never


class Chain:
    """An ordered tuple of checks (``CHAIN`` is the core's one chain)."""

    __slots__ = ("checks", "prefilters", "_plain", "_plain_walk", "_plain_walkers")

    def __init__(self, checks: tuple[Check, ...]) -> None:
        names = [c.name for c in checks]
        if len(set(names)) != len(names):
            raise ValueError(f"node checks must have distinct names: {names}")
        self.checks = checks
        self.prefilters = tuple(c for c in checks if c.prefilter)
        self._plain = tuple(c for c in checks if c.for_plain)
        # the checks a plain ask's walker binds: they must depend on the ask's size only
        self._plain_walk = tuple(c for c in checks if c.for_plain and not c.prefilter)
        self._plain_walkers: dict[object, Walker] = {}  # ask size -> walker

    def bind(self, ask: "Ask", purpose: Purpose, apps: Apps, skip: tuple[Check, ...] = (),
             nodes: "NodeCollection | None" = None) -> BoundChain:
        """The chain for ``ask``: the checks that can reject it, in order, minus ``skip``.
        ``apps`` resolves the holder of a reservation (``ReservationCheck``); ``nodes``: the
        collection the nodes to check belong to (what is on them, e.g. their taints, says which
        checks can reject; its cached verdicts may be used)."""
        bound = []
        collapse = nodes is not None
        for check in self._plain if is_plain(ask, nodes) else self.checks:
            if skip and check in skip:
                collapse = collapse and not check.prefilter
                continue
            b = check.bind(ask, purpose, apps, nodes)
            if b is not None:
                bound.append(b)
                if check.prefilter and not b.ordinary:
                    collapse = False
        return BoundChain(tuple(bound), collapse)

    def walker(self, ask: "Ask", apps: Apps, nodes: "NodeCollection | None" = None,
               plain: bool | None = None) -> Walker:
        """The ``ALLOCATE`` chain for walking ``NodeCollection.order`` (see ``Walker``). A
        plain ask's walker depends on its size only (``is_plain``; ``plain``: the caller knows),
        so it is made once per size and kept (bounded): the allocation hot path binds nothing."""
        if plain if plain is not None else is_plain(ask, nodes):
            cache = self._plain_walkers
            walker = cache.get(ask.resource)
            if walker is None:
                if len(cache) >= PLAIN_WALKERS:
                    cache.clear()
                preds = []
                for check in self._plain_walk:
                    b = check.bind(ask, Purpose.ALLOCATE, apps, nodes)
                    if b is not None:
                        preds.append(b.passes)
                walker = cache[ask.resource] = Walker(all_of(preds))
            return walker
        chain = self.bind(ask, Purpose.ALLOCATE, apps, nodes=nodes)
        if chain.everywhere is not None:
            return Walker(_never, _never, False, chain.everywhere)
        widens = any(b.widens for b in chain.checks)
        return Walker(all_of([b.passes for b in chain.checks if not b.check.prefilter]),
                      chain.passes if widens else None, widens)

    def first_rejection(self, node: "Node", ask: "Ask", purpose: Purpose, apps: Apps) -> Rejection | None:
        """One node, one ask: the first check that rejects, or None (binds the chain each call;
        bind once with ``bind`` to check many nodes)."""
        return self.bind(ask, purpose, apps).first_rejection(node)


UNSUPPORTED = UnsupportedCheck()
SCHEDULABLE = NodeStateCheck("schedulable", "node(s) were unschedulable", "schedulable")
READY = NodeStateCheck("ready", "node(s) were not ready", "ready")
RESERVATION = ReservationCheck()
REQUIRED_NODE = RequiredNodeCheck()
TOPOLOGY = TopologyCheck()
TAINTS = TaintCheck()
SELECTOR = SelectorCheck()
NODE_AFFINITY = NodeAffinityCheck()
NODE_REQUIREMENTS = NodeRequirementsCheck()
HOST_PORTS = HostPortsCheck()
RESOURCES = ResourcesCheck()
TOPOLOGY_SPREAD = TopologySpreadCheck()
POD_AFFINITY = PodAffinityCheck()
POD_ANTI_AFFINITY = PodAntiAffinityCheck()
EXISTING_ANTI_AFFINITY = ExistingAntiAffinityCheck()

CHAIN = Chain((UNSUPPORTED, SCHEDULABLE, READY, RESERVATION, REQUIRED_NODE, TOPOLOGY, TAINTS, SELECTOR,
               NODE_AFFINITY, NODE_REQUIREMENTS, HOST_PORTS, RESOURCES, TOPOLOGY_SPREAD, POD_AFFINITY,
               POD_ANTI_AFFINITY, EXISTING_ANTI_AFFINITY))
# the inter-pod checks alone (preemption re-checks them with the victims gone)
INTERPOD = Chain((TOPOLOGY_SPREAD, POD_AFFINITY, POD_ANTI_AFFINITY, EXISTING_ANTI_AFFINITY))


def gate(node: "Node") -> int:
    """What the pre-filtering checks say about the node: ``OPEN`` (it passes each for every
    ask), ``WIDE`` (only widenable ones reject it: some asks may pass) or ``CLOSED``."""
    verdict = OPEN
    for check in CHAIN.prefilters:
        if not check.open(node):
            if not check.widenable:
                return CLOSED
            verdict = WIDE
    return verdict


def open_for_asks(node: "Node") -> bool:
    """The node passes every pre-filtering check for every ask (``Check.open``):
    ``NodeCollection`` keeps only such nodes in its order."""
    return gate(node) == OPEN
