"""``provided``: the queue named in the application submission."""

from __future__ import annotations

from .rule import Rule
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
        return self.place_named(queue_name, app, queues)
