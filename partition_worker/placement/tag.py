"""``tag``: the queue named by an application tag, e.g. the Kubernetes ``namespace``."""

from __future__ import annotations

from common.config.model import PlacementRuleConfig

from .rule import Rule
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
        return self.place_named(tag_value, app, queues)
