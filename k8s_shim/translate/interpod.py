"""A pod's inter-pod constraints as the core reads them (``common.constants``: TAG_POD_LABELS,
TAG_POD_AFFINITY, TAG_TOPOLOGY_SPREAD).

``read_interpod(spec, labels, where)`` reads ``spec.affinity.podAffinity`` / ``podAntiAffinity``
(required and preferred terms) and ``spec.topologySpreadConstraints`` (both
``whenUnsatisfiable`` values) once per pod. Each term keeps the label selector the API server
stored: a 1.36 server has merged ``matchLabelKeys`` (``In`` the pod's own value) and
``mismatchLabelKeys`` (``NotIn``) into it; for an older server the same merge is done here, once
per key (a key already in the selector was merged by the server: validation forbids it there
otherwise). A selector, term or constraint that cannot be read is a blocking ``Problem`` naming
its field.

A term's namespaces are resolved against the namespaces' labels when the tag is made
(``affinity_tag``): its ``namespaces`` list, plus every namespace whose labels match its
``namespaceSelector``; an empty selector ``{}`` means every namespace (``null``); neither given
means the pod's own namespace. Only a term with a non-empty ``namespaceSelector`` depends on the
labels (``InterPod.by_labels``): the shim resolves such a pod's tag again when a namespace's
labels change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import orjson

__all__ = ["Term", "InterPod", "read_interpod", "affinity_tag", "spread_tag", "labels_tag", "check_selector",
           "selector_matches", "ALL_NAMESPACES"]

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_WHEN = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
ALL_NAMESPACES = None  # a resolved term's namespaces: every namespace


class _Bad(ValueError):
    """A field that cannot be read: ``field`` is its path in the pod."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class Term:
    """A pod (anti-)affinity term, its selector merged; namespaces not yet resolved."""

    selector: dict | None  # None: matches no pod
    topology_key: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: dict | None = None  # None: absent
    weight: int = 0  # a preferred term's

    @property
    def by_labels(self) -> bool:
        return bool(self.namespace_selector)


@dataclass(frozen=True, slots=True)
class InterPod:
    """A pod's inter-pod affinity terms (its spread constraints go straight to a tag)."""

    required: tuple[Term, ...] = ()
    required_anti: tuple[Term, ...] = ()
    preferred: tuple[Term, ...] = ()
    preferred_anti: tuple[Term, ...] = ()

    @property
    def terms(self) -> tuple[Term, ...]:
        return self.required + self.required_anti + self.preferred + self.preferred_anti

    @property
    def by_labels(self) -> bool:
        """Whether its namespaces depend on the namespaces' labels."""
        return any(t.by_labels for t in self.terms)


# ---------------------------------------------------------------------- label selectors
def check_selector(selector: Any, where: str) -> dict | None:
    """``selector`` (a LabelSelector) checked as Kubernetes reads one; None stays None (a term
    without a selector matches no pod). ``_Bad`` names the field that cannot be read."""
    if selector is None:
        return None
    if not isinstance(selector, dict):
        raise _Bad(where, "not a label selector (an object with matchLabels and/or matchExpressions)")
    unknown = sorted(set(selector) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise _Bad(f"{where}.{unknown[0]}", "unknown field of a label selector")
    labels = selector.get("matchLabels")
    if labels is not None and (not isinstance(labels, dict)
                               or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise _Bad(f"{where}.matchLabels", "not a map of strings")
    exprs = selector.get("matchExpressions")
    if exprs is not None and not isinstance(exprs, list):
        raise _Bad(f"{where}.matchExpressions", "not a list")
    for i, e in enumerate(exprs or ()):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not e.get("key"):
            raise _Bad(f"{at}.key", "missing or not a string")
        op, values = e.get("operator"), e.get("values")
        if op not in _OPERATORS:
            raise _Bad(f"{at}.operator", f"{op!r} is not one of {', '.join(_OPERATORS)}")
        if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
            raise _Bad(f"{at}.values", "not a list of strings")
        if op in ("In", "NotIn") and not values:
            raise _Bad(f"{at}.values", f"must be non-empty when operator is {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise _Bad(f"{at}.values", f"must be empty when operator is {op}")
    return selector


def selector_matches(selector: dict | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a (checked) LabelSelector; None matches nothing, {} everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or ():
        key, op = e["key"], e["operator"]
        if op == "In" and labels.get(key) not in e["values"]:
            return False
        if op == "NotIn" and key in labels and labels[key] in e["values"]:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _selector_keys(selector: dict | None) -> set[str]:
    if not selector:
        return set()
    return set(selector.get("matchLabels") or {}) | {e["key"] for e in selector.get("matchExpressions") or ()}


def _keys(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(k, str) and k for k in value):
        raise _Bad(where, "not a list of label keys")
    return value


def _merged(selector: dict | None, labels: Mapping[str, str], match: list[str], mismatch: list[str]) -> dict | None:
    """The selector with the pod's ``matchLabelKeys`` (In its value) and ``mismatchLabelKeys``
    (NotIn its value) merged in, as a 1.36 API server stores it; keys the pod lacks, or that the
    server merged already, are skipped. Kubernetes ignores the keys of a term without a selector."""
    if selector is None or not (match or mismatch):
        return selector
    present = _selector_keys(selector)
    extra = [{"key": k, "operator": op, "values": [labels[k]]}
             for keys, op in ((match, "In"), (mismatch, "NotIn")) for k in keys if k in labels and k not in present]
    if not extra:
        return selector
    return {**selector, "matchExpressions": [*(selector.get("matchExpressions") or ()), *extra]}


# ---------------------------------------------------------------------- reading
def _term(raw: Any, where: str, labels: Mapping[str, str], weight: int = 0) -> Term:
    if not isinstance(raw, dict):
        raise _Bad(where, "not a pod affinity term")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise _Bad(f"{where}.topologyKey", "missing or empty")
    selector = check_selector(raw.get("labelSelector"), f"{where}.labelSelector")
    namespaces = raw.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise _Bad(f"{where}.namespaces", "not a list of namespace names")
    ns_selector = check_selector(raw.get("namespaceSelector"), f"{where}.namespaceSelector")
    match = _keys(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys")
    mismatch = _keys(raw.get("mismatchLabelKeys"), f"{where}.mismatchLabelKeys")
    return Term(_merged(selector, labels, match, mismatch), key, tuple(namespaces), ns_selector, weight)


def _terms(section: Any, where: str, labels: Mapping[str, str]) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    if section is None:
        return (), ()
    if not isinstance(section, dict):
        raise _Bad(where, "not an object")
    required, preferred = section.get(_REQUIRED) or [], section.get(_PREFERRED) or []
    for name, value in ((_REQUIRED, required), (_PREFERRED, preferred)):
        if not isinstance(value, list):
            raise _Bad(f"{where}.{name}", "not a list")
    out_required = tuple(_term(t, f"{where}.{_REQUIRED}[{i}]", labels) for i, t in enumerate(required))
    out_preferred = []
    for i, w in enumerate(preferred):
        at = f"{where}.{_PREFERRED}[{i}]"
        weight = w.get("weight") if isinstance(w, dict) else None
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise _Bad(f"{at}.weight", f"{weight!r} is not an integer in 1-100")
        out_preferred.append(_term(w.get("podAffinityTerm"), f"{at}.podAffinityTerm", labels, weight))
    return out_required, tuple(out_preferred)


def _spread(raw: Any, where: str, labels: Mapping[str, str]) -> dict:
    if not isinstance(raw, dict):
        raise _Bad(where, "not a topology spread constraint")
    skew = raw.get("maxSkew")
    if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
        raise _Bad(f"{where}.maxSkew", f"{skew!r} is not an integer greater than zero")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise _Bad(f"{where}.topologyKey", "missing or empty")
    when = raw.get("whenUnsatisfiable")
    if when not in _WHEN:
        raise _Bad(f"{where}.whenUnsatisfiable", f"{when!r} is not one of {', '.join(_WHEN)}")
    selector = check_selector(raw.get("labelSelector"), f"{where}.labelSelector")
    match = _keys(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys")
    out = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
           "selector": _merged(selector, labels, match, [])}
    domains = raw.get("minDomains")
    if domains is not None:
        if isinstance(domains, bool) or not isinstance(domains, int) or domains < 1:
            raise _Bad(f"{where}.minDomains", f"{domains!r} is not an integer greater than zero")
        out["minDomains"] = domains
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        value = raw.get(policy)
        if value is not None:
            if value not in _POLICIES:
                raise _Bad(f"{where}.{policy}", f"{value!r} is not one of {', '.join(_POLICIES)}")
            out[policy] = value
    return out


def read_interpod(spec: dict, labels: Mapping[str, str],
                  where: str = "spec") -> tuple[InterPod | None, list[dict] | None, tuple[str, str] | None]:
    """(affinity terms or None, spread constraints or None, the first field that cannot be read as
    (field, message) or None) of a pod spec (or a task group: ``where`` prefixes the fields)."""
    try:
        affinity = spec.get("affinity") or {}
        if not isinstance(affinity, dict):
            raise _Bad(f"{where}.affinity", "not an object")
        req, pref = _terms(affinity.get("podAffinity"), f"{where}.affinity.podAffinity", labels)
        req_anti, pref_anti = _terms(affinity.get("podAntiAffinity"), f"{where}.affinity.podAntiAffinity", labels)
        interpod = InterPod(req, req_anti, pref, pref_anti) if req or pref or req_anti or pref_anti else None
        raw_spread = spec.get("topologySpreadConstraints") or []
        if not isinstance(raw_spread, list):
            raise _Bad(f"{where}.topologySpreadConstraints", "not a list")
        spread = [_spread(c, f"{where}.topologySpreadConstraints[{i}]", labels) for i, c in enumerate(raw_spread)]
    except _Bad as bad:
        return None, None, (bad.field, bad.message)
    return interpod, spread or None, None


# ---------------------------------------------------------------------- tags
def _namespaces(term: Term, own: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    if term.namespace_selector is not None and not term.namespace_selector:
        return ALL_NAMESPACES  # namespaceSelector {}: every namespace
    if term.namespace_selector is None and not term.namespaces:
        return [own]
    names = set(term.namespaces)
    if term.namespace_selector:
        names.update(n for n, labels in namespace_labels.items() if selector_matches(term.namespace_selector, labels))
    return sorted(names)


def _term_json(term: Term, own: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> dict:
    return {"selector": term.selector, "topologyKey": term.topology_key,
            "namespaces": _namespaces(term, own, namespace_labels)}


def affinity_tag(interpod: InterPod, own: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> str:
    """TAG_POD_AFFINITY's value: the terms with their namespaces resolved (``own``: the pod's
    namespace; ``namespace_labels``: every namespace's labels, read only by terms with a
    namespaceSelector)."""
    def terms(ts: Iterable[Term]) -> list[dict]:
        return [_term_json(t, own, namespace_labels) for t in ts]

    def weighted(ts: Iterable[Term]) -> list[dict]:
        return [{"weight": t.weight, "term": _term_json(t, own, namespace_labels)} for t in ts]

    out = {}
    for key, value in (("required", terms(interpod.required)), ("requiredAnti", terms(interpod.required_anti)),
                       ("preferred", weighted(interpod.preferred)),
                       ("preferredAnti", weighted(interpod.preferred_anti))):
        if value:
            out[key] = value
    return orjson.dumps(out).decode()


def spread_tag(spread: list[dict]) -> str:
    """TAG_TOPOLOGY_SPREAD's value."""
    return orjson.dumps(spread).decode()


def labels_tag(labels: Mapping[str, str]) -> str:
    """TAG_POD_LABELS's value."""
    return orjson.dumps(dict(labels)).decode()
