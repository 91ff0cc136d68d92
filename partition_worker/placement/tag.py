"""``tag``: the queue named by an application tag, e.g. the Kubernetes ``namespace``."""

from __future__ import annotations

from common.config.model import PlacementRuleConfig
from common.config.placement_rules import is_qualified

from .rule import DOT, Rule, replace_dot
from .types import AppPlacementInfo, QueueTree

__all__ = ["TagRule"]


class TagRule(Rule):
    """Tag ``value`` (key lower-cased, looked up case-insensitively). Missing or empty tag: no
    match. A qualified tag value is used as is (parent skipped); otherwise dots are replaced and
    the name goes below the parent rule's result or root."""

    NAME = "tag"
    __slots__ = ("tag_name",)

    def __init__(self, config: PlacementRuleConfig, parent: Rule | None) -> None:
        super().__init__(config, parent)
        self.tag_name = config.value.lower()

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        tag_value = app.tag(self.tag_name).strip()
        if tag_value == "":
            return None
        if not self.allowed(app):
            return None
        queue_name = tag_value
        if not is_qualified(tag_value):
            parent = self.parent_path(app, queues)
            if parent is None:
                return None
            queue_name = f"{parent}{DOT}{replace_dot(tag_value)}"
        return self.finish(queue_name, queues)
