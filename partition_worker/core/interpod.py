"""Inter-pod constraints as the core reads them: label selectors, pod (anti-)affinity terms,
topology spread constraints, and the per-partition index of the pods on each node that
kube-scheduler's InterPodAffinity and PodTopologySpread filters count.

What it owns: parsing the tags of ``common/constants.py`` (``korral.io/pod-labels``,
``korral.io/pod-affinity``, ``korral.io/topology-spread`` with ``kubernetes.io/meta/namespace``)
into small immutable objects, once per distinct value (cached; a bad value never raises: it
becomes an error string naming the tag), and ``PodIndex``: what every allocation on each node
carries (placed, placeholder, recovered, foreign), kept up to date as allocations land and
leave, with counts per topology domain for each distinct (selector, namespaces, topologyKey)
an ask asked about (made once from the pods, then kept incrementally: no check scans the
pods). Who may use it: ``node_terms`` (an ask's ``Constraints``), ``node`` (the collection
feeds the index), ``feasibility`` (the checks), ``preemption`` (a victim set re-checked).

A topology domain is the value of the node's label ``topologyKey`` (``Node.label_map``); a node
without the label is in no domain. An allocation without the pod-labels and pod-affinity tags
is no pod to these rules (e.g. the simulator's); one whose tags cannot be read is not counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping, Protocol

from common.constants import TAG_NAMESPACE, TAG_POD_AFFINITY, TAG_POD_LABELS, TAG_TOPOLOGY_SPREAD


class Node(Protocol):
    """What the index reads of a node (``node.Node``; not imported: node imports this module)."""

    node_id: str

    def label_map(self) -> Mapping[str, str]: ...

__all__ = ["Selector", "PodTerm", "Spread", "PodInfo", "PodAffinity", "Counts", "PodIndex", "parse_selector",
           "pod_info_of", "parse_pod_affinity", "parse_spread", "parse_pod_labels", "NOTHING", "EVERYTHING"]

_CACHED = 4096  # distinct tag values kept parsed
_MAX_COUNTED = 512  # distinct (selector, namespaces, topologyKey) counted; cleared (rebuilt lazily) beyond
_MAX_ELIGIBLE = 256  # spread asks' eligible domains remembered
_OPS = ("In", "NotIn", "Exists", "DoesNotExist")
_POLICIES = ("Honor", "Ignore")


def _short(raw: str, limit: int = 80) -> str:
    return raw if len(raw) <= limit else raw[:limit] + "..."


def _loads(raw: str, tag: str) -> object:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"tag {tag} is not JSON ({exc}): {_short(raw)}") from None


# ------------------------------------------------------------------------------ label selectors
@dataclass(frozen=True, slots=True)
class Selector:
    """A Kubernetes LabelSelector: every matchLabels pair and every expression must hold.
    ``nothing``: a null selector (matches no pod); an empty one matches every pod."""

    labels: tuple[tuple[str, str], ...] = ()
    exprs: tuple[tuple[str, str, frozenset[str]], ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for k, v in self.labels:
            if labels.get(k) != v:
                return False
        for key, op, values in self.exprs:
            v = labels.get(key)
            if op == "In":
                if v is None or v not in values:
                    return False
            elif op == "NotIn":
                if v is not None and v in values:
                    return False
            elif op == "Exists":
                if v is None:
                    return False
            elif v is not None:  # DoesNotExist
                return False
        return True


NOTHING = Selector(nothing=True)
EVERYTHING = Selector()


def parse_selector(data: object, where: str) -> Selector:
    """A LabelSelector object (None: ``NOTHING``); ``ValueError`` names the field that is wrong."""
    if data is None:
        return NOTHING
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a label selector object, got {_short(json.dumps(data))}")
    ml = data.get("matchLabels") or {}
    if not isinstance(ml, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ml.items()):
        raise ValueError(f"{where}.matchLabels must be a map of strings, got {_short(json.dumps(ml))}")
    exprs = data.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise ValueError(f"{where}.matchExpressions must be a list, got {_short(json.dumps(exprs))}")
    out = []
    for i, e in enumerate(exprs):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not e.get("key"):
            raise ValueError(f"{at}.key must be a non-empty string")
        op, values = e.get("operator"), e.get("values") or []
        if op not in _OPS:
            raise ValueError(f"{at}.operator {json.dumps(op)} is not one of {', '.join(_OPS)}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{at}.values must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise ValueError(f"{at}: {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"{at}: {op} takes no values")
        out.append((e["key"], op, frozenset(values)))
    return Selector(tuple(sorted(ml.items())), tuple(out))


# ------------------------------------------------------------------------------ terms
@dataclass(frozen=True, slots=True)
class PodTerm:
    """What pods are counted where: those in ``namespaces`` (None: every namespace) whose
    labels match ``selector``, per value of the node label ``topology_key``. A pod
    (anti-)affinity term, or (namespaces = the pod's own) a spread constraint's count."""

    selector: Selector
    topology_key: str
    namespaces: frozenset[str] | None

    def counts(self, pod: "PodInfo") -> bool:
        ns = self.namespaces
        return (ns is None or pod.namespace in ns) and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's required affinity and anti-affinity terms (preferred ones are not evaluated)."""

    required: tuple[PodTerm, ...] = ()
    anti: tuple[PodTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class Spread:
    """One topology spread constraint with ``whenUnsatisfiable: DoNotSchedule`` (ScheduleAnyway
    ones are not evaluated)."""

    max_skew: int
    term: PodTerm  # the selector and key; namespaces: the pod's own
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy Honor (default)
    honor_taints: bool = False  # nodeTaintsPolicy Honor (default Ignore)


@dataclass(frozen=True, slots=True, eq=False)
class PodInfo:
    """What one pod (an allocation or an ask) shows the others: its namespace, its labels and
    its own required anti-affinity terms. Usually shared by every pod with the same tag values;
    equal by value (the index finds a pod that leaves even if its tags were parsed again)."""

    namespace: str
    labels: Mapping[str, str]
    anti: tuple[PodTerm, ...] = ()
    key: tuple = field(default=(), repr=False)
    hashed: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        key = (self.namespace, tuple(sorted(self.labels.items())), self.anti)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "hashed", hash(key))

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, PodInfo) and self.hashed == other.hashed
                                 and self.key == other.key)

    def __hash__(self) -> int:
        return self.hashed


def _entries(data: list, where: str):
    """``(where[i], entry, its topologyKey)`` of a list of terms or constraints: each an object
    naming a non-empty ``topologyKey``."""
    for i, entry in enumerate(data):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at} must be an object, got {_short(json.dumps(entry))}")
        key = entry.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{at}.topologyKey must be a non-empty string")
        yield at, entry, key


def _terms(data: object, where: str, own: str) -> tuple[PodTerm, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValueError(f"{where} must be a list of terms")
    out = []
    for at, t, key in _entries(data, where):
        ns = t.get("namespaces", [own])
        if ns is not None and (not isinstance(ns, list) or not all(isinstance(n, str) for n in ns)):
            raise ValueError(f"{at}.namespaces must be a list of namespace names or null")
        out.append(PodTerm(parse_selector(t.get("selector"), f"{at}.selector"), key,
                           None if ns is None else frozenset(ns or [own])))
    return tuple(out)


@lru_cache(maxsize=_CACHED)
def parse_pod_affinity(raw: str, namespace: str) -> tuple[PodAffinity | None, str]:
    """``korral.io/pod-affinity`` (terms without ``namespaces`` count the pod's own namespace)."""
    try:
        data = _loads(raw, TAG_POD_AFFINITY)
        if not isinstance(data, dict):
            raise ValueError(f"tag {TAG_POD_AFFINITY} must be a JSON object, got {_short(raw)}")
        where = f"tag {TAG_POD_AFFINITY}"
        req = _terms(data.get("required"), f"{where}: required", namespace)
        anti = _terms(data.get("requiredAnti"), f"{where}: requiredAnti", namespace)
    except ValueError as exc:
        return None, str(exc)
    return (PodAffinity(req, anti) if req or anti else None), ""


@lru_cache(maxsize=_CACHED)
def parse_spread(raw: str, namespace: str) -> tuple[tuple[Spread, ...], str]:
    """``korral.io/topology-spread``: its DoNotSchedule constraints, counted in ``namespace``."""
    where = f"tag {TAG_TOPOLOGY_SPREAD}"
    try:
        data = _loads(raw, TAG_TOPOLOGY_SPREAD)
        if not isinstance(data, list):
            raise ValueError(f"{where} must be a JSON list of constraints, got {_short(raw)}")
        out = []
        for at, c, key in _entries(data, where):
            skew, when = c.get("maxSkew"), c.get("whenUnsatisfiable", "DoNotSchedule")
            if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
                raise ValueError(f"{at}.maxSkew must be an integer greater than zero, got {json.dumps(skew)}")
            if when not in ("DoNotSchedule", "ScheduleAnyway"):
                raise ValueError(f"{at}.whenUnsatisfiable {json.dumps(when)} is not DoNotSchedule or ScheduleAnyway")
            domains = c.get("minDomains", 1)
            if isinstance(domains, bool) or not isinstance(domains, int) or domains < 1:
                raise ValueError(f"{at}.minDomains must be an integer greater than zero, got {json.dumps(domains)}")
            policies = []
            for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
                v = c.get(name) or default
                if v not in _POLICIES:
                    raise ValueError(f"{at}.{name} {json.dumps(v)} is not Honor or Ignore")
                policies.append(v == "Honor")
            selector = parse_selector(c.get("selector"), f"{at}.selector")
            if when == "DoNotSchedule":
                out.append(Spread(skew, PodTerm(selector, key, frozenset([namespace])), domains, *policies))
    except ValueError as exc:
        return (), str(exc)
    return tuple(out), ""


@lru_cache(maxsize=_CACHED)
def parse_pod_labels(raw: str) -> tuple[Mapping[str, str], str]:
    """``korral.io/pod-labels``: a JSON object of strings."""
    try:
        data = _loads(raw, TAG_POD_LABELS)
    except ValueError as exc:
        return {}, str(exc)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return {}, f"tag {TAG_POD_LABELS} must be a JSON object of strings, got {_short(raw)}"
    return data, ""


@lru_cache(maxsize=_CACHED)
def _pod_info(namespace: str, labels: str | None, affinity: str | None) -> tuple[PodInfo | None, str]:
    lbl, err = parse_pod_labels(labels) if labels else ({}, "")
    if err:
        return None, err
    aff, err = parse_pod_affinity(affinity, namespace) if affinity else (None, "")
    if err:
        return None, err
    return PodInfo(namespace, lbl, aff.anti if aff is not None else ()), ""


def pod_info_of(tags: Mapping[str, str]) -> tuple[PodInfo | None, str]:
    """What an allocation (or ask) with ``tags`` shows other pods (None: it carries neither
    pod labels nor pod affinity, or they cannot be read: then the error names the tag)."""
    labels, affinity = tags.get(TAG_POD_LABELS), tags.get(TAG_POD_AFFINITY)
    if labels is None and affinity is None:
        return None, ""
    return _pod_info(tags.get(TAG_NAMESPACE, ""), labels, affinity)


# ------------------------------------------------------------------------------ the index
class Counts:
    """Pods per node and per topology domain (the node's value of one label)."""

    __slots__ = ("by_node", "by_domain", "total")

    def __init__(self) -> None:
        self.by_node: dict[str, int] = {}
        self.by_domain: dict[str, int] = {}
        self.total = 0  # in some domain

    def add(self, node_id: str, domain: str | None, n: int) -> None:
        c = self.by_node.get(node_id, 0) + n
        if c > 0:
            self.by_node[node_id] = c
        else:
            self.by_node.pop(node_id, None)
        if domain is not None:
            d = self.by_domain.get(domain, 0) + n
            if d > 0:
                self.by_domain[domain] = d
            else:
                self.by_domain.pop(domain, None)
            self.total += n


class PodIndex:
    """The pods on each node of one partition (see module doc). ``version`` changes whenever a
    pod comes or goes (asks with inter-pod terms are not memoised across it);
    ``anti_version`` whenever the set of existing required anti-affinity terms does;
    ``topology_version`` when nodes come, go or change labels."""

    __slots__ = ("on_node", "counted", "anti", "version", "anti_version", "topology_version", "_nodes",
                 "_hits", "_hits_version", "eligible", "positive", "helps", "_by_pair", "_general", "_where",
                 "_pair_pods")

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        self._nodes = nodes
        self.on_node: dict[str, dict[PodInfo, int]] = {}
        self.counted: dict[PodTerm, Counts] = {}  # asks' terms -> matching pods
        # the counted terms by their first matchLabels pair (a pod can only match those whose
        # pair it has), and the rest: a landing pod is matched against a few terms, not all
        self._by_pair: dict[tuple[str, str], list[PodTerm]] = {}
        self._general: list[PodTerm] = []
        # each pod's nodes, and the pods per label pair: a new term's counts are made from the
        # pods with its first matchLabels pair only
        self._where: dict[PodInfo, dict[str, int]] = {}
        self._pair_pods: dict[tuple[str, str], set[PodInfo]] = {}
        self.anti: dict[PodTerm, Counts] = {}  # existing pods' anti terms -> pods holding them
        self.version = self.anti_version = self.topology_version = 0
        self._hits: dict[PodInfo, tuple] = {}
        self._hits_version = -1
        self.eligible: dict[object, object] = {}  # feasibility's spread domains, by ask and versions
        # terms a landing pod may satisfy (affinity, spread): such a pod is a change a cycle may
        # act on (``helps``), as a release is: asks that waited may pass now
        self.positive: set[PodTerm] = set()
        self.helps = 0

    def track(self, node: Node, tags: Mapping[str, str], sign: int) -> str:
        """An allocation with ``tags`` came (1) to or left (-1) ``node``. Returns what is wrong
        with its tags ("" if nothing; such a pod is not counted)."""
        pod, err = pod_info_of(tags)
        if pod is not None:
            self._move(node, pod, sign)
        return err

    def _move(self, node: Node, pod: PodInfo, n: int) -> None:
        nid = node.node_id
        here = self.on_node.setdefault(nid, {})
        c = here.get(pod, 0) + n
        if c > 0:
            here[pod] = c
        else:
            here.pop(pod, None)
            if not here:
                del self.on_node[nid]
        where = self._where.get(pod)
        if where is None:
            where = self._where[pod] = {}
            for pair in pod.labels.items():
                self._pair_pods.setdefault(pair, set()).add(pod)
        if c > 0:
            where[nid] = c
        else:
            where.pop(nid, None)
            if not where:
                del self._where[pod]
                for pair in pod.labels.items():
                    pods = self._pair_pods.get(pair)
                    if pods is not None:
                        pods.discard(pod)
                        if not pods:
                            del self._pair_pods[pair]
        labels = node.label_map()
        helps = False
        counted, by_pair = self.counted, self._by_pair
        candidates = self._general
        if by_pair:
            for pair in pod.labels.items():
                more = by_pair.get(pair)
                if more:
                    candidates = candidates + more
        for term in candidates:
            if term.counts(pod):
                counted[term].add(nid, labels.get(term.topology_key), n)
                helps = helps or (n > 0 and term in self.positive)
        if helps:
            self.helps += 1
        for term in pod.anti:
            counts = self.anti.get(term)
            if counts is None:
                counts = self.anti[term] = Counts()
                self.anti_version += 1
            counts.add(nid, labels.get(term.topology_key), n)
            if not counts.by_node:
                del self.anti[term]
                self.anti_version += 1
        self.version += 1

    def counts(self, term: PodTerm, positive: bool = False) -> Counts:
        """The pods ``term`` counts, per node and domain (made from the pods the first time,
        then kept up to date). ``positive``: a pod more may let an ask pass (see ``helps``)."""
        if positive:
            self.positive.add(term)
        counts = self.counted.get(term)
        if counts is None:
            if len(self.counted) >= _MAX_COUNTED:
                self._forget_counts()
                if positive:
                    self.positive.add(term)
            counts = self.counted[term] = Counts()
            if term.selector.labels:
                pair = term.selector.labels[0]
                self._by_pair.setdefault(pair, []).append(term)
                candidates: Iterable[PodInfo] = self._pair_pods.get(pair, ())
            else:
                self._general.append(term)
                candidates = self._where
            nodes, key = self._nodes, term.topology_key
            for pod in candidates:
                if term.counts(pod):
                    for nid, n in self._where[pod].items():
                        node = nodes.get(nid)
                        counts.add(nid, node.label_map().get(key) if node is not None else None, n)
        return counts

    def _forget_counts(self) -> None:
        self.counted.clear()
        self.positive.clear()
        self._by_pair.clear()
        self._general = []

    def anti_against(self, pod: PodInfo | None) -> tuple[tuple[PodTerm, Counts], ...]:
        """The existing pods' required anti-affinity terms that match ``pod`` (the symmetric
        rule), remembered per pod until the set of terms changes."""
        if pod is None or not self.anti:
            return ()
        if self._hits_version != self.anti_version or len(self._hits) > _CACHED:
            self._hits.clear()
            self._hits_version = self.anti_version
        hits = self._hits.get(pod)
        if hits is None:
            hits = self._hits[pod] = tuple(t for t in self.anti if t.counts(pod))
        anti = self.anti
        return tuple((t, anti[t]) for t in hits if t in anti)

    def node_removed(self, node: Node) -> None:
        """``node`` leaves the partition: what is still counted on it goes."""
        for pod, n in list(self.on_node.get(node.node_id, {}).items()):
            self._move(node, pod, -n)
        self.nodes_changed()

    def nodes_changed(self) -> None:
        """A node came or went: the domains spread constraints see may differ."""
        self.eligible.clear()
        self.topology_version += 1
        self.version += 1

    def topology_changed(self) -> None:
        """A node changed labels: domains are read again (counts rebuilt lazily)."""
        self._forget_counts()
        self.nodes_changed()
        if self.anti:
            nodes, old = self._nodes, self.anti
            self.anti = {}
            for term in old:
                counts = self.anti[term] = Counts()
                for nid, pods in self.on_node.items():
                    node = nodes.get(nid)
                    domain = node.label_map().get(term.topology_key) if node is not None else None
                    for pod, n in pods.items():
                        if term in pod.anti:
                            counts.add(nid, domain, n)

    def pods(self) -> Iterable[tuple[str, PodInfo, int]]:
        for nid, pods in self.on_node.items():
            for pod, n in pods.items():
                yield nid, pod, n
