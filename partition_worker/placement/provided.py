"""``provided``: the queue named in the application submission."""

from __future__ import annotations

from common.config.placement_rules import is_qualified

from .rule import DOT, Rule, replace_dot
from .types import AppPlacementInfo, QueueTree

__all__ = ["ProvidedRule"]


class ProvidedRule(Rule):
    """A fully qualified name (``root.…``) is used as is and the parent rule is skipped;
    otherwise the name (dots replaced) goes below the parent rule's result or root."""

    NAME = "provided"
    __slots__ = ()

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str | None:
        queue_name = app.queue_name.strip()
        if queue_name == "":
            return None
        if not self.allowed(app):
            return None
        # Korral: "ROOT.a" counts as qualified too (YuniKorn compares "root." case-sensitively
        # although every queue lookup is case-insensitive).
        if not is_qualified(queue_name):
            parent = self.parent_path(app, queues)
            if parent is None:
                return None
            queue_name = f"{parent}{DOT}{replace_dot(queue_name)}"
        return self.finish(queue_name, queues)
