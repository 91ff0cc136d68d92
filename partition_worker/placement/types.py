"""What placement needs from the rest of the worker, and what it gives back.

``AppPlacementInfo`` is the application as the rules see it. ``QueueTree`` and
``QueueNode`` are the edge to the scheduling core: the core's queue objects
implement them, unit tests use a small fake. ``PlacementError`` carries
YuniKorn's reason for a placement that must fail the application outright (as
opposed to "this rule did not match", which is ``None`` inside the rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

__all__ = ["AppPlacementInfo", "QueueNode", "QueueTree", "PlacementError"]


@dataclass(frozen=True, slots=True)
class AppPlacementInfo:
    """The facts the rules use. ``groups`` are already resolved (see ``GroupResolver``)."""

    application_id: str
    queue_name: str
    user: str
    groups: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)

    def tag(self, key: str) -> str:
        """The tag ``key`` (exact key first, then case-insensitive, as YuniKorn); "" when absent."""
        value = self.tags.get(key)
        if value is not None:
            return value
        lowered = key.lower()
        for k, v in self.tags.items():
            if k.lower() == lowered:
                return v
        return ""


class QueueNode(Protocol):
    """A queue as placement sees it. May also have ``accepts_new_work: bool`` (False while the
    queue is draining); placement skips such queues and treats a missing attribute as True."""

    path: str
    is_leaf: bool
    parent: "QueueNode | None"

    def check_submit_access(self, user: str, groups: Sequence[str]) -> bool:
        """Submit or admin ACL on this queue or any ancestor up to root allows ``user``."""
        ...


class QueueTree(Protocol):
    def find(self, path: str) -> QueueNode | None:
        """The queue at the full dotted ``path`` (case-insensitive), or None."""
        ...


class PlacementError(Exception):
    """Placement failed for good; ``reason`` is YuniKorn's message (the core prefixes it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
