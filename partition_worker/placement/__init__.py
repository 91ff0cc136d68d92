"""Placement of applications into queues: the rule chain of seed 001 and group resolution.

Public surface::

    PlacementManager(rules)            # ConfigError on a bad rule set
    manager.initialised / update_rules(rules) / place(app, queues) -> str
    AppPlacementInfo, QueueTree, QueueNode, PlacementError
    GroupResolver(lookup, positive_ttl_s=300, negative_ttl_s=30).resolve(user, groups, now_ns)
    GroupLookupError (a lookup that failed: LDAP down; the app is rejected, nothing cached)
    no_lookup (YuniKorn v1.2's resolver; the worker injects its OS lookup, ``partition_worker.os_groups``)

No I/O, clock or logging: the package is part of the pure core's import graph.
    RULES (name -> rule class), replace_dot
"""

from .filter import Filter
from .groups import GroupLookupError, GroupResolver, no_lookup
from .manager import NO_RULE_MATCHED, PlacementManager
from .registry import RULES, build_rule
from .rule import Rule, replace_dot
from .types import AppPlacementInfo, PlacementError, QueueNode, QueueTree

__all__ = [
    "AppPlacementInfo",
    "Filter",
    "GroupLookupError",
    "GroupResolver",
    "NO_RULE_MATCHED",
    "PlacementError",
    "PlacementManager",
    "QueueNode",
    "QueueTree",
    "RULES",
    "Rule",
    "build_rule",
    "no_lookup",
    "replace_dot",
]
