"""The placement manager: runs the rule chain for an application (seed 001).

Rules run in order; the first whose result is usable wins. A result is usable
when the queue exists, is a leaf and grants submit access (submit or admin ACL,
up to root); or when it does not exist yet (the rule had ``create: true``), its
new names are valid queue names, and the deepest existing ancestor is a parent
that grants submit access. Otherwise the next rule runs. No rule left:
``application rejected: no placement rule matched``.

Korral departs from YuniKorn v1.2 so that a rule whose queue cannot take the
application falls through to the next rule instead of failing the application
later in the core: a result under an existing LEAF queue, with an invalid queue
name (e.g. a user name with a space), or in/under a queue that is draining
(``accepts_new_work`` false, an optional attribute of ``QueueNode``) does not match.
"""

from __future__ import annotations

from typing import Sequence

from common.config.errors import ConfigError
from common.config.model import PlacementRuleConfig
from common.config.placement_rules import is_qualified
from common.config.validate import QUEUE_NAME_RE

from .registry import build_rule
from .rule import DOT, ROOT, Rule
from .types import AppPlacementInfo, PlacementError, QueueTree

__all__ = ["PlacementManager", "NO_RULE_MATCHED"]

NO_RULE_MATCHED = "application rejected: no placement rule matched"


class PlacementManager:
    """Holds the active rule set of one partition.

    ``PlacementManager(rules)`` raises ``ConfigError`` for a bad rule set; with
    no rules it is not initialised (the core then uses the app's queue as is).
    """

    __slots__ = ("_rules",)

    def __init__(self, rules: Sequence[PlacementRuleConfig] = ()) -> None:
        self._rules: tuple[Rule, ...] = _build(rules)

    @property
    def initialised(self) -> bool:
        return bool(self._rules)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    def update_rules(self, rules: Sequence[PlacementRuleConfig]) -> None:
        """Replace the rule set. A bad set raises ``ConfigError`` and changes nothing:
        an initialised manager keeps placing with the old rules, an uninitialised
        one stays uninitialised (the caller reports it: this package does not log).
        An empty set makes the manager uninitialised."""
        self._rules = _build(rules)

    def place(self, app: AppPlacementInfo, queues: QueueTree) -> str:
        """The full lower-case queue path for ``app``; it may not exist yet (the core creates it).

        Raises ``PlacementError`` when no rule matches or a rule fails. An
        uninitialised manager returns the app's own queue, qualified with root.
        """
        if not self._rules:
            name = app.queue_name.strip().lower()
            return name if is_qualified(name) else f"{ROOT}{DOT}{name}"
        for rule in self._rules:
            queue_name = rule.place(app, queues)
            if queue_name and _usable(queue_name.lower(), app, queues):
                return queue_name.lower()
        raise PlacementError(NO_RULE_MATCHED)


def _build(rules: Sequence[PlacementRuleConfig]) -> tuple[Rule, ...]:
    built: list[Rule] = []
    errors: list[str] = []
    for index, config in enumerate(rules):
        try:
            built.append(build_rule(config))
        except ConfigError as exc:
            errors.extend(f"placement rule {index + 1} ({config.name}): {e}" for e in exc.errors)
    if errors:
        raise ConfigError(errors)
    return tuple(built)


def _usable(queue_name: str, app: AppPlacementInfo, queues: QueueTree) -> bool:
    node = queues.find(queue_name)
    if node is not None:
        return node.is_leaf and _open(node) and node.check_submit_access(app.user, app.groups)
    parts = queue_name.split(DOT)
    if parts[0] != ROOT or not all(QUEUE_NAME_RE.fullmatch(p) for p in parts[1:]):
        return False
    for depth in range(len(parts) - 1, 0, -1):
        ancestor = queues.find(DOT.join(parts[:depth]))
        if ancestor is not None:
            return not ancestor.is_leaf and _open(ancestor) and ancestor.check_submit_access(app.user, app.groups)
    return False


def _open(node: object) -> bool:
    """A draining or stopped queue (optional ``accepts_new_work`` attribute) takes no new apps.

    Korral: YuniKorn v1.2 still places into a draining queue; here the next rule runs instead.
    """
    return bool(getattr(node, "accepts_new_work", True))
