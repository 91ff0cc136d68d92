"""Rule name → rule class, and building a rule (with its parents) from config.

The names and the checks of each rule's parameters live in ``common.config.placement_rules``
(the config validator uses the same checks); this registry maps each name to its class and
builds a rule only from a config that passes them.
"""

from __future__ import annotations

from dataclasses import replace

from common.config.errors import ConfigError
from common.config.model import PlacementRuleConfig
from common.config.placement_rules import MAX_PARENT_DEPTH, RULE_NAMES, rule_errors

from .fixed import FixedRule
from .provided import ProvidedRule
from .rule import Rule
from .tag import TagRule
from .user import UserRule

__all__ = ["RULES", "build_rule", "MAX_PARENT_DEPTH"]

RULES: dict[str, type[Rule]] = {cls.NAME: cls for cls in (ProvidedRule, UserRule, FixedRule, TagRule)}
assert tuple(RULES) == RULE_NAMES, "every configurable rule name needs its class, and no more"


def build_rule(config: PlacementRuleConfig, depth: int = 0) -> Rule:
    """Build ``config`` and its parent chain (the deepest parent first); raises ``ConfigError``
    with the faults ``rule_errors`` finds. Names are case-insensitive (the loader lower-cases
    them; a config built by hand may not)."""
    if depth > MAX_PARENT_DEPTH:
        raise ConfigError(f"parent rules nested deeper than {MAX_PARENT_DEPTH} levels")
    if config.name != config.name.lower():
        config = replace(config, name=config.name.lower())
    errors = [e.removeprefix(": ") for e in rule_errors(config, "")]
    if errors:
        raise ConfigError(errors)
    parent = build_rule(config.parent, depth + 1) if config.parent is not None else None
    return RULES[config.name](config, parent)

