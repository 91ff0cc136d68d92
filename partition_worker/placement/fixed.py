"""``fixed``: always the queue configured in ``value``."""

from __future__ import annotations

from common.config.errors import ConfigError
from common.config.model import PlacementRuleConfig
from common.config.validate import is_qualified

from .rule import DOT, Rule
from .types import AppPlacementInfo, QueueTree

__all__ = ["FixedRule"]


class FixedRule(Rule):
    """``value`` may be a hierarchy (``a.b``, dots kept). Qualified (``root…``): used as is, and a
    parent rule is a config error; otherwise it goes below the parent rule's result or root."""

    NAME = "fixed"
    __slots__ = ("queue", "qualified")

    def __init__(self, config: PlacementRuleConfig, parent: Rule | None) -> None:
        super().__init__(config, parent)
        if config.value == "":
            raise ConfigError("a fixed queue rule must have a queue name set")
        self.queue = config.value.lower()
        self.qualified = is_qualified(self.queue)
        if self.qualified and parent is not None:
            raise ConfigError(
                f"cannot have a fixed queue rule with qualified queue name and a parent rule: {config.value}"
            )

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        if not self.allowed(app):
            return None
        queue_name = self.queue
        if not self.qualified:
            parent = self.parent_path(app, queues)
            if parent is None:
                return None
            queue_name = f"{parent}{DOT}{self.queue}"
        return self.finish(queue_name, queues)
