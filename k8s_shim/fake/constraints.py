"""A pod's inter-pod constraints as a v1.36 API server takes them (recordings v1.36/04 and 14):
``causes`` are the 422 causes of a new pod's pod (anti-)affinity terms and topology spread
constraints, in the recorded words; ``merge_label_keys`` stores ``matchLabelKeys`` (``In`` the
pod's own value) and ``mismatchLabelKeys`` (``NotIn``) merged into the term's ``labelSelector``,
after the expressions sent, keeping both lists; a key the pod has no label for is not merged.
Only a create is checked this way: a stored pod's merged keys are in its selector."""

from __future__ import annotations

from typing import Any, Iterator

from k8s_shim.fake.kinds import Causes

__all__ = ["causes", "merge_label_keys"]

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NAME_PART = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
              "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


def _terms(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(field path, term, its weighted wrapper or None) of every pod (anti-)affinity term."""
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        for i, term in enumerate(section.get(_REQUIRED) or []):
            if isinstance(term, dict):
                yield f"spec.affinity.{kind}.{_REQUIRED}[{i}]", term, None
        for i, weighted in enumerate(section.get(_PREFERRED) or []):
            if isinstance(weighted, dict):
                yield f"spec.affinity.{kind}.{_PREFERRED}[{i}]", weighted.get("podAffinityTerm") or {}, weighted


def _selector_keys(selector: Any) -> set[str]:
    if not isinstance(selector, dict):
        return set()
    return set(selector.get("matchLabels") or {}) | {e.get("key") for e in selector.get("matchExpressions") or []
                                                     if isinstance(e, dict)}


def _term_causes(path: str, term: dict[str, Any], weighted: dict[str, Any] | None) -> Causes:
    out: Causes = []
    at = f"{path}.podAffinityTerm" if weighted is not None else path
    if weighted is not None:
        weight = weighted.get("weight", 0)
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            out.append(("FieldValueInvalid", f"{path}.weight", f"Invalid value: {weight}: must be in the range 1-100"))
    if not term.get("topologyKey"):
        key = f"{at}.topologyKey"
        out += [("FieldValueRequired", key, "Required value: can not be empty"),
                ("FieldValueInvalid", key, 'Invalid value: "": name part must be non-empty'),
                ("FieldValueInvalid", key, f'Invalid value: "": {_NAME_PART}')]
    in_selector = _selector_keys(term.get("labelSelector"))
    mismatch = set(term.get("mismatchLabelKeys") or [])
    for i, key in enumerate(term.get("matchLabelKeys") or []):
        if key in mismatch:
            out.append(("FieldValueInvalid", f"{at}.matchLabelKeys[{i}]",
                        f'Invalid value: "{key}": exists in both matchLabelKeys and mismatchLabelKeys'))
        elif key in in_selector:
            out.append(("FieldValueInvalid", f"{at}.matchLabelKeys[{i}]",
                        f'Invalid value: "{key}": exists in both matchLabelKeys and labelSelector'))
    for i, key in enumerate(term.get("mismatchLabelKeys") or []):
        if key in in_selector:
            out.append(("FieldValueInvalid", f"{at}.mismatchLabelKeys[{i}]",
                        f'Invalid value: "{key}": exists in both mismatchLabelKeys and labelSelector'))
    return out


def _spread_causes(path: str, c: dict[str, Any]) -> Causes:
    out: Causes = []
    skew = c.get("maxSkew", 0)
    if not isinstance(skew, int) or skew <= 0:
        out.append(("FieldValueInvalid", f"{path}.maxSkew", f"Invalid value: {skew}: must be greater than zero"))
    if not c.get("topologyKey"):
        out.append(("FieldValueRequired", f"{path}.topologyKey", "Required value: can not be empty"))
    when = c.get("whenUnsatisfiable", "")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        out.append(("FieldValueNotSupported", f"{path}.whenUnsatisfiable",
                    f'Unsupported value: "{when}": supported values: "DoNotSchedule", "ScheduleAnyway"'))
    domains = c.get("minDomains")
    if domains is not None:
        if not isinstance(domains, int) or domains <= 0:
            out.append(("FieldValueInvalid", f"{path}.minDomains", f"Invalid value: {domains}: must be greater than 0"))
        elif when != "DoNotSchedule":
            out.append(("FieldValueInvalid", f"{path}.minDomains", f"Invalid value: {domains}: can only use minDomains "
                        f"if whenUnsatisfiable=DoNotSchedule, not {when}"))
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        value = c.get(policy)
        if value is not None and value not in ("Honor", "Ignore"):
            out.append(("FieldValueNotSupported", f"{path}.{policy}",
                        f'Unsupported value: "{value}": supported values: "Honor", "Ignore"'))
    in_selector = _selector_keys(c.get("labelSelector"))
    for i, key in enumerate(c.get("matchLabelKeys") or []):
        if key in in_selector:  # the recorded field path has no ".matchLabelKeys" (file 14, exchange 10)
            out.append(("FieldValueInvalid", f"{path}[{i}]",
                        f'Invalid value: "{key}": exists in both matchLabelKeys and labelSelector'))
    return out


def causes(spec: dict[str, Any]) -> Causes:
    """The 422 causes of a new pod's inter-pod constraints."""
    out: Causes = []
    for path, term, weighted in _terms(spec):
        out += _term_causes(path, term, weighted)
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        if isinstance(c, dict):
            out += _spread_causes(f"spec.topologySpreadConstraints[{i}]", c)
    return out


def _merge(holder: dict[str, Any], labels: dict[str, str], keys: list[tuple[str, str]]) -> None:
    selector = holder.get("labelSelector")
    if not isinstance(selector, dict):
        return
    extra = [{"key": k, "operator": op, "values": [labels[k]]} for k, op in keys if k in labels]
    if extra:
        selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]


def merge_label_keys(pod: dict[str, Any]) -> None:
    """Merge a new pod's matchLabelKeys / mismatchLabelKeys into its selectors (module doc), and
    put the fields in the order a real server writes them (Go's struct order)."""
    spec, labels = pod.get("spec") or {}, (pod.get("metadata") or {}).get("labels") or {}
    for _, term, _ in _terms(spec):
        _merge(term, labels, [(k, "In") for k in term.get("matchLabelKeys") or []]
               + [(k, "NotIn") for k in term.get("mismatchLabelKeys") or []])
    for c in spec.get("topologySpreadConstraints") or []:
        if isinstance(c, dict):
            _merge(c, labels, [(k, "In") for k in c.get("matchLabelKeys") or []])
    if isinstance(spec.get("affinity"), dict):
        spec["affinity"] = _affinity_in_order(spec["affinity"])
    if isinstance(spec.get("topologySpreadConstraints"), list):
        spec["topologySpreadConstraints"] = [_in_order(_with_selector(c), _SPREAD) if isinstance(c, dict) else c
                                             for c in spec["topologySpreadConstraints"]]


# Go's struct order of the fields, as a real server writes them
_AFFINITY = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_SECTION = (_REQUIRED, _PREFERRED)
_TERM = ("labelSelector", "namespaces", "topologyKey", "namespaceSelector", "matchLabelKeys", "mismatchLabelKeys")
_WEIGHTED = ("weight", "podAffinityTerm")
_SELECTOR = ("matchLabels", "matchExpressions")
_SPREAD = ("maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains", "nodeAffinityPolicy",
           "nodeTaintsPolicy", "matchLabelKeys")


def _in_order(obj: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    out = {k: obj[k] for k in order if k in obj}
    out.update((k, v) for k, v in obj.items() if k not in out)
    return out


def _with_selector(obj: dict[str, Any]) -> dict[str, Any]:
    for key in ("labelSelector", "namespaceSelector"):
        if isinstance(obj.get(key), dict):
            obj[key] = _in_order(obj[key], _SELECTOR)
    return obj


def _affinity_in_order(affinity: dict[str, Any]) -> dict[str, Any]:
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if not isinstance(section, dict):
            continue
        if isinstance(section.get(_REQUIRED), list):
            section[_REQUIRED] = [_in_order(_with_selector(t), _TERM) if isinstance(t, dict) else t
                                  for t in section[_REQUIRED]]
        if isinstance(section.get(_PREFERRED), list):
            for w in section[_PREFERRED]:
                if isinstance(w, dict) and isinstance(w.get("podAffinityTerm"), dict):
                    w["podAffinityTerm"] = _in_order(_with_selector(w["podAffinityTerm"]), _TERM)
            section[_PREFERRED] = [_in_order(w, _WEIGHTED) if isinstance(w, dict) else w for w in section[_PREFERRED]]
        affinity[kind] = _in_order(section, _SECTION)
    return _in_order(affinity, _AFFINITY)
