"""``fixed``: always the queue configured in ``value``."""

from __future__ import annotations

from common.config.model import PlacementRuleConfig
from common.config.placement_rules import is_qualified

from .rule import Rule
from .types import AppPlacementInfo, QueueTree

__all__ = ["FixedRule"]


class FixedRule(Rule):
    """``value`` may be a hierarchy (``a.b``, dots kept). Qualified (``root…``): used as is, and a
    parent rule is a config error; otherwise it goes below the parent rule's result or root."""

    NAME = "fixed"
    __slots__ = ("queue", "qualified")

    def __init__(self, config: PlacementRuleConfig, parent: Rule | None) -> None:
        super().__init__(config, parent)
        self.queue = config.value.lower()  # checked by rule_errors: set, and no parent when qualified
        self.qualified = is_qualified(self.queue)

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        if not self.allowed(app):
            return None
        if self.qualified:
            return self.finish(self.queue, queues)
        return self.below_parent(self.queue, app, queues)
