"""Kubernetes resource quantities (``500m``, ``1.5Gi``, ``2e3``) as the API server reads them.

``parse`` gives the exact value as a ``Fraction``; ``value`` and ``milli_value`` round it up to an
integer as Kubernetes' ``Quantity.Value()`` and ``MilliValue()`` do. The shim sends CPU in
milli-cores (``vcore``) and everything else in whole units (memory in bytes), as YuniKorn's shim.
A string that is not a quantity raises ``ValueError`` saying why.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["parse", "value", "milli_value", "si_value"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_QUANTITY = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?")
_MAX_EXPONENT = 30  # far past int64 already; bounds the work a hostile "1e999999999" could cause
_CACHE: dict[str, Fraction] = {}  # the same few strings ("100m", "64Mi") come back for every pod
_SI_CACHE: dict[tuple[str, str], tuple[str, int]] = {}  # si_value's answers to them


def parse(text: str) -> Fraction:
    """The exact value of a quantity string."""
    cached = _CACHE.get(text)
    if cached is not None:
        return cached
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a quantity (not a string)")
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a quantity (expected a number and an optional suffix such as "
                         "m, k, Mi, Gi or an exponent like e3)")
    sign, number, suffix, exponent = m.groups()
    amount = Fraction(number)
    if exponent is not None:
        power = int(exponent)
        if abs(power) > _MAX_EXPONENT:
            raise ValueError(f"{text!r} is not a quantity Kubernetes accepts (exponent {power} out of range)")
        amount *= Fraction(10) ** power
    elif suffix in _BINARY:
        amount *= _BINARY[suffix]
    else:
        amount *= _DECIMAL[suffix or ""]
    result = -amount if sign == "-" else amount
    if len(_CACHE) < 4096:
        _CACHE[text] = result
    return result


def value(text: str) -> int:
    """The quantity rounded up to a whole number (Kubernetes' ``Value()``)."""
    return math.ceil(parse(text))


def milli_value(text: str) -> int:
    """The quantity in thousandths, rounded up (Kubernetes' ``MilliValue()``)."""
    return math.ceil(parse(text) * 1000)


def si_value(name: str, text: str) -> tuple[str, int]:
    """A Kubernetes resource entry as the SI names and counts it: ``cpu`` becomes ``vcore`` in
    milli-cores, every other name keeps its name in whole units."""
    key = (name, text) if type(text) is str else None
    cached = _SI_CACHE.get(key) if key is not None else None
    if cached is not None:
        return cached
    result = ("vcore", milli_value(text)) if name == "cpu" else (name, value(text))
    if key is not None and len(_SI_CACHE) < 4096:
        _SI_CACHE[key] = result
    return result
