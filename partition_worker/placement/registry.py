"""Rule name → rule class, and building a rule (with its parents) from config."""

from __future__ import annotations

from common.config.errors import ConfigError
from common.config.model import PlacementRuleConfig
from common.config.validate import RULE_NAME_RE

from .fixed import FixedRule
from .provided import ProvidedRule
from .rule import Rule
from .tag import TagRule
from .user import UserRule

__all__ = ["RULES", "build_rule", "MAX_PARENT_DEPTH"]

RULES: dict[str, type[Rule]] = {cls.NAME: cls for cls in (ProvidedRule, UserRule, FixedRule, TagRule)}
MAX_PARENT_DEPTH = 32  # same bound as the config loader's MAX_RULE_DEPTH


def build_rule(config: PlacementRuleConfig, depth: int = 0) -> Rule:
    """Build ``config`` and its parent chain (the deepest parent first); raises ``ConfigError``."""
    name = config.name.lower()
    if not RULE_NAME_RE.fullmatch(name):
        raise ConfigError(f"invalid rule name {config.name}, a name must be a valid identifier")
    cls = RULES.get(name)
    if cls is None:
        raise ConfigError(f"unknown rule name specified {config.name}, failing placement rule config")
    if depth > MAX_PARENT_DEPTH:
        raise ConfigError(f"parent rules nested deeper than {MAX_PARENT_DEPTH} levels")
    parent = None
    if config.parent is not None:
        try:
            parent = build_rule(config.parent, depth + 1)
        except ConfigError as exc:
            raise ConfigError([f"parent ({config.parent.name}): {e}" for e in exc.errors]) from None
    return cls(config, parent)
