"""Go durations (``30s``, ``1m30s``, ``500ms``), as YuniKorn's queue properties write them,
parsed in one place for the validator and the core.
"""

from __future__ import annotations

import re

__all__ = ["parse_duration_ns"]

_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
            "m": 60_000_000_000, "h": 3_600_000_000_000}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration_ns(text: str) -> int:
    """Nanoseconds of a Go duration (a sign, then number+unit pairs; ``0`` alone is zero);
    ``ValueError`` naming the text for anything else."""
    t = text.strip()
    sign = -1 if t.startswith("-") else 1
    body = t[1:] if t[:1] in "+-" else t
    if body == "0":
        return 0
    total, pos = 0.0, 0
    while pos < len(body):
        m = _PART.match(body, pos)
        if m is None:
            break
        total += float(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(f"'{text}' is not a duration (e.g. 30s, 1m30s, 500ms)")
    return sign * int(total)
