"""Semantic validation of one partition of the typed model (YuniKorn's configvalidator, corrected).

``validate_partition(partition) -> (errors, warnings)``. Messages keep
YuniKorn's wording (so they can be searched for) and start with the partition
and the queue, rule or limit concerned. Departures from v1.2 are listed in
docs/configuration.md; each one is marked "Korral:" below.
"""

from __future__ import annotations

import re
from typing import Mapping

from common.acl import ACL, GROUP_NAME_RE, USER_NAME_RE
from common.config.model import LimitConfig, PartitionConfig, PlacementRuleConfig, QueueConfig
from common.config.policies import (
    PROPERTY_APP_SORT_POLICY,
    PROPERTY_PREEMPTION_DELAY,
    PROPERTY_PREEMPTION_POLICY,
    PROPERTY_PRIORITY_OFFSET,
    PROPERTY_PRIORITY_POLICY,
    PROPERTY_APP_SORT_PRIORITY,
    parse_app_sort_policy,

    parse_node_sort_policy,
    parse_priority_policy,
    parse_queue_preemption_policy,
    property_errors,
    USER_GROUP_RESOLVERS,
)
from common.config.placement_rules import QUEUE_PART_RE, is_qualified, rule_errors
from common.config.quantity import format_resources

__all__ = ["validate_partition", "QUEUE_NAME_RE", "PARTITION_NAME_RE", "is_qualified"]

QUEUE_NAME_RE = QUEUE_PART_RE
# Korral: YuniKorn accepts any partition name; routing writes them as "[rmID]name", so brackets,
# spaces and control characters would make ambiguous or unprintable routes.
PARTITION_NAME_RE = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
_DURATION_RE = re.compile(r"(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))*")
_INT32 = (-(2**31), 2**31 - 1)


def validate_partition(partition: PartitionConfig) -> tuple[list[str], list[str]]:
    """All semantic faults of ``partition`` (errors) and non-fatal findings (warnings)."""
    errors: list[str] = []
    warnings: list[str] = []
    where = f"partition {partition.name}"
    if not PARTITION_NAME_RE.fullmatch(partition.name):
        errors.append(
            f"{where}: invalid partition name {partition.name!r}, a name must only have alphanumeric "
            "characters, ., - or _, and be no longer than 64 characters"
        )
    if partition.queues:
        root = partition.root
        if root.resources.guaranteed or root.resources.max:
            errors.append(f"{where}, queue root: root queue must not have resource limits set")
        _check_queue(root, "root", {}, where, errors, warnings)
    for i, rule in enumerate(partition.placementrules):
        errors.extend(rule_errors(rule, f"{where}, placement rule {i + 1} ({rule.name})"))
        if rule.name in ("provided", "user") and rule.value:
            warnings.append(f"{where}, placement rule {i + 1} ({rule.name}): value is ignored by the {rule.name} rule")
    for i, limit in enumerate(partition.limits):
        errors.extend(_check_limit(limit, f"{where}, limit {i + 1}"))
    if partition.queues:
        for i, rule in enumerate(partition.placementrules):
            warnings.extend(_check_static_path(rule, partition.root, f"{where}, placement rule {i + 1} ({rule.name})"))
    try:
        parse_node_sort_policy(partition.nodesortpolicy.type)
    except ValueError as exc:
        errors.append(f"{where}: nodesortpolicy: {exc}")
    if partition.usergroupresolver.type not in USER_GROUP_RESOLVERS:
        errors.append(f"{where}: usergroupresolver.type: unknown resolver '{partition.usergroupresolver.type}', "
                      "use os or ldap (empty: the worker's --group-lookup)")
    for name, weight in partition.nodesortpolicy.resourceweights.items():
        if weight < 0:
            errors.append(f"{where}: nodesortpolicy: negative resource weight for {name} is not allowed")
    errors.extend(_check_topology(partition.topology.levels, where))
    return errors, warnings


def _check_topology(levels, where: str) -> list[str]:
    """Korral's topology levels: each named and labelled, names and labels distinct, ``host``
    left to the implicit last level."""
    errors = []
    names: set[str] = set()
    labels: set[str] = set()
    for i, lv in enumerate(levels):
        at = f"{where}: topology level {i + 1}" + (f" ({lv.name})" if lv.name else "")
        if not lv.name:
            errors.append(f"{at}: name is required")
        elif lv.name == "host":
            errors.append(f"{at}: name host is reserved for the implicit last level (each node)")
        elif lv.name in names:
            errors.append(f"{at}: duplicate level name {lv.name}")
        if not lv.label:
            errors.append(f"{at}: label is required (the node attribute or label the level is read from)")
        elif lv.label in labels:
            errors.append(f"{at}: label {lv.label} is already used by another level")
        names.add(lv.name)
        labels.add(lv.label)
    return errors


def _check_queue(
    queue: QueueConfig,
    path: str,
    parent_max: Mapping[str, int],
    where: str,
    errors: list[str],
    warnings: list[str],
) -> Mapping[str, int]:
    """Check ``queue`` and its subtree; returns the guaranteed it claims from its parent.

    ``parent_max`` is the effective max above: the component-wise min down the
    tree, where a level without a type inherits it (YuniKorn's permissive min).
    A queue without guaranteed passes its children's sum upward.
    """
    qwhere = f"{where}, queue {path}"
    for key in ("submitacl", "adminacl"):
        text = getattr(queue, key)
        try:
            acl = ACL.parse(text)
        except ValueError as exc:
            errors.append(f"{qwhere}: {key}: {exc}")
        else:
            if acl.dropped:
                warnings.append(f"{qwhere}: {key}: invalid names ignored: {', '.join(acl.dropped)}")
    _check_properties(queue.properties, qwhere, warnings)
    errors.extend(f"{qwhere}: {e}" for e in property_errors(queue.properties))
    guaranteed, maximum = queue.resources.guaranteed, queue.resources.max
    if any(guaranteed.get(k, 0) > v for k, v in maximum.items()):
        errors.append(
            f"{qwhere}: guaranteed resource {format_resources(guaranteed)} is larger than "
            f"maximum resource {format_resources(maximum)} for queue {path}"
        )
    if any(v > parent_max[k] for k, v in maximum.items() if k in parent_max):
        errors.append(
            f"{qwhere}: max resource of parent {format_resources(parent_max)} is smaller than "
            f"maximum resource {format_resources(maximum)} for queue {path}"
        )
    effective_max = dict(parent_max)
    for k, v in maximum.items():
        effective_max[k] = min(v, effective_max.get(k, v))
    if queue.childtemplate is not None:
        tg, tm = queue.childtemplate.resources.guaranteed, queue.childtemplate.resources.max
        if any(tg.get(k, 0) > v for k, v in tm.items()):
            errors.append(
                f"{qwhere}: childtemplate: guaranteed resource {format_resources(tg)} is larger than "
                f"maximum resource {format_resources(tm)}"
            )
        _check_properties(queue.childtemplate.properties, f"{qwhere}: childtemplate", warnings)
        errors.extend(f"{qwhere}: childtemplate: {e}" for e in property_errors(queue.childtemplate.properties))
        if not queue.is_parent:
            warnings.append(f"{qwhere}: childtemplate on a leaf queue is ignored")
    for i, limit in enumerate(queue.limits):
        errors.extend(_check_limit(limit, f"{qwhere}, limit {i + 1}"))

    seen: set[str] = set()
    children_sum: dict[str, int] = {}
    for child in queue.queues:
        child_path = f"{path}.{child.name}"
        if child.name and not QUEUE_NAME_RE.fullmatch(child.name):  # a missing name is reported by the loader
            errors.append(
                f"{where}, queue {child_path}: invalid child name {child.name}, a name must only have "
                "alphanumeric characters, - or _, and be no longer than 64 characters"
            )
        if child.name in seen:
            errors.append(
                f"{where}, queue {child_path}: duplicate child name found with name {child.name}, "
                f"level {path.count('.') + 1}"
            )
        seen.add(child.name)
        if queue.maxapplications != 0 and (
            child.maxapplications == 0 or child.maxapplications > queue.maxapplications
        ):
            errors.append(
                f"{where}, queue {child_path}: parent maxRunningApps must be larger than child maxRunningApps "
                f"(parent {path}: {queue.maxapplications}, child: {child.maxapplications or 'unlimited'})"
            )
        for k, v in _check_queue(child, child_path, effective_max, where, errors, warnings).items():
            children_sum[k] = children_sum.get(k, 0) + v
    if children_sum:
        # YuniKorn's FitIn: a type the parent does not guarantee counts as 0 there.
        if guaranteed and any(v > guaranteed.get(k, 0) for k, v in children_sum.items()):
            errors.append(
                f"{qwhere}: guaranteed resource of parent {format_resources(guaranteed)} is smaller than sum of "
                f"guaranteed resources {format_resources(children_sum)} of the children for queue {path}"
            )
        if any(children_sum.get(k, 0) > v for k, v in effective_max.items()):
            errors.append(
                f"{qwhere}: max resource {format_resources(effective_max)} is smaller than sum of "
                f"guaranteed resources {format_resources(children_sum)} of the children for queue {path}"
            )
    return guaranteed if guaranteed else children_sum


def _check_properties(props: Mapping[str, str], where: str, warnings: list[str]) -> None:
    """Property values YuniKorn silently replaces by a default: reported as warnings, not errors."""
    checks = {
        PROPERTY_APP_SORT_POLICY: parse_app_sort_policy,
        PROPERTY_PRIORITY_POLICY: parse_priority_policy,
        PROPERTY_PREEMPTION_POLICY: parse_queue_preemption_policy,
    }
    for key, parse in checks.items():
        if key in props:
            try:
                parse(props[key])
            except ValueError as exc:
                warnings.append(f"{where}: property {key}: {exc}")
    if PROPERTY_APP_SORT_PRIORITY in props and props[PROPERTY_APP_SORT_PRIORITY].lower() not in ("enabled", "disabled"):
        warnings.append(f"{where}: property {PROPERTY_APP_SORT_PRIORITY}: unknown value '{props[PROPERTY_APP_SORT_PRIORITY]}', enabled is used")
    if PROPERTY_PRIORITY_OFFSET in props:
        text = props[PROPERTY_PRIORITY_OFFSET].strip()
        try:
            ok = _INT32[0] <= int(text) <= _INT32[1]
        except ValueError:
            ok = False
        if not ok:
            warnings.append(f"{where}: property {PROPERTY_PRIORITY_OFFSET}: '{text}' is not a 32-bit integer, 0 is used")
    if PROPERTY_PREEMPTION_DELAY in props and not _DURATION_RE.fullmatch(props[PROPERTY_PREEMPTION_DELAY].strip()):
        warnings.append(f"{where}: property {PROPERTY_PREEMPTION_DELAY}: '{props[PROPERTY_PREEMPTION_DELAY]}' is not a duration, 30s is used")


def _check_limit(limit: LimitConfig, where: str) -> list[str]:
    errors: list[str] = []
    if not limit.users and not limit.groups:
        errors.append(f"{where}: empty user and group lists defined in limit '{limit.limit}'")
    for user in limit.users:
        if user != "*" and not USER_NAME_RE.fullmatch(user):
            errors.append(f"{where}: invalid limit user name '{user}' in limit definition")
    for group in limit.groups:
        if group != "*" and not GROUP_NAME_RE.fullmatch(group):
            errors.append(f"{where}: invalid limit group name '{group}' in limit definition")
    if limit.maxapplications == 0 and not any(v > 0 for v in limit.maxresources.values()):
        names = ",".join(limit.users + limit.groups)
        errors.append(f"{where}: invalid resource combination for limit names '{names}' all resource limits are null")
    return errors


def _static_path(rule: PlacementRuleConfig) -> str | None:
    """The queue a chain of ``fixed`` rules always gives, or None when any rule depends on the app."""
    if rule.name != "fixed" or not rule.value:
        return None
    value = rule.value.lower()
    if is_qualified(value):
        return value
    if rule.parent is None:
        return f"root.{value}"
    parent = _static_path(rule.parent)
    return None if parent is None else f"{parent}.{value}"


def _check_static_path(rule: PlacementRuleConfig, root: QueueConfig, where: str) -> list[str]:
    """Warnings for a fixed-rule chain that can never match the configured queues (YuniKorn 1.4+
    rejects these; Korral warns, since dynamic queues made by other rules may still appear)."""
    path = _static_path(rule)
    if path is None:
        return []
    node: QueueConfig | None = root
    parts = path.split(".")
    for depth, name in enumerate(parts[1:], start=1):
        if not node.is_parent:
            prefix = ".".join(parts[:depth])
            return [f"{where}: references queue {path} below {prefix}, which is a leaf: the rule can never place an application"]
        node = next((q for q in node.queues if q.name == name), None)
        if node is None:
            if not rule.create:
                return [f"{where}: references queue {path}, which is not configured and create is false"]
            return []
    if node.is_parent:
        return [f"{where}: references queue {path}, which is a parent queue: the rule can never place an application"]
    return []
