"""Kubernetes' node-scheduling terms as the core reads them: taints, tolerations, required node
affinity, host ports, and the constraints it does not evaluate.

What it owns: parsing the JSON the RM sends (node attribute ``korral.io/taints``; ask tags
``korral.io/tolerations``, ``korral.io/node-affinity``, ``korral.io/host-ports``,
``korral.io/unsupported-constraints``; the inter-pod tags through ``interpod``; see
``common/constants.py``) into small immutable
objects, once per distinct value (cached), and Kubernetes' matching rules over them
(kube-scheduler's TaintToleration, NodeAffinity and NodePorts filters). A bad value never
raises: it becomes an error string naming the tag and what is wrong. Who may use it:
``feasibility`` (the checks), ``node`` (a node's taints, labels and ports in use),
``partition`` (an ask's ``Constraints``, parsed when it is added).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping

from common.constants import (NODE_LABELS, NODE_TAINTS, TAG_HOST_PORTS, TAG_NAMESPACE, TAG_NODE_AFFINITY,
                              TAG_NODE_REQUIREMENTS, TAG_POD_AFFINITY, TAG_POD_LABELS, TAG_TOLERATIONS,
                              TAG_TOPOLOGY_SPREAD, TAG_UNSUPPORTED_CONSTRAINTS)

from .interpod import PodAffinity, PodInfo, Spread, parse_pod_affinity, parse_pod_labels, parse_spread

__all__ = ["Taint", "Toleration", "HostPort", "NodeAffinity", "NodeRequirement", "Constraints", "PortsInUse",
           "constraints_of", "parse_taints", "parse_labels", "host_ports_of", "tolerates",
           "first_untolerated", "BIND_ALL", "HARD_EFFECTS"]

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule is only a preference
BIND_ALL = "0.0.0.0"  # a host port on 0.0.0.0 conflicts with the same port on every IP
FIELD_NODE_NAME = "metadata.name"  # the only field matchFields may select on (the node ID)
_INT64 = re.compile(r"[+-]?[0-9]+\Z")  # Go's strconv.ParseInt(s, 10, 64) syntax
_CACHED = 4096  # distinct tag / attribute values kept parsed


def _int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it, else None."""
    if not _INT64.match(text):
        return None
    v = int(text)
    return v if -(1 << 63) <= v < (1 << 63) else None


def _loads(raw: str, what: str) -> tuple[object, str]:
    try:
        return json.loads(raw), ""
    except ValueError as exc:
        return None, f"{what} is not JSON ({exc}): {_short(raw)}"


def _short(raw: str, limit: int = 80) -> str:
    return raw if len(raw) <= limit else raw[:limit] + "..."


def _str_field(obj: dict, name: str, where: str) -> str:
    v = obj.get(name, "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ValueError(f"{where}.{name} must be a string, got {json.dumps(v)}")
    return v


# ------------------------------------------------------------------------------ taints
@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint with an effect that keeps pods off (NoSchedule, NoExecute). ``invalid``:
    stands for a taints attribute that could not be read (nothing tolerates it)."""

    key: str
    value: str
    effect: str
    invalid: bool = False

    def describe(self) -> str:
        """kube-scheduler's ``{key: value}``."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: an empty effect matches every effect, an empty key (with
        ``Exists``) every key; ``Equal`` (or no operator) compares values; an unknown operator
        tolerates nothing."""
        if taint.invalid:
            return False
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def first_untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first of a node's (hard) taints no toleration tolerates (kube-scheduler names it)."""
    for taint in taints:
        if not tolerates(tolerations, taint):
            return taint
    return None


def parse_taints(raw: str | None) -> tuple[tuple[Taint, ...], str]:
    """A node's ``korral.io/taints`` attribute (JSON list of ``{key, value, effect}``): its
    NoSchedule and NoExecute taints in order, and an error ("" if none). An unreadable value
    gives one ``invalid`` taint, so the node takes no ask until the RM fixes it."""
    if not raw:
        return (), ""
    return _parse_taints(raw)


@lru_cache(maxsize=_CACHED)
def _parse_taints(raw: str) -> tuple[tuple[Taint, ...], str]:
    data, err = _loads(raw, f"attribute {NODE_TAINTS}")
    if not err and not isinstance(data, list):
        err = f"attribute {NODE_TAINTS} must be a JSON list of taints, got {_short(raw)}"
    taints: list[Taint] = []
    if not err:
        try:
            for i, t in enumerate(data):
                where = f"{NODE_TAINTS}[{i}]"
                if not isinstance(t, dict):
                    raise ValueError(f"{where} must be an object, got {json.dumps(t)}")
                key, value = _str_field(t, "key", where), _str_field(t, "value", where)
                effect = _str_field(t, "effect", where)
                if effect in HARD_EFFECTS:
                    taints.append(Taint(key, value, effect))
        except ValueError as exc:
            err = f"attribute {exc}"
    if err:
        return (Taint(NODE_TAINTS, "unreadable", "NoSchedule", invalid=True),), err
    return tuple(taints), ""


def parse_labels(raw: str) -> tuple[dict[str, str], str]:
    """A node's ``si.io/nodelabels`` attribute (a JSON object of strings) and an error."""
    data, err = _loads(raw, f"attribute {NODE_LABELS}")
    if err:
        return {}, err
    if not isinstance(data, dict):
        return {}, f"attribute {NODE_LABELS} must be a JSON object, got {_short(raw)}"
    bad = [k for k, v in data.items() if not isinstance(v, str)]
    labels = {str(k): v for k, v in data.items() if isinstance(v, str)}
    return labels, (f"attribute {NODE_LABELS}: label values must be strings, ignored: "
                    f"{', '.join(sorted(bad))}" if bad else "")


# ------------------------------------------------------------------------------ node affinity
_LABEL_OPS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str
    values: frozenset[str]
    number: int = 0  # Gt / Lt

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        v = labels.get(self.key)
        if op == "In":
            return v is not None and v in self.values
        if op == "NotIn":
            return v is None or v not in self.values
        if op == "Exists":
            return v is not None
        if op == "DoesNotExist":
            return v is None
        have = _int64(v) if v is not None else None  # Gt / Lt: a non-integer label never matches
        if have is None:
            return False
        return have > self.number if op == "Gt" else have < self.number


@dataclass(frozen=True, slots=True)
class _Term:
    """One nodeSelectorTerm: its label requirements and node-name requirements, all ANDed.
    An empty or invalid term matches no node (Kubernetes)."""

    labels: tuple[_Requirement, ...]
    names: tuple[tuple[bool, frozenset[str]], ...]  # (In?, node names)
    valid: bool

    def matches(self, labels: Mapping[str, str], node_id: str) -> bool:
        if not self.valid or (not self.labels and not self.names):
            return False
        for r in self.labels:
            if not r.matches(labels):
                return False
        for is_in, names in self.names:
            if (node_id in names) is not is_in:
                return False
        return True


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """A pod's required node affinity (a NodeSelector): its terms are ORed; an empty list
    matches no node. ``error`` names the terms Kubernetes would not have accepted (they never
    match) for the rejection reason."""

    terms: tuple[_Term, ...]
    error: str = ""

    def matches(self, labels: Mapping[str, str], node_id: str) -> bool:
        for term in self.terms:
            if term.matches(labels, node_id):
                return True
        return False


def _requirement(r: object, where: str, fields: bool,
                 many_names: bool = False) -> _Requirement | tuple[bool, frozenset[str]]:
    if not isinstance(r, dict):
        raise ValueError(f"{where} must be an object, got {json.dumps(r)}")
    key, op = _str_field(r, "key", where), _str_field(r, "operator", where)
    values = r.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{where}.values must be a list of strings, got {json.dumps(values)}")
    if not key:
        raise ValueError(f"{where}.key must not be empty")
    if fields:
        if key != FIELD_NODE_NAME:
            raise ValueError(f"{where}.key {json.dumps(key)} is not a supported field (only {FIELD_NODE_NAME})")
        if op not in ("In", "NotIn"):
            raise ValueError(f"{where}.operator {json.dumps(op)} is not supported for fields (In, NotIn)")
        if len(values) != 1 and not (many_names and values):
            raise ValueError(f"{where}.values must have exactly one node name, got {json.dumps(values)}")
        return (op == "In", frozenset(values))
    if op not in _LABEL_OPS:
        raise ValueError(f"{where}.operator {json.dumps(op)} is not one of {', '.join(sorted(_LABEL_OPS))}")
    if op in ("In", "NotIn") and not values:
        raise ValueError(f"{where}: {op} needs at least one value")
    if op in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"{where}: {op} takes no values, got {json.dumps(values)}")
    if op in ("Gt", "Lt"):
        number = _int64(values[0]) if len(values) == 1 else None
        if number is None:
            raise ValueError(f"{where}: {op} needs exactly one integer value, got {json.dumps(values)}")
        return _Requirement(key, op, frozenset(), number)
    return _Requirement(key, op, frozenset(values))


def _term(t: object, where: str, many_names: bool = False) -> tuple[_Term, str]:
    try:
        if not isinstance(t, dict):
            raise ValueError(f"{where} must be an object, got {json.dumps(t)}")
        parts = []
        for name, fields in (("matchExpressions", False), ("matchFields", True)):
            reqs = t.get(name) or []
            if not isinstance(reqs, list):
                raise ValueError(f"{where}.{name} must be a list, got {json.dumps(reqs)}")
            parts.append(tuple(_requirement(r, f"{where}.{name}[{i}]", fields, many_names)
                               for i, r in enumerate(reqs)))
        return _Term(parts[0], parts[1], True), ""  # type: ignore[arg-type]
    except ValueError as exc:
        return _Term((), (), False), str(exc)


def _parse_affinity(raw: str) -> tuple[NodeAffinity | None, str]:
    what = f"tag {TAG_NODE_AFFINITY}"
    data, err = _loads(raw, what)
    if err:
        return None, err
    return _node_selector(data, what)


def _node_selector(data: object, what: str, many_names: bool = False) -> tuple[NodeAffinity | None, str]:
    """A NodeSelector object; ``many_names``: a matchFields requirement may name several nodes
    (Korral's own node requirements; Kubernetes allows one)."""
    if not isinstance(data, dict):
        return None, f"{what} must be a JSON object (a NodeSelector), got {_short(json.dumps(data))}"
    terms = data.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        return None, f"{what}: nodeSelectorTerms must be a list, got {json.dumps(terms)}"
    parsed, errors = [], []
    for i, t in enumerate(terms):
        term, e = _term(t, f"nodeSelectorTerms[{i}]", many_names)
        parsed.append(term)
        if e:
            errors.append(e)
    return NodeAffinity(tuple(parsed), "; ".join(errors)), ""


# ------------------------------------------------------------------------------ node requirements
@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One further node selector an ask's nodes must match (tag ``korral.io/node-requirements``:
    a volume's node affinity, the nodes where a claim's devices or volume can be had, nodes
    excluded for a while), with the reason a node that does not match is rejected for."""

    selector: NodeAffinity
    reason: str
    retry: bool

    def matches(self, labels: Mapping[str, str], node_id: str) -> bool:
        return self.selector.matches(labels, node_id)


def _parse_requirements(raw: str) -> tuple[tuple[NodeRequirement, ...], str]:
    what = f"tag {TAG_NODE_REQUIREMENTS}"
    data, err = _loads(raw, what)
    if err:
        return (), err
    if not isinstance(data, list):
        return (), f"{what} must be a JSON list of {{reason, nodeSelector, retry}}, got {_short(raw)}"
    out = []
    for i, entry in enumerate(data):
        where = f"{what}[{i}]"
        if not isinstance(entry, dict):
            return (), f"{where} must be an object, got {_short(json.dumps(entry))}"
        reason, retry = entry.get("reason"), entry.get("retry", False)
        if not isinstance(reason, str) or not reason:
            return (), f"{where}.reason must be a non-empty string, got {json.dumps(reason)}"
        if not isinstance(retry, bool):
            return (), f"{where}.retry must be true or false, got {json.dumps(retry)}"
        selector, e = _node_selector(entry.get("nodeSelector"), f"{where}.nodeSelector", many_names=True)
        if e or selector is None:
            return (), e
        if selector.error:
            return (), f"{where}.nodeSelector: {selector.error}"
        out.append(NodeRequirement(selector, reason, retry))
    return tuple(out), ""


# ------------------------------------------------------------------------------ host ports
@dataclass(frozen=True, slots=True)
class HostPort:
    ip: str
    port: int
    protocol: str


def _parse_ports(raw: str, what: str) -> tuple[tuple[HostPort, ...], str]:
    data, err = _loads(raw, what)
    if err:
        return (), err
    if not isinstance(data, list):
        return (), f"{what} must be a JSON list of {{hostIP, hostPort, protocol}}, got {_short(raw)}"
    ports = []
    try:
        for i, p in enumerate(data):
            where = f"{what}[{i}]"
            if not isinstance(p, dict):
                raise ValueError(f"{where} must be an object, got {json.dumps(p)}")
            port = p.get("hostPort", 0)
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                raise ValueError(f"{where}.hostPort must be a port number (0-65535), got {json.dumps(port)}")
            if port == 0:
                continue  # no host port: nothing to conflict with (Kubernetes)
            ports.append(HostPort(_str_field(p, "hostIP", where) or BIND_ALL, port,
                                  _str_field(p, "protocol", where) or "TCP"))
    except ValueError as exc:
        return (), str(exc)
    return tuple(dict.fromkeys(ports)), ""


@lru_cache(maxsize=_CACHED)
def _allocation_ports(raw: str) -> tuple[tuple[HostPort, ...], str]:
    return _parse_ports(raw, f"tag {TAG_HOST_PORTS}")


def host_ports_of(tags: Mapping[str, str]) -> tuple[tuple[HostPort, ...], str]:
    """The host ports an allocation (placed, recovered or foreign) uses, from its tags, and an
    error naming the tag ("" if none)."""
    raw = tags.get(TAG_HOST_PORTS)
    return _allocation_ports(raw) if raw else ((), "")


class PortsInUse:
    """The host ports the allocations on one node use: (protocol, port) -> {host IP: count}.
    Kept up to date as allocations come and go (``NodeCollection``), never recomputed."""

    __slots__ = ("by_port",)

    def __init__(self) -> None:
        self.by_port: dict[tuple[str, int], dict[str, int]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_port)

    def add(self, ports: Iterable[HostPort]) -> None:
        for p in ports:
            ips = self.by_port.setdefault((p.protocol, p.port), {})
            ips[p.ip] = ips.get(p.ip, 0) + 1

    def remove(self, ports: Iterable[HostPort]) -> None:
        for p in ports:
            key = (p.protocol, p.port)
            ips = self.by_port.get(key)
            if ips is None or p.ip not in ips:
                continue
            if ips[p.ip] > 1:
                ips[p.ip] -= 1
            else:
                del ips[p.ip]
                if not ips:
                    del self.by_port[key]

    def conflicts(self, wanted: Iterable[HostPort]) -> bool:
        """kube-scheduler's NodePorts: a wanted port conflicts with the same protocol and port
        in use on the same IP or on 0.0.0.0; a wanted 0.0.0.0 with any IP."""
        by_port = self.by_port
        for p in wanted:
            ips = by_port.get((p.protocol, p.port))
            if ips and (p.ip == BIND_ALL or BIND_ALL in ips or p.ip in ips):
                return True
        return False


# ------------------------------------------------------------------------------ an ask's terms
@dataclass(frozen=True, slots=True, eq=False)
class Constraints:
    """What an ask's tags say about the nodes it may use, parsed once (``constraints_of``).
    ``errors``: tag -> what is wrong with its value (the check of that tag then rejects every
    node, naming it). Compared by identity: asks with the same tag values share one object."""

    tolerations: tuple[Toleration, ...] = ()
    affinity: NodeAffinity | None = None
    ports: tuple[HostPort, ...] = ()
    unsupported: tuple[str, ...] = ()
    errors: Mapping[str, str] | None = None
    requirements: tuple[NodeRequirement, ...] = ()
    # inter-pod terms (``interpod``): what the pod shows others, its required pod (anti-)affinity,
    # its DoNotSchedule spread constraints
    pod: PodInfo | None = None
    pod_affinity: PodAffinity | None = None
    spread: tuple[Spread, ...] = ()

    def error(self, tag: str) -> str:
        return self.errors.get(tag, "") if self.errors else ""

    def tolerates_any(self, taints: Iterable[Taint]) -> bool:
        tolerations = self.tolerations
        return any(tolerates(tolerations, t) for t in taints)


def _parse_tolerations(raw: str) -> tuple[tuple[Toleration, ...], str]:
    what = f"tag {TAG_TOLERATIONS}"
    data, err = _loads(raw, what)
    if err:
        return (), err
    if not isinstance(data, list):
        return (), f"{what} must be a JSON list of tolerations, got {_short(raw)}"
    out = []
    try:
        for i, t in enumerate(data):
            where = f"{what}[{i}]"
            if not isinstance(t, dict):
                raise ValueError(f"{where} must be an object, got {json.dumps(t)}")
            out.append(Toleration(_str_field(t, "key", where), _str_field(t, "operator", where),
                                  _str_field(t, "value", where), _str_field(t, "effect", where)))
    except ValueError as exc:
        return (), str(exc)
    return tuple(out), ""


@lru_cache(maxsize=_CACHED)
def _constraints(tolerations: str | None, affinity: str | None, ports: str | None,
                 unsupported: str | None, requirements: str | None = None, namespace: str | None = None,
                 pod_labels: str | None = None, pod_affinity: str | None = None,
                 spread: str | None = None) -> Constraints | None:
    errors: dict[str, str] = {}
    tols: tuple[Toleration, ...] = ()
    aff = None
    wanted: tuple[HostPort, ...] = ()
    if tolerations:
        tols, e = _parse_tolerations(tolerations)
        if e:
            errors[TAG_TOLERATIONS] = e
    if affinity:
        aff, e = _parse_affinity(affinity)
        if e:
            errors[TAG_NODE_AFFINITY] = e
    if ports:
        wanted, e = _allocation_ports(ports)
        if e:
            errors[TAG_HOST_PORTS] = e
    required: tuple[NodeRequirement, ...] = ()
    if requirements:
        required, e = _parse_requirements(requirements)
        if e:
            errors[TAG_NODE_REQUIREMENTS] = e
    names = tuple(n.strip() for n in (unsupported or "").split(",") if n.strip())
    pod, pod_aff, spreads = _interpod(namespace or "", pod_labels, pod_affinity, spread, errors)
    if not (tols or aff or wanted or names or errors or required or pod):
        return None
    return Constraints(tols, aff, wanted, names, errors or None, required, pod, pod_aff, spreads)


def _interpod(namespace: str, labels: str | None, affinity: str | None, spread: str | None,
              errors: dict[str, str]) -> tuple[PodInfo | None, PodAffinity | None, tuple[Spread, ...]]:
    """An ask's inter-pod terms (``interpod``); what cannot be read goes to ``errors``."""
    if labels is None and affinity is None and spread is None:
        return None, None, ()
    lbl: Mapping[str, str] = {}
    if labels:
        lbl, e = parse_pod_labels(labels)
        if e:
            errors[TAG_POD_LABELS] = e
    aff = None
    if affinity:
        aff, e = parse_pod_affinity(affinity, namespace)
        if e:
            errors[TAG_POD_AFFINITY] = e
    spreads: tuple[Spread, ...] = ()
    if spread:
        spreads, e = parse_spread(spread, namespace)
        if e:
            errors[TAG_TOPOLOGY_SPREAD] = e
    return PodInfo(namespace, lbl, aff.anti if aff is not None else ()), aff, spreads


def constraints_of(tags: Mapping[str, str]) -> Constraints | None:
    """An ask's node terms from its tags (None: it has none), parsed once per distinct set of
    values: the pods of one workload share one ``Constraints``."""
    get = tags.get
    raw = (get(TAG_TOLERATIONS), get(TAG_NODE_AFFINITY), get(TAG_HOST_PORTS), get(TAG_UNSUPPORTED_CONSTRAINTS),
           get(TAG_NODE_REQUIREMENTS), get(TAG_NAMESPACE), get(TAG_POD_LABELS), get(TAG_POD_AFFINITY),
           get(TAG_TOPOLOGY_SPREAD))
    if raw[6] is None and raw[7] is None and raw[8] is None:
        if raw[:5] == (None, None, None, None, None):
            return None
        raw = raw[:5]  # the namespace matters to inter-pod terms only
    return _constraints(*raw)
