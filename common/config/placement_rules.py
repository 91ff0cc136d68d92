"""Placement rules as config: their names and the checks of their parameters, in one place.

The config validator reports these faults for every rule; the placement package
(``partition_worker.placement``) maps the same names to its rule classes and builds a rule
only from a config that passed ``rule_errors`` (the classes check nothing again).
"""

from __future__ import annotations

import re

from common.acl import GROUP_NAME_RE, USER_NAME_RE
from common.config.model import PlacementRuleConfig
from common.config.policies import parse_filter_type

__all__ = ["RULE_NAMES", "RULE_NAME_RE", "QUEUE_PART_RE", "FILTER_REGEXP_CHARS", "MAX_PARENT_DEPTH", "rule_errors",
           "is_qualified"]

RULE_NAMES = ("provided", "user", "fixed", "tag")
RULE_NAME_RE = re.compile(r"[_a-zA-Z][a-zA-Z0-9_]*")
QUEUE_PART_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# A single filter entry with one of these is a regular expression (YuniKorn's filter.go).
FILTER_REGEXP_CHARS = frozenset("^$*+?()[{}|")
MAX_PARENT_DEPTH = 32  # nested parent rules below a top-level rule (the loader's MAX_RULE_DEPTH)


def is_qualified(queue_name: str) -> bool:
    """A queue name is fully qualified when it is root or starts with ``root.`` (case-insensitive).

    Korral: YuniKorn v1.2 tests the bare prefix ``root`` for the fixed rule, so a
    value like ``rootbeer`` counts as qualified there; here it is a child of root.
    """
    lowered = queue_name.lower()
    return lowered == "root" or lowered.startswith("root.")


def rule_errors(rule: PlacementRuleConfig, where: str) -> list[str]:
    """Every fault of one placement rule and its parents; ``where`` names the rule."""
    errors: list[str] = []
    if not RULE_NAME_RE.fullmatch(rule.name):
        errors.append(f"{where}: invalid rule name {rule.name}, a name must be a valid identifier")
    elif rule.name not in RULE_NAMES:
        # Korral: YuniKorn's validator lets an unknown rule through and the partition then runs
        # without rules (logged only); rejecting here keeps a typo from silently changing placement.
        errors.append(f"{where}: unknown rule name specified {rule.name}, failing placement rule config")
    try:
        parse_filter_type(rule.filter.type)
    except ValueError as exc:
        errors.append(f"{where}: {exc}")
    errors.extend(_check_filter_list(rule.filter.users, "user", USER_NAME_RE, where))
    errors.extend(_check_filter_list(rule.filter.groups, "group", GROUP_NAME_RE, where))
    if rule.name == "fixed":
        if rule.value == "":
            errors.append(f"{where}: a fixed queue rule must have a queue name set")
        else:
            if is_qualified(rule.value) and rule.parent is not None:
                errors.append(
                    f"{where}: cannot have a fixed queue rule with qualified queue name and a parent rule: {rule.value}"
                )
            for part in rule.value.split("."):
                if not QUEUE_PART_RE.fullmatch(part):
                    errors.append(f"{where}: invalid queue name '{part}' in fixed rule value '{rule.value}'")
                    break
    if rule.name == "tag" and rule.value == "":
        errors.append(f"{where}: a tag queue rule must have a tag name set")
    if rule.parent is not None:
        errors.extend(rule_errors(rule.parent, f"{where} parent ({rule.parent.name})"))
    return errors


def _check_filter_list(entries: tuple[str, ...], kind: str, name_re: re.Pattern[str], where: str) -> list[str]:
    """One entry: a name or a regular expression that compiles; two or more: names only.

    Korral: YuniKorn does not validate lists of two or more and drops bad entries
    at run time; the issue asks for a regexp beside list entries to be an error.
    """
    if len(entries) == 1:
        entry = entries[0]
        if name_re.fullmatch(entry) and not FILTER_REGEXP_CHARS.intersection(entry):
            return []
        if FILTER_REGEXP_CHARS.intersection(entry):
            try:
                re.compile(entry)
                return []
            except re.error:
                pass
        return [f"{where}: invalid rule filter {kind} list is not a proper list or regexp: [{entry}]"]
    return [
        f"{where}: invalid rule filter {kind} list: '{e}' is not a valid {kind} name "
        "(a regular expression is only allowed as the single entry)"
        for e in dict.fromkeys(entries)
        if not name_re.fullmatch(e)
    ]
