"""Resource quantities for people: ``64 GiB``, ``16 cores``, ``250m``, as the dashboard shows them.

YuniKorn's resources are integers: ``memory`` and ``ephemeral-storage`` in bytes, ``vcore`` in
millicores, everything else a count. ``human`` turns one into text, ``human_resource`` a whole
resource map; ``--raw`` in the CLI skips both and prints the integers.
"""

from __future__ import annotations

import math
from typing import Mapping

__all__ = ["human", "human_resource", "round1", "BYTE_TYPES"]

BYTE_TYPES = frozenset({"memory", "ephemeral-storage"})
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def round1(value: float) -> float:
    """``value`` to one decimal, halves away from zero (1.25 -> 1.3, -1.25 -> -1.3): the one
    rounding rule of every quantity Korral prints, the dashboard's ``round1`` (app.js) included."""
    r = math.floor(abs(value) * 10 + 0.5) / 10
    return -r if value < 0 and r else r


def _decimal(value: float) -> str:
    """``round1(value)`` as text, without ``.0`` when whole: 64, 1.3."""
    r = round1(value)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


def human(name: str, value: float) -> str:
    """One quantity of resource ``name`` in the unit people read it in: bytes in binary units
    (``1.3 TiB``), vcore in cores or millicores (``1.5 cores``, ``250m``), anything else a count
    with thousands separators. The dashboard's ``fmtQty`` (app.js) gives the same text."""
    if name in BYTE_TYPES:
        scaled, unit = float(value), 0
        while abs(round1(scaled)) >= 1024 and unit < len(_BINARY) - 1:
            scaled /= 1024
            unit += 1
        return f"{_decimal(scaled)} {_BINARY[unit]}"
    if name == "vcore":
        if value and abs(value) < 1000:
            return f"{_decimal(value)}m"
        cores = _decimal(value / 1000)
        return f"{cores} {'core' if cores == '1' else 'cores'}"
    return f"{int(value):,}" if value == int(value) else f"{round1(value):,.1f}"


def human_resource(resource: Mapping[str, int] | None, raw: bool = False, sep: str = ", ") -> str:
    """``memory: 64 GiB, vcore: 16 cores`` (``raw``: ``memory=68719476736,vcore=16000``); ``-`` when empty."""
    if not resource:
        return "-"
    if raw:
        return ",".join(f"{k}={v}" for k, v in sorted(resource.items()))
    return sep.join(f"{k}: {human(k, v)}" for k, v in sorted(resource.items()))
