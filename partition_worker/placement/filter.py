"""A rule's user/group filter, run-time semantics of YuniKorn's placement filter.

* No users and no groups configured: the filter returns its type (allow lets
  everyone through, deny stops everyone). A filter with entries that were all
  ignored is NOT empty: nobody matches it.
* The user is checked first, then each group on its own; the first hit returns
  the filter type's answer (allow → pass, deny → stop); no hit returns the
  opposite.
* One entry: with a regexp character (``^$*+?()[{}|``) it is a regular
  expression searched anywhere in the name (like Go's ``MatchString``) and
  ignored when it does not compile; otherwise an exact name when it is a valid
  user/group name, else ignored. Two or more entries: exact names, invalid ones
  dropped, duplicates ignored.

The config validator rejects the entries this class silently ignores, so a
filter built from ``load_config`` output never loses an entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from common.acl import GROUP_NAME_RE, USER_NAME_RE
from common.config.model import FilterConfig
from common.config.policies import FilterType, parse_filter_type
from common.config.errors import ConfigError
from common.config.placement_rules import FILTER_REGEXP_CHARS

__all__ = ["Filter"]


@dataclass(frozen=True, slots=True)
class Filter:
    allow: bool = True
    users: frozenset[str] = frozenset()
    user_exp: re.Pattern[str] | None = None
    groups: frozenset[str] = frozenset()
    group_exp: re.Pattern[str] | None = None
    empty: bool = True  # no user or group entries configured at all

    @classmethod
    def from_config(cls, config: FilterConfig) -> "Filter":
        """Build from config; raises ``ConfigError`` only for an unknown filter type."""
        try:
            kind = parse_filter_type(config.type)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        users, user_exp = _entries(config.users, USER_NAME_RE)
        groups, group_exp = _entries(config.groups, GROUP_NAME_RE)
        empty = not config.users and not config.groups
        return cls(kind is FilterType.ALLOW, users, user_exp, groups, group_exp, empty)

    def allows(self, user: str, groups: Sequence[str]) -> bool:
        """True when the rule may run for this user and these groups."""
        if self.empty:
            return self.allow
        if user in self.users or (self.user_exp is not None and self.user_exp.search(user)):
            return self.allow
        for group in groups:
            if group in self.groups or (self.group_exp is not None and self.group_exp.search(group)):
                return self.allow
        return not self.allow


def _entries(entries: Sequence[str], name_re: re.Pattern[str]) -> tuple[frozenset[str], re.Pattern[str] | None]:
    if len(entries) == 1:
        entry = entries[0]
        if FILTER_REGEXP_CHARS.intersection(entry):
            try:
                return frozenset(), re.compile(entry)
            except re.error:
                return frozenset(), None  # seed 001: a regexp that does not compile is ignored
        if name_re.fullmatch(entry):
            return frozenset((entry,)), None
        return frozenset(), None
    return frozenset(e for e in entries if name_re.fullmatch(e)), None
