"""Kubernetes resource quantities: parse, compare and print them the way the API server does.

The server keeps a quantity's format (binary ``Ki``…, decimal ``m``/``k``…, or exponent ``e3``)
and prints it in canonical form: ``1000m`` reads back as ``1``, ``1024Mi`` as ``1Gi``, ``0.5`` as
``500m``. A string that is not a quantity is a decode error (400), a negative request a
validation error (422).
"""

from __future__ import annotations

import re
from functools import lru_cache
from decimal import Decimal, ROUND_CEILING, localcontext

__all__ = ["QuantityError", "parse", "canonical", "QUANTITY_PATTERN"]

QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_SYNTAX = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BIN_SUFFIX = {v: k for k, v in _BINARY.items()}


class QuantityError(ValueError):
    pass


def _split(text: str) -> tuple[Decimal, str]:
    if not isinstance(text, str):
        text = str(text)
    m = _SYNTAX.match(text.strip())
    if not m:
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    number, suffix = m.group(1), m.group(2) or ""
    with localcontext() as ctx:
        ctx.prec = 60
        value = Decimal(number)
        if suffix in _BINARY:
            value *= Decimal(2) ** _BINARY[suffix]
            fmt = "binary"
        elif suffix in _DECIMAL:
            value *= Decimal(10) ** _DECIMAL[suffix]
            fmt = "decimal"
        else:
            value *= Decimal(10) ** int(suffix[1:])
            fmt = "exponent"
    return value, fmt


@lru_cache(maxsize=4096)  # a cluster's quantities repeat: "100m", "64Mi", ...
def _parse_cached(text: str) -> Decimal:
    return _split(text)[0]


def parse(text: str | int | float) -> Decimal:
    """The quantity's value (``QuantityError`` when it does not parse)."""
    return _parse_cached(str(text))


def canonical(text: str | int | float) -> str:
    """The string the API server stores for this quantity."""
    return _canonical(str(text))


@lru_cache(maxsize=4096)
def _canonical(text: str) -> str:
    value, fmt = _split(text)
    with localcontext() as ctx:
        ctx.prec = 60
        sign = "-" if value < 0 else ""
        value = abs(value)
        if value == 0:
            return "0"
        if fmt == "binary" and value == value.to_integral_value():
            whole = int(value)
            exp = 0
            while exp < 60 and whole % (1 << (exp + 10)) == 0 and (whole >> (exp + 10)) > 0:
                exp += 10
            if exp == 0 and whole >= 1024:
                fmt = "decimal"  # not a whole number of Ki: printed in decimal SI
            else:
                return f"{sign}{whole >> exp}{_BIN_SUFFIX.get(exp, '')}"
        if fmt == "binary":
            fmt = "decimal"
        # decimal / exponent: the largest power of 1000 that keeps an integer mantissa; below
        # 1n the value rounds up to 1n
        nanos = (value * Decimal(10) ** 9).to_integral_value(rounding=ROUND_CEILING)
        exp = -9
        while exp < 18 and nanos % 1000 == 0:
            nanos //= 1000
            exp += 3
        mantissa = int(nanos)
        if fmt == "exponent":
            return f"{sign}{mantissa}" + (f"e{exp}" if exp else "")
        return f"{sign}{mantissa}{_DEC_SUFFIX[exp]}"
