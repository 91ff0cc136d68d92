"""Resource quantities as queues.yaml writes them: ``1024``, ``100M``, ``1Gi``, ``2`` vcores, ``500m``.

Semantics of YuniKorn v1.2 (pkg/common/resources/quantity.go): after trimming,
the text must match ``<digits><optional spaces><optional suffix>``; no sign, no
decimals. Decimal suffixes ``k M G T P E`` (10^3..10^18), binary ``Ki Mi Gi Ti
Pi Ei`` (2^10..2^60). ``vcore`` is stored in milli-cores: a plain number or a
number with a size suffix is multiplied by 1000, ``m`` gives milli-cores as
written (``500m`` = 500). ``m`` on any other resource is an invalid suffix.
Results beyond int64 are an overflow error.
"""

from __future__ import annotations

import re

__all__ = ["QuantityError", "parse_quantity", "parse_resources", "format_resources", "VCORE", "MEMORY", "INT64_MAX"]

VCORE = "vcore"
MEMORY = "memory"
INT64_MAX = 2**63 - 1

_LEGAL = re.compile(r"([0-9]+)\s*([mkKMGTPE]i?)?")
_MULTIPLIERS: dict[str, int] = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class QuantityError(ValueError):
    """A quantity that cannot be parsed; the message is YuniKorn's reason plus the value."""


def parse_quantity(value: object, resource: str = "") -> int:
    """Parse one quantity for ``resource``; raises ``QuantityError``.

    ``value`` may be an int (already a number) or a string. ``vcore`` values are
    returned in milli-cores.
    """
    if value is None:
        raise QuantityError("invalid quantity: no value")
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity '{value}'")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError(f"invalid quantity '{value}': expected a number or a string")
    match = _LEGAL.fullmatch(text)
    if match is None:
        raise QuantityError(f"invalid quantity '{value}'")
    number, suffix = int(match.group(1)), match.group(2) or ""
    milli = resource == VCORE
    if suffix == "m":
        if not milli:
            raise QuantityError(f"invalid suffix '{suffix}' in quantity '{value}' (milli is only valid for vcore)")
        result = number
    else:
        multiplier = _MULTIPLIERS.get(suffix)
        if multiplier is None:
            raise QuantityError(f"invalid suffix '{suffix}' in quantity '{value}'")
        result = number * multiplier * (1000 if milli else 1)
    if result > INT64_MAX:
        raise QuantityError(f"invalid quantity: overflow '{value}'")
    return result


def parse_resources(raw: dict[str, object]) -> tuple[dict[str, int], list[str]]:
    """Parse a map resource name -> quantity; returns (parsed, error messages naming the resource)."""
    parsed: dict[str, int] = {}
    errors: list[str] = []
    for name, value in raw.items():
        if not isinstance(name, str) or name.strip() == "":
            errors.append(f"invalid resource name '{name}'")
            continue
        try:
            parsed[name] = parse_quantity(value, name)
        except QuantityError as exc:
            errors.append(f"resource {name}: {exc}")
    return parsed, errors


def format_resources(res: dict[str, int] | None) -> str:
    """Render a resource map the way YuniKorn's messages print one: ``map[memory:100 vcore:1000]``."""
    if not res:
        return "map[]"
    return "map[" + " ".join(f"{k}:{res[k]}" for k in sorted(res)) + "]"
