"""``user``: a queue named after the submitting user."""

from __future__ import annotations

from .rule import DOT, Rule, replace_dot
from .types import AppPlacementInfo, QueueTree

__all__ = ["UserRule"]


class UserRule(Rule):
    """``<parent or root>.<user with dots replaced>``; user ``finance.test`` → ``root.finance_dot_test``."""

    NAME = "user"
    __slots__ = ()

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        if app.user == "" or not self.allowed(app):
            return None
        parent = self.parent_path(app, queues)
        if parent is None:
            return None
        return self.finish(f"{parent}{DOT}{replace_dot(app.user)}", queues)
