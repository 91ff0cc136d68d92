"""Durations and times as Go writes them, since YuniKorn's REST answers show Go's text:
``go_duration`` is Go's ``time.Duration.String()`` (``30s``, ``1m30s``, ``1h0m0s``, ``500ms``,
``0s``) and ``rfc3339_nano`` Go's ``time.Time`` JSON text in UTC (``2026-05-01T10:11:12.5Z``).
"""

from __future__ import annotations

import datetime

__all__ = ["go_duration", "rfc3339_nano"]

_SECOND = 1_000_000_000
_SMALL_UNITS = ((1_000_000, "ms"), (1_000, "µs"), (1, "ns"))


def _decimal(whole: int, frac: int, frac_digits: int) -> str:
    """``whole.frac`` with ``frac`` of ``frac_digits`` digits, trailing zeros (and dot) dropped."""
    text = f"{frac:0{frac_digits}d}".rstrip("0") if frac_digits else ""
    return f"{whole}.{text}" if text else str(whole)


def go_duration(ns: int) -> str:
    """Go's text for a duration of ``ns`` nanoseconds."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < _SECOND:
        for size, unit in _SMALL_UNITS:
            if ns >= size:
                digits = len(str(size)) - 1
                return f"{sign}{_decimal(ns // size, ns % size, digits)}{unit}"
    secs, frac = divmod(ns, _SECOND)
    hours, secs = divmod(secs, 3600)
    minutes, secs = divmod(secs, 60)
    text = f"{_decimal(secs, frac, 9)}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def rfc3339_nano(ns: int) -> str:
    """Go's RFC 3339 text with nanoseconds (trailing zeros dropped) of a Unix time in ns, in UTC."""
    secs, frac = divmod(ns, _SECOND)
    base = datetime.datetime.fromtimestamp(secs, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{frac:09d}".rstrip("0")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"
