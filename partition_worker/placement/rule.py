"""The contract every placement rule follows, and the steps they share.

A rule is built from its ``PlacementRuleConfig`` (config errors are raised
there, as ``ConfigError``) and answers ``place(app, queues) -> str | None``:
a fully qualified, lower-case queue path, ``None`` for "no match, try the next
rule", or ``PlacementError`` when the whole placement must fail.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from common.config.model import PlacementRuleConfig
from common.config.placement_rules import is_qualified

from .filter import Filter
from .types import AppPlacementInfo, PlacementError, QueueTree

__all__ = ["Rule", "replace_dot", "ROOT", "DOT", "DOT_REPLACEMENT"]

ROOT = "root"
DOT = "."
DOT_REPLACEMENT = "_dot_"


def replace_dot(name: str) -> str:
    """A user name or tag value may contain dots; they must not create hierarchy levels."""
    return name.replace(DOT, DOT_REPLACEMENT)


class Rule(ABC):
    """Base of the four rules: filter, optional parent rule, create flag."""

    NAME: ClassVar[str]
    __slots__ = ("create", "filter", "parent", "value")

    def __init__(self, config: PlacementRuleConfig, parent: "Rule | None") -> None:
        self.create = config.create
        self.filter = Filter.from_config(config.filter)
        self.parent = parent
        self.value = config.value

    @abstractmethod
    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        """The queue for ``app``, ``None`` for no match; raises ``PlacementError``."""

    def allowed(self, app: AppPlacementInfo) -> bool:
        return self.filter.allows(app.user, app.groups)

    def parent_path(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        """Where this rule's queue hangs: root without a parent rule, else the parent rule's result.

        ``None`` when the parent rule did not match. A parent that exists as a
        leaf fails the placement (YuniKorn: ``parent rule returned a leaf queue``);
        a parent that does not exist yet is fine when this rule creates.
        """
        if self.parent is None:
            return ROOT
        name = self.parent.place(app, queues)
        if not name:
            return None
        name = name.lower()
        if not is_qualified(name):
            name = f"{ROOT}{DOT}{name}"
        node = queues.find(name)
        if node is not None and node.is_leaf:
            raise PlacementError(f"parent rule returned a leaf queue: {name}")
        return name

    def below_parent(self, name: str, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        """``name`` below the parent rule's result or root, then ``finish``; ``None`` when the
        parent rule did not match."""
        parent = self.parent_path(app, queues)
        if parent is None:
            return None
        return self.finish(f"{parent}{DOT}{name}", queues)

    def place_named(self, name: str, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        """A name the application gave (its queue, a tag value): used as is when qualified (the
        parent rule is skipped), else with its dots replaced below the parent's result or root."""
        if is_qualified(name):
            return self.finish(name, queues)
        return self.below_parent(replace_dot(name), app, queues)

    def finish(self, queue_name: str, queues: QueueTree) -> str | None:
        """Apply the create flag: a queue that does not exist matches only with ``create: true``."""
        queue_name = queue_name.lower()
        if not self.create and queues.find(queue_name) is None:
            return None
        return queue_name

    def __repr__(self) -> str:
        parent = f", parent={self.parent!r}" if self.parent is not None else ""
        return f"{type(self).__name__}(create={self.create}, value={self.value!r}{parent})"
