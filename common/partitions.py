"""Partition names: the short name an RM uses and the internal ``[rmID]name`` form."""

from __future__ import annotations

from common.constants import DEFAULT_PARTITION

__all__ = ["short_name", "qualified_name"]


def short_name(name: str, rm_id: str = "") -> str:
    """Normalise an RM-supplied partition name: ``""`` -> ``default``, ``[rm]x`` -> ``x``.

    YuniKorn keys partitions by ``[rmID]name`` internally; RMs send the short
    name (or nothing). Only ``default`` is matched in any case, as YuniKorn's config validator
    does; other names keep their case (two names differing only in case are refused as
    duplicates when the config is loaded).
    """
    if name.startswith("["):
        close = name.find("]")
        if close > 0:
            name = name[close + 1 :]
    name = name.strip()
    if not name or name.lower() == DEFAULT_PARTITION:
        return DEFAULT_PARTITION
    return name


def qualified_name(rm_id: str, name: str) -> str:
    """The internal name YuniKorn shows: ``[rmID]partition``."""
    return f"[{rm_id}]{short_name(name)}"
