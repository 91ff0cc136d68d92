"""Resource quantities: an immutable sparse map of name -> int64, with YuniKorn's semantics.

Contract (YUNIKORN_BEHAVIOUR.md 1.7):

- A ``Resource`` maps resource names (``memory``, ``vcore``, any other) to int64
  quantities. Missing names count as zero unless a method says otherwise.
- Values are immutable; every operation returns a new ``Resource``.
- Arithmetic saturates at +/- ``MAX_INT64`` instead of wrapping.
- ``sub_checked`` is the subtraction for places where a negative result is a
  bug (node/queue/app bookkeeping): it raises ``NegativeResourceError`` naming
  the objects involved instead of silently going negative.

The names mirror YuniKorn's Go API in snake case (``fits_in``,
``fits_in_max_undef``, ``strictly_greater_than_zero``, ``component_wise_min``...),
so people who know the Go code find their way.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

__all__ = [
    "MAX_INT64",
    "MIN_INT64",
    "MEMORY",
    "VCORE",
    "NegativeResourceError",
    "Resource",
    "ZERO",
]

MAX_INT64 = (1 << 63) - 1
MIN_INT64 = -(1 << 63)
MEMORY = "memory"
VCORE = "vcore"


class NegativeResourceError(ValueError):
    """A subtraction that must not go negative would have; the message names who and what."""


def _clamp(v: int) -> int:
    if v > MAX_INT64:
        return MAX_INT64
    if v < MIN_INT64:
        return MIN_INT64
    return v


_new = object.__new__


class Resource:
    """An immutable sparse map of resource name -> int64 quantity.

    Build with ``Resource({"memory": 10, "vcore": 1})`` or ``Resource.of(memory=10)``.
    Zero entries are kept (YuniKorn distinguishes "0 allowed" from "undefined"
    in a queue max), but compare equal to missing ones in ``equals_or_empty``.
    """

    __slots__ = ("_v", "_hash")

    def __init__(self, values: Mapping[str, int] | None = None) -> None:
        v: dict[str, int] = {}
        if values:
            for k, q in values.items():
                if not isinstance(k, str) or not k:
                    raise ValueError(f"resource name must be a non-empty string, got {k!r}")
                if isinstance(q, bool) or not isinstance(q, int):
                    raise ValueError(f"resource {k!r}: quantity must be an integer, got {q!r}")
                v[k] = _clamp(q)
        self._v = v
        self._hash: int | None = None

    @classmethod
    def of(cls, **values: int) -> "Resource":
        return cls(values)

    @classmethod
    def _trusted(cls, v: dict[str, int]) -> "Resource":
        """Wrap an already clamped dict without copying or validating (hot paths)."""
        r = _new(cls)
        r._v = v
        r._hash = None
        return r

    # ------------------------------------------------------------------ mapping view
    def get(self, name: str, default: int = 0) -> int:
        return self._v.get(name, default)

    def __getitem__(self, name: str) -> int:
        return self._v.get(name, 0)

    def __contains__(self, name: object) -> bool:
        return name in self._v

    def __iter__(self) -> Iterator[str]:
        return iter(self._v)

    def __len__(self) -> int:
        return len(self._v)

    def items(self):
        return self._v.items()

    def keys(self):
        return self._v.keys()

    def as_dict(self) -> dict[str, int]:
        """A plain copy, e.g. for JSON output."""
        return dict(self._v)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}:{v}" for k, v in sorted(self._v.items()))
        return f"Resource({{{inner}}})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resource):
            return NotImplemented
        return self._v == other._v

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._v.items()))
        return self._hash

    def __bool__(self) -> bool:
        return bool(self._v)

    # ------------------------------------------------------------------ arithmetic
    def add(self, other: "Resource") -> "Resource":
        """Component-wise sum over the union of names, saturating at int64."""
        v = self._v.copy()
        for k, q in other._v.items():
            s = v.get(k, 0) + q
            v[k] = s if MIN_INT64 <= s <= MAX_INT64 else _clamp(s)
        r = _new(Resource)  # _trusted, inlined: add and sub run several times per allocation
        r._v = v
        r._hash = None
        return r

    __add__ = add

    def sub(self, other: "Resource") -> "Resource":
        """Component-wise difference over the union of names; may go negative (saturating)."""
        v = self._v.copy()
        for k, q in other._v.items():
            s = v.get(k, 0) - q
            v[k] = s if MIN_INT64 <= s <= MAX_INT64 else _clamp(s)
        r = _new(Resource)
        r._v = v
        r._hash = None
        return r

    __sub__ = sub

    def sub_checked(self, other: "Resource", what: str = "") -> "Resource":
        """``self - other``; raises ``NegativeResourceError`` if any component would go negative.

        ``what`` names the objects involved (e.g. ``"node n1 allocated - alloc u1"``) and
        is put in the error message.
        """
        v = self._v.copy()
        bad = None
        for k, q in other._v.items():
            was = v.get(k, 0)
            s = was - q
            if s < 0 <= was:
                bad = [k] if bad is None else bad + [k]
            v[k] = s if MIN_INT64 <= s <= MAX_INT64 else _clamp(s)
        if bad is not None:
            raise NegativeResourceError(
                f"{what or 'resource subtraction'}: {self} - {other} goes negative for {sorted(bad)}"
            )
        r = _new(Resource)  # _trusted, inlined: a release runs it for its node and its app
        r._v = v
        r._hash = None
        return r

    def sub_eliminate_negative(self, other: "Resource") -> "Resource":
        """``self - other`` with negative components clamped to zero (YuniKorn SubEliminateNegative)."""
        v = dict(self._v)
        for k, q in other._v.items():
            s = v.get(k, 0) - q
            v[k] = 0 if s < 0 else _clamp(s)
        return Resource._trusted(v)

    def multiply(self, factor: int) -> "Resource":
        """Every component times an integer factor, saturating."""
        if factor == 1:
            return self  # immutable: no copy needed
        return Resource._trusted({k: _clamp(q * factor) for k, q in self._v.items()})

    __mul__ = multiply

    def negate(self) -> "Resource":
        return Resource._trusted({k: _clamp(-q) for k, q in self._v.items()})

    # ------------------------------------------------------------------ comparisons
    def fits_in(self, larger: "Resource") -> bool:
        """YuniKorn FitIn(larger, self): every name of self is <= max(larger[name], 0); missing = 0."""
        lv = larger._v
        for k, q in self._v.items():
            lq = lv.get(k, 0)
            if lq < 0:
                lq = 0
            if q > lq:
                return False
        return True

    def fits_in_max_undef(self, larger: "Resource | None") -> bool:
        """As ``fits_in`` but names missing in ``larger`` are unlimited; empty larger fits all (quotas)."""
        if larger is None:
            return True
        lv = larger._v
        for k, q in self._v.items():
            lq = lv.get(k)
            if lq is not None and q > (lq if lq > 0 else 0):
                return False
        return True

    def strictly_greater_than(self, other: "Resource") -> bool:
        """No component of self below other's (missing = 0) and not all equal."""
        keys = set(self._v) | set(other._v)
        equal = True
        for k in keys:
            a = self._v.get(k, 0)
            b = other._v.get(k, 0)
            if a < b:
                return False
            if a != b:
                equal = False
        return not equal

    def strictly_greater_than_or_equals(self, other: "Resource") -> bool:
        """No component of self below other's (missing = 0)."""
        for k in set(self._v) | set(other._v):
            if self._v.get(k, 0) < other._v.get(k, 0):
                return False
        return True

    def strictly_greater_than_zero(self) -> bool:
        """At least one component > 0 and none < 0."""
        pos = False
        for q in self._v.values():
            if q < 0:
                return False
            if q > 0:
                pos = True
        return pos

    def is_zero(self) -> bool:
        """Empty or all components zero."""
        return not any(self._v.values())

    def has_negative(self) -> bool:
        return any(q < 0 for q in self._v.values())

    def equals_or_empty(self, other: "Resource | None") -> bool:
        """Equal, treating empty and all-zero as the same (YuniKorn EqualsOrEmpty)."""
        if other is None:
            return self.is_zero()
        if self.is_zero() and other.is_zero():
            return True
        return self._v == other._v

    def component_wise_min(self, other: "Resource") -> "Resource":
        """Min per name over the union; a missing name counts as 0 (YuniKorn ComponentWiseMin)."""
        keys = set(self._v) | set(other._v)
        return Resource._trusted({k: min(self._v.get(k, 0), other._v.get(k, 0)) for k in keys})

    def component_wise_min_permissive(self, other: "Resource | None") -> "Resource":
        """Min per name; a name missing on one side takes the other side's value."""
        if other is None:
            return self
        v = dict(other._v)
        for k, q in self._v.items():
            o = v.get(k)
            v[k] = q if o is None or q < o else o
        return Resource._trusted(v)

    def component_wise_max(self, other: "Resource") -> "Resource":
        """Max per name over the union; a missing name counts as 0."""
        keys = set(self._v) | set(other._v)
        return Resource._trusted({k: max(self._v.get(k, 0), other._v.get(k, 0)) for k in keys})

    # ------------------------------------------------------------------ shares
    def shares(self, total: "Resource | None") -> list[float]:
        """Share of each component in ``total`` (value itself where total is missing or <= 0),
        sorted ascending (YuniKorn getShares)."""
        tv = total._v if total is not None else {}
        out = []
        for k, q in self._v.items():
            t = tv.get(k, 0)
            out.append(q / t if t > 0 else float(q))
        out.sort()
        return out

    def fit_in_score(self, fit: "Resource") -> float:
        """Sum over names of (fit - self)/fit where self < fit; lower means a tighter fit."""
        score = 0.0
        fv = fit._v
        for k, q in self._v.items():
            f = fv.get(k, 0)
            if f > 0 and q < f:
                score += (f - q) / f
        return score

    def prune(self) -> "Resource":
        """A copy without zero components."""
        return Resource._trusted({k: q for k, q in self._v.items() if q != 0})


def compare_shares(left: list[float], right: list[float]) -> int:
    """Compare two ascending share lists from the largest down (YuniKorn compareShares).

    Returns -1, 0 or 1. A leftover positive share on one side makes that side larger.
    """
    i, j = len(left) - 1, len(right) - 1
    while i >= 0 and j >= 0:
        if left[i] < right[j]:
            return -1
        if left[i] > right[j]:
            return 1
        i -= 1
        j -= 1
    while i >= 0:
        if left[i] > 0:
            return 1
        if left[i] < 0:
            return -1
        i -= 1
    while j >= 0:
        if right[j] > 0:
            return -1
        if right[j] < 0:
            return 1
        j -= 1
    return 0


def share_key(shares: list[float]) -> tuple[float, ...]:
    """A sort key equivalent to ``compare_shares`` for non-negative shares: largest first, padded."""
    key = [s for s in shares if s != 0]
    key.sort(reverse=True)
    return tuple(key)


def sum_resources(items: Iterable[Resource]) -> Resource:
    total = ZERO
    for r in items:
        total = total.add(r)
    return total


ZERO = Resource()
__all__ += ["compare_shares", "share_key", "sum_resources"]
