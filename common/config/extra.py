"""The RM's ``extraConfig`` keys Korral reads (YuniKorn reads the same keys from its configmap),
checked and parsed in one place.

``check_extra_config`` names every key with a value Korral cannot use (``korral.compatibility``
too, through ``common.compat``); rmproxy refuses such a
registration or config update (YuniKorn logs a warning and uses the default instead), so a typo
is seen when it is made. Keys Korral does not read are kept and ignored, as YuniKorn does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from common.compat import parse_compat

__all__ = ["EVENT_MAX_STREAMS", "EVENT_MAX_STREAMS_PER_HOST", "KNOWN_KEYS", "check_extra_config",
           "StreamLimits", "stream_limits"]

EVENT_MAX_STREAMS = "event.maxStreams"  # event streams open at once (per rmproxy), default 100
EVENT_MAX_STREAMS_PER_HOST = "event.maxStreamsPerHost"  # of them per Host header, default 15


def _count(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("negative")
    return value


# key -> (parser raising ValueError, what the value must be, default)
KNOWN_KEYS: dict[str, tuple[Callable[[str], int], str, int]] = {
    EVENT_MAX_STREAMS: (_count, "a non-negative integer", 100),
    EVENT_MAX_STREAMS_PER_HOST: (_count, "a non-negative integer", 15),
}


def check_extra_config(extra: Mapping[str, str]) -> list[str]:
    """One message per known key whose value does not parse, naming the key and the value."""
    errors = []
    for key, (parse, what, _) in KNOWN_KEYS.items():
        if key in extra:
            try:
                parse(extra[key])
            except ValueError:
                errors.append(f"extraConfig {key}: {extra[key]!r} is not {what}")
    try:
        parse_compat(extra)  # korral.compatibility: its own parser names the accepted values
    except ValueError as exc:
        errors.append(str(exc))
    return errors


def _value(extras: Iterable[Mapping[str, str]], key: str) -> int:
    """The smallest value any of ``extras`` sets for ``key`` (values that do not parse are
    skipped), else the default."""
    parse, _, default = KNOWN_KEYS[key]
    found = []
    for extra in extras:
        if key in extra:
            try:
                found.append(parse(extra[key]))
            except ValueError:
                continue
    return min(found) if found else default


@dataclass(frozen=True, slots=True)
class StreamLimits:
    total: int
    per_host: int


def stream_limits(extras: Iterable[Mapping[str, str]]) -> StreamLimits:
    """The event stream limits of a stack whose RMs sent ``extras``: with several RMs, the
    strictest setting applies."""
    extras = list(extras)
    return StreamLimits(_value(extras, EVENT_MAX_STREAMS), _value(extras, EVENT_MAX_STREAMS_PER_HOST))
