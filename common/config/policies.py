"""Policy names of queues.yaml as enums, parsed in exactly one place.

Each ``parse_*`` takes the text as written and returns the enum; the empty
string gives the documented default. Unknown values raise ``ValueError`` naming
the value, except where YuniKorn falls back silently (``fallback_*``), which the
config loader turns into a warning so ``korral check-config`` can show it.
"""

from __future__ import annotations

from enum import Enum

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
    "PROPERTY_QUOTA_PREEMPTION_DELAY",
]

PROPERTY_APP_SORT_POLICY = "application.sort.policy"
PROPERTY_APP_SORT_PRIORITY = "application.sort.priority"
PROPERTY_PRIORITY_POLICY = "priority.policy"
PROPERTY_PRIORITY_OFFSET = "priority.offset"
PROPERTY_PREEMPTION_POLICY = "preemption.policy"
PROPERTY_PREEMPTION_DELAY = "preemption.delay"
PROPERTY_QUOTA_PREEMPTION_DELAY = "quota.preemption.delay"  # YuniKorn 1.8


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


def parse_app_sort_policy(text: str) -> AppSortPolicy:
    """Exact lower-case names; ``""`` → fifo; unknown raises (the loader warns and YuniKorn uses fifo)."""
    if text == "":
        return AppSortPolicy.FIFO
    try:
        return AppSortPolicy(text)
    except ValueError:
        raise ValueError(f"unknown application sort policy '{text}', fifo is used") from None


def parse_priority_policy(text: str) -> PriorityPolicy:
    if text == "":
        return PriorityPolicy.DEFAULT
    try:
        return PriorityPolicy(text.lower())
    except ValueError:
        raise ValueError(f"unknown priority policy '{text}', default is used") from None


def parse_queue_preemption_policy(text: str) -> QueuePreemptionPolicy:
    if text == "":
        return QueuePreemptionPolicy.DEFAULT
    try:
        return QueuePreemptionPolicy(text.lower())
    except ValueError:
        raise ValueError(f"unknown preemption policy '{text}', default is used") from None
