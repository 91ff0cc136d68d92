"""The core's side of placement, on ``partition_worker.placement``.

Without placement rules the manager is "not initialised" and the core uses the
app's queueName verbatim, which must name an existing leaf (YuniKorn). Groups
come from the injected lookup, else YuniKorn's default resolver: the groups
given, or ``[user]`` when there are none.
"""

from __future__ import annotations

from typing import Sequence

from common.config.model import PlacementRuleConfig

__all__ = ["PlacementBridge", "PlacementError", "GroupLookupError"]

from common.config.errors import ConfigError
from partition_worker.placement import (AppPlacementInfo, GroupLookupError, GroupResolver,
                                        PlacementError, PlacementManager, no_lookup)


class PlacementBridge:
    __slots__ = ("_manager", "_resolver", "_rules", "error")

    def __init__(self, rules: Sequence[PlacementRuleConfig], group_lookup=None) -> None:
        self._rules = tuple(rules)
        self._manager = None
        self.error = ""  # why the rules at creation could not be built (manager uninitialised)
        # the lookup is injected (the OS lookup lives in the worker shell); without one, YuniKorn
        # v1.2's default resolver knows nobody
        self._resolver = GroupResolver(lookup=group_lookup or no_lookup)
        if rules:
            try:
                self._manager = PlacementManager(tuple(rules))
            except ConfigError as exc:  # YuniKorn logs it and runs without placement
                self.error = str(exc)

    @property
    def initialised(self) -> bool:
        m = self._manager
        return m is not None and bool(getattr(m, "initialised", True))

    def set_lookup(self, group_lookup) -> None:
        """A new group lookup (the partition's usergroupresolver changed): the cache starts empty."""
        self._resolver = GroupResolver(lookup=group_lookup or no_lookup)

    @staticmethod
    def check_rules(rules: Sequence[PlacementRuleConfig]) -> None:
        """Raises ``ConfigError`` (from the manager) when ``update_rules`` would refuse ``rules``."""
        if rules:
            PlacementManager(tuple(rules))
    @property
    def rules(self) -> tuple:
        """The built rules in effect (``placement.Rule``), in order; empty when uninitialised."""
        return self._manager.rules if self.initialised else ()

    def update_rules(self, rules: Sequence[PlacementRuleConfig]) -> None:
        """Raises ``ConfigError`` (from the manager) and keeps the old rules on a bad set."""
        if self._manager is None:
            if rules:
                self._manager = PlacementManager(tuple(rules))
        else:
            self._manager.update_rules(tuple(rules))
        self._rules = tuple(rules)

    def resolve_groups(self, user: str, groups: Sequence[str], now: int) -> tuple[str, ...]:
        return tuple(self._resolver.resolve(user, groups, now))

    def place(self, cmd, groups: tuple[str, ...], queues) -> str:
        """Full lower-case queue path; raises PlacementError with YuniKorn's message."""
        info = AppPlacementInfo(cmd.app_id, cmd.queue, cmd.user, groups, dict(cmd.tags))
        return self._manager.place(info, queues)
