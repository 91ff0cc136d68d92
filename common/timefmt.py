"""Durations and times as Go writes them, since YuniKorn's REST answers show Go's text:
``go_duration`` is Go's ``time.Duration.String()`` (``30s``, ``1m30s``, ``1h0m0s``, ``500ms``,
``0s``) and ``rfc3339_nano`` Go's ``time.Time`` JSON text in UTC (``2026-05-01T10:11:12.5Z``).
"""

from __future__ import annotations

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


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01 in the proleptic Gregorian calendar
    (H. Hinnant's civil_from_days; no clock or datetime module, so the pure core may use it)."""
    days += 719_468
    era = days // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def rfc3339_nano(ns: int) -> str:
    """Go's RFC 3339 text with nanoseconds (trailing zeros dropped) of a Unix time in ns, in UTC."""
    secs, frac = divmod(ns, _SECOND)
    days, secs = divmod(secs, 86_400)
    year, month, day = _civil(days)
    base = f"{year:04d}-{month:02d}-{day:02d}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    fraction = f"{frac:09d}".rstrip("0")
    return f"{base}.{fraction}Z" if fraction else f"{base}Z"
