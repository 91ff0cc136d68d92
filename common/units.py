"""Resource quantities for people: ``64 GiB``, ``16 cores``, ``250m``, as the dashboard shows them.

YuniKorn's resources are integers: ``memory`` and ``ephemeral-storage`` in bytes, ``vcore`` in
millicores, everything else a count. ``human`` turns one into text, ``human_resource`` a whole
resource map; ``--raw`` in the CLI skips both and prints the integers.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["human", "human_resource", "BYTE_TYPES"]

BYTE_TYPES = frozenset({"memory", "ephemeral-storage"})
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _short(value: float) -> str:
    """At most one decimal, none when the value is whole: 64, 1.5."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def human(name: str, value: int) -> str:
    """One quantity of resource ``name`` in the unit people read it in."""
    if name in BYTE_TYPES:
        scaled, unit = float(value), 0
        while abs(scaled) >= 1024 and unit < len(_BINARY) - 1:
            scaled /= 1024
            unit += 1
        return f"{_short(scaled)} {_BINARY[unit]}"
    if name == "vcore":
        if abs(value) < 1000 and value:
            return f"{value}m"
        cores = value / 1000
        return f"{_short(cores)} {'core' if cores == 1 else 'cores'}"
    return f"{value:,}"


def human_resource(resource: Mapping[str, int] | None, raw: bool = False, sep: str = ", ") -> str:
    """``memory: 64 GiB, vcore: 16 cores`` (``raw``: ``memory=68719476736,vcore=16000``); ``-`` when empty."""
    if not resource:
        return "-"
    if raw:
        return ",".join(f"{k}={v}" for k, v in sorted(resource.items()))
    return sep.join(f"{k}: {human(k, v)}" for k, v in sorted(resource.items()))
