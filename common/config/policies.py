"""Policy names of queues.yaml as enums, parsed in exactly one place.

Each ``parse_*`` takes the text as written and returns the enum; the empty
string gives the documented default. Unknown values raise ``ValueError`` naming
the value, except where YuniKorn falls back silently (``fallback_*``), which the
config loader turns into a warning so ``korral check-config`` can show it.
"""

from __future__ import annotations

from enum import Enum
from typing import Mapping

__all__ = [
    "NodeSortPolicy",
    "AppSortPolicy",
    "PriorityPolicy",
    "QueuePreemptionPolicy",
    "FilterType",
    "parse_node_sort_policy",
    "parse_filter_type",
    "parse_app_sort_policy",
    "parse_priority_policy",
    "parse_queue_preemption_policy",
    "PROPERTY_APP_SORT_POLICY",
    "PROPERTY_APP_SORT_PRIORITY",
    "PROPERTY_PRIORITY_POLICY",
    "PROPERTY_PRIORITY_OFFSET",
    "PROPERTY_PREEMPTION_POLICY",
    "PROPERTY_PREEMPTION_DELAY",
    "PROPERTY_UNSCHED_BACKOFF",
    "PROPERTY_UNSCHED_BACKOFF_DELAY",
    "PROPERTY_QUOTA_PREEMPTION_DELAY",
    "DEFAULT_UNSCHED_BACKOFF_DELAY_NS",
    "USER_GROUP_RESOLVERS",
    "property_errors",
    "STRICT_PROPERTIES",
]

PROPERTY_APP_SORT_POLICY = "application.sort.policy"
PROPERTY_APP_SORT_PRIORITY = "application.sort.priority"
PROPERTY_PRIORITY_POLICY = "priority.policy"
PROPERTY_PRIORITY_OFFSET = "priority.offset"
PROPERTY_PREEMPTION_POLICY = "preemption.policy"
PROPERTY_PREEMPTION_DELAY = "preemption.delay"
# YuniKorn 1.8: unschedulable-ask backoff (YUNIKORN-3115) and quota-change preemption (YUNIKORN-3133)
PROPERTY_UNSCHED_BACKOFF = "application.unschedasks.backoff"
PROPERTY_UNSCHED_BACKOFF_DELAY = "application.unschedasks.backoff.delay"
PROPERTY_QUOTA_PREEMPTION_DELAY = "quota.preemption.delay"
DEFAULT_UNSCHED_BACKOFF_DELAY_NS = 30_000_000_000
# partition usergroupresolver.type: "" (the worker's --group-lookup), the OS, or LDAP
USER_GROUP_RESOLVERS = ("", "os", "ldap")
_UINT64_MAX = 2**64 - 1


class NodeSortPolicy(str, Enum):
    FAIR = "fair"
    BINPACKING = "binpacking"


class AppSortPolicy(str, Enum):
    FIFO = "fifo"
    FAIR = "fair"
    STATEAWARE = "stateaware"


class PriorityPolicy(str, Enum):
    DEFAULT = "default"
    FENCE = "fence"


class QueuePreemptionPolicy(str, Enum):
    DEFAULT = "default"
    FENCE = "fence"
    DISABLED = "disabled"


class FilterType(str, Enum):
    ALLOW = "allow"
    DENY = "deny"


def parse_node_sort_policy(text: str) -> NodeSortPolicy:
    """``""`` → fair; ``fair``/``binpacking`` exactly (case-sensitive, as YuniKorn); else ValueError."""
    if text == "":
        return NodeSortPolicy.FAIR
    try:
        return NodeSortPolicy(text)
    except ValueError:
        raise ValueError(f"undefined policy: {text}") from None


def parse_filter_type(text: str) -> FilterType:
    """``""`` → allow; ``allow``/``deny`` in any case; else ValueError."""
    try:
        return FilterType(text.lower()) if text else FilterType.ALLOW
    except ValueError:
        raise ValueError(f"invalid rule filter type {text}, filter type  must be either '', allow or deny") from None


def _parse_named(policy: type[Enum], text: str, what: str, *, any_case: bool = True):
    """The member of ``policy`` named ``text``; ``""`` gives its first member (the default);
    an unknown name raises ValueError naming it and the default YuniKorn uses instead."""
    default = next(iter(policy))
    if text == "":
        return default
    try:
        return policy(text.lower() if any_case else text)
    except ValueError:
        raise ValueError(f"unknown {what} '{text}', {default.value} is used") from None


def parse_app_sort_policy(text: str) -> AppSortPolicy:
    """Exact lower-case names; ``""`` → fifo; unknown raises (the loader warns and YuniKorn uses fifo)."""
    return _parse_named(AppSortPolicy, text, "application sort policy", any_case=False)


def parse_priority_policy(text: str) -> PriorityPolicy:
    return _parse_named(PriorityPolicy, text, "priority policy")


def parse_queue_preemption_policy(text: str) -> QueuePreemptionPolicy:
    return _parse_named(QueuePreemptionPolicy, text, "preemption policy")


def _uint(text: str) -> int:
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or int(t) > _UINT64_MAX:
        raise ValueError(f"'{text}' is not a non-negative integer")
    return int(t)


def _positive_duration(text: str) -> int:
    from common.config.durations import parse_duration_ns

    ns = parse_duration_ns(text)
    if ns <= 0:
        raise ValueError(f"'{text}' must be a positive duration")
    return ns


def _non_negative_duration(text: str) -> int:
    from common.config.durations import parse_duration_ns

    ns = parse_duration_ns(text)
    if ns < 0:
        raise ValueError(f"'{text}' must not be negative (0 turns it off)")
    return ns


# Properties of YuniKorn 1.8 that Korral checks strictly (YuniKorn logs a bad value at DEBUG
# and uses the default; Korral rejects the config so the mistake is seen): key -> parser.
STRICT_PROPERTIES = {
    PROPERTY_UNSCHED_BACKOFF: _uint,
    PROPERTY_UNSCHED_BACKOFF_DELAY: _positive_duration,
    PROPERTY_QUOTA_PREEMPTION_DELAY: _non_negative_duration,
}
_STRICT_FAMILIES = ("application.unschedasks.", "quota.preemption.")


def property_errors(props: Mapping[str, str]) -> list[str]:
    """One message per bad strict property (``property KEY: why``), and per unknown key in a
    family Korral owns a key of (a misspelt ``application.unschedasks.backof``)."""
    import difflib

    out = []
    for key, value in props.items():
        parse = STRICT_PROPERTIES.get(key)
        if parse is not None:
            try:
                parse(value)
            except ValueError as exc:
                out.append(f"property {key}: {exc}")
        elif key.startswith(_STRICT_FAMILIES):
            close = difflib.get_close_matches(key, list(STRICT_PROPERTIES), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(STRICT_PROPERTIES)}"
            out.append(f"property {key}: unknown property ({hint})")
    return out
