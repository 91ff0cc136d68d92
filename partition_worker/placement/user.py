"""``user``: a queue named after the submitting user."""

from __future__ import annotations

from .rule import Rule, replace_dot
from .types import AppPlacementInfo, QueueTree

__all__ = ["UserRule"]


class UserRule(Rule):
    """``<parent or root>.<user with dots replaced>``; user ``finance.test`` → ``root.finance_dot_test``."""

    NAME = "user"
    __slots__ = ()

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        if app.user == "" or not self.allowed(app):
            return None
        return self.below_parent(replace_dot(app.user), app, queues)
