"""Label and field selectors with the grammar and semantics of Kubernetes' apimachinery.

Label selectors: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k>n``, ``k<n``, joined by commas (AND). ``!=`` and ``notin`` also match objects without the key.
Field selectors: ``f=v``, ``f==v``, ``f!=v`` over a fixed set of fields per resource; an unknown
field is the caller's 400 (``field label not supported: f``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

__all__ = ["SelectorError", "LabelSelector", "FieldSelector", "parse_labels", "parse_fields"]


class SelectorError(ValueError):
    """A selector that does not parse; its text is the message a real server sends (400)."""


# -- label selectors ---------------------------------------------------------------------------

_SPECIAL = set("()!=,<> \t")
_KEY_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: 'id', '(', ')', ',', '!', '=', '==', '!=', 'in', 'notin', '>', '<'."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
        elif c in "(),<>":
            out.append((c, c))
            i += 1
        elif c == "!":
            if text.startswith("!=", i):
                out.append(("!=", "!="))
                i += 2
            else:
                out.append(("!", "!"))
                i += 1
        elif c == "=":
            if text.startswith("==", i):
                out.append(("==", "=="))
                i += 2
            else:
                out.append(("=", "="))
                i += 1
        else:
            j = i
            while j < n and text[j] not in _SPECIAL:
                j += 1
            word = text[i:j]
            out.append((word if word in ("in", "notin") else "id", word))
            i = j
    return out


@dataclass(frozen=True, slots=True)
class _Req:
    key: str
    op: str  # exists, !exists, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if self.op in ("=", "in"):
            return has and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not has or labels[self.key] not in self.values
        if not has:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        want = int(self.values[0])
        return have > want if self.op == "gt" else have < want


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if not _KEY_NAME.match(name) or len(name) > 63 or (prefix and (not _PREFIX.match(prefix) or len(prefix) > 253)) \
            or ("/" in key and not prefix):
        raise SelectorError(f"unable to parse requirement: key: Invalid value: {key!r}: name part must consist of "
                            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                            "character")


def _check_value(value: str) -> None:
    if len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(f"unable to parse requirement: values[0][value]: Invalid value: {value!r}: a valid "
                            "label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                            "and must start and end with an alphanumeric character")


class LabelSelector:
    """A parsed label selector; ``matches(labels)`` is true when every requirement holds."""

    __slots__ = ("reqs", "text")

    def __init__(self, reqs: list[_Req], text: str):
        self.reqs = tuple(reqs)
        self.text = text

    @property
    def empty(self) -> bool:
        return not self.reqs

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.reqs)


def parse_labels(text: str | None) -> LabelSelector:
    text = (text or "").strip()
    toks = _tokens(text)
    reqs: list[_Req] = []
    i = 0

    def found(pos: int) -> str:
        return toks[pos][1] if pos < len(toks) else ""

    def expect_id(pos: int) -> str:
        if pos >= len(toks) or toks[pos][0] != "id":
            what = found(pos)
            raise SelectorError(f"unable to parse requirement: found '{what}', expected: identifier")
        return toks[pos][1]

    while i < len(toks):
        if toks[i][0] == "!":
            key = expect_id(i + 1)
            _check_key(key)
            reqs.append(_Req(key, "!exists"))
            i += 2
        else:
            key = expect_id(i)
            _check_key(key)
            i += 1
            kind = toks[i][0] if i < len(toks) else ","
            if kind == ",":
                reqs.append(_Req(key, "exists"))
            elif kind in ("=", "==", "!="):
                i += 1
                value = ""
                if i < len(toks) and toks[i][0] in ("id", "in", "notin"):
                    value = toks[i][1]
                    i += 1
                elif i < len(toks) and toks[i][0] != ",":
                    raise SelectorError(f"unable to parse requirement: found '{found(i)}', expected: identifier")
                _check_value(value)
                reqs.append(_Req(key, "!=" if kind == "!=" else "=", (value,)))
            elif kind in ("in", "notin"):
                i += 1
                if found(i) != "(":
                    raise SelectorError(f"unable to parse requirement: found '{found(i)}', expected: '('")
                i += 1
                values: list[str] = []
                while True:
                    if i < len(toks) and toks[i][0] == ")":
                        if values and values[-1] is None:  # "a,)" ends with an empty value
                            values[-1] = ""
                        i += 1
                        break
                    if i < len(toks) and toks[i][0] == "id":
                        values.append(toks[i][1])
                        i += 1
                        if i < len(toks) and toks[i][0] == ",":
                            i += 1
                            values.append(None)  # type: ignore[arg-type]
                            continue
                        if i < len(toks) and toks[i][0] == ")":
                            continue
                    raise SelectorError(f"unable to parse requirement: found '{found(i)}', expected: ',', ')' "
                                        "or identifier")
                values = [v for v in values if v is not None]
                for v in values:
                    _check_value(v)
                reqs.append(_Req(key, kind, tuple(values)))
            elif kind in (">", "<"):
                i += 1
                value = expect_id(i)
                i += 1
                if not re.fullmatch(r"-?[0-9]+", value):
                    raise SelectorError(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must "
                                        f"be an integer")
                reqs.append(_Req(key, "gt" if kind == ">" else "lt", (value,)))
            else:
                raise SelectorError(f"unable to parse requirement: found '{found(i)}', expected: "
                                    "in, notin, =, ==, !=, gt, lt")
        if i < len(toks):
            if toks[i][0] != ",":
                raise SelectorError(f"found '{found(i)}', expected: ',' or 'end of string'")
            i += 1
            if i >= len(toks):
                raise SelectorError("found '', expected: identifier after ','")
    return LabelSelector(reqs, text)


# -- field selectors ---------------------------------------------------------------------------

class FieldSelector:
    """A parsed field selector: (field, op, value) terms, all of which must hold."""

    __slots__ = ("terms", "text")

    def __init__(self, terms: list[tuple[str, bool, str]], text: str):
        self.terms = tuple(terms)  # (field, equal?, value)
        self.text = text

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, fields: Mapping[str, str]) -> bool:
        for name, equal, value in self.terms:
            if (fields.get(name, "") == value) != equal:
                return False
        return True

    def value_of(self, name: str) -> str | None:
        """The value an equality term requires for ``name`` (for index look-ups), else None."""
        for field, equal, value in self.terms:
            if field == name and equal:
                return value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def parse_fields(text: str | None, supported: Callable[[str], bool]) -> FieldSelector:
    text = (text or "").strip()
    terms: list[tuple[str, bool, str]] = []
    if text:
        for part in _split_unescaped(text, ","):
            for op, equal in (("!=", False), ("==", True), ("=", True)):
                idx = part.find(op)
                if idx >= 0:
                    field, value = part[:idx].strip(), _unescape(part[idx + len(op):])
                    break
            else:
                raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
            if not supported(field):
                raise SelectorError(f"field label not supported: {field}")
            terms.append((field, equal, value))
    return FieldSelector(terms, text)
