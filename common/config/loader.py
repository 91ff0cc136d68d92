"""queues.yaml text -> validated ``SchedulerConfig``.

``load_config(text)`` is the one entry point. It reads the YAML (``_yaml``),
converts it strictly into the typed model (this module: every key checked
against the schema, every value typed, quantities parsed), then validates the
semantics (``validate``). All faults are collected and raised together as one
``ConfigError``; each message starts with the partition (and queue, rule or
limit) it concerns.

Documented limits (docs/configuration.md): ``MAX_CONFIG_BYTES`` of UTF-8 text,
``MAX_QUEUES`` queues per config, ``MAX_QUEUE_DEPTH`` queue levels,
``MAX_RULE_DEPTH`` nested parent rules, ``MAX_ERRORS`` messages reported.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable, TypeVar

from common.config._yaml import YamlError, read_yaml
from common.config.default import DEFAULT_CONFIG_TEXT
from common.config.errors import ConfigError
from common.config.model import (
    ChildTemplateConfig,
    FilterConfig,
    LimitConfig,
    NodeSortPolicyConfig,
    PartitionConfig,
    PlacementRuleConfig,
    PreemptionConfig,
    QueueConfig,
    ResourcesConfig,
    SchedulerConfig,
    TopologyConfig,
    TopologyLevelConfig,
    UserGroupResolverConfig,
)
from common.config.quantity import parse_resources
from common.config.placement_rules import MAX_PARENT_DEPTH
from common.config.validate import validate_partition

__all__ = [
    "load_config",
    "default_config",
    "config_checksum",
    "config_with_checksum",
    "served_text",
    "strip_checksum",
    "file_checksum",
    "MAX_CONFIG_BYTES",
    "MAX_QUEUES",
    "MAX_QUEUE_DEPTH",
    "MAX_RULE_DEPTH",
    "MAX_ERRORS",
]

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # gRPC's default message limit; a config rides in one message
MAX_QUEUES = 20_000  # configured queues over all partitions
MAX_QUEUE_DEPTH = 64  # levels below root
MAX_RULE_DEPTH = MAX_PARENT_DEPTH  # nested parent rules below a top-level rule (placement_rules)
MAX_ERRORS = 200  # beyond this, one summary line
UINT64_MAX = 2**64 - 1

_TOP_KEYS = ("partitions", "checksum")
_PARTITION_KEYS = ("name", "queues", "placementrules", "limits", "preemption", "nodesortpolicy", "statedumpfilepath",
                   "usergroupresolver", "topology")
_QUEUE_KEYS = (
    "name", "parent", "resources", "maxapplications", "properties",
    "adminacl", "submitacl", "childtemplate", "queues", "limits",
)
_TEMPLATE_KEYS = ("properties", "resources", "maxapplications")
_RULE_KEYS = ("name", "create", "parent", "filter", "value")
_LIMIT_KEYS = ("limit", "users", "groups", "maxresources", "maxapplications")
_NODESORT_KEYS = ("type", "resourceweights")
_PREEMPTION_KEYS = ("enabled", "quotapreemptionenabled")
_RESOLVER_KEYS = ("type",)
_TOPOLOGY_KEYS = ("levels",)
_LEVEL_KEYS = ("name", "label")


_Model = TypeVar("_Model")


def _name(raw: Any) -> str:
    """The lower-cased ``name`` of a raw queue or rule; "" when it has none (an error then)."""
    raw_name = raw.get("name") if isinstance(raw, dict) else None
    return raw_name.lower() if isinstance(raw_name, str) else ""


class _TooMany(Exception):
    """Raised inside the builder to stop at a size limit; the message is already recorded."""


def served_text(text: str) -> str:
    """The config text the scheduler serves (``/ws/v1/config``) for a registered ``text``, without
    its checksum line: the default config for an empty (or whitespace-only) text, every
    ``checksum:`` line left out, no blank lines before or after, ending with one newline."""
    body = text if text.strip() else DEFAULT_CONFIG_TEXT
    return "\n".join(strip_checksum(body).splitlines()).strip("\n") + "\n"


def config_checksum(text: str) -> str:
    """The one checksum of a config text, wherever Korral shows one (``/ws/v1/config``, ``korral
    config``, the admin endpoint, ``korral check-config``, ``SchedulerConfig.checksum``): the
    SHA-256 (uppercase hex) of what the scheduler serves for it (``served_text``). A file saved
    by ``korral config get`` (ending with its ``checksum:`` line) has the checksum of the config
    it was saved from. YuniKorn hashes the text as given, so the two differ only for a text with
    blank lines around it or a ``checksum:`` line in it, and for the empty text (the default
    config is served without its leading newline)."""
    return hashlib.sha256(served_text(text).encode("utf-8")).hexdigest().upper()


def config_with_checksum(text: str) -> str:
    """The config text as ``/ws/v1/config`` serves it (``served_text``), ending with exactly one
    ``checksum: <config_checksum>`` line."""
    clean = served_text(text)
    return clean + f"checksum: {config_checksum(clean)}\n"


def strip_checksum(text: str) -> str:
    """``text`` without its ``checksum:`` lines (they are never part of the config)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("checksum:"))


def file_checksum(text: str) -> str | None:
    """The value of the text's own ``checksum:`` line (the one ``korral config get`` ends a
    saved file with), if it has one."""
    for line in text.splitlines():
        if line.startswith("checksum:"):
            return line.split(":", 1)[1].strip() or None
    return None


@lru_cache(maxsize=1)
def default_config() -> SchedulerConfig:
    """``DEFAULT_CONFIG_TEXT`` loaded: one partition ``default``; root with ``submitacl: '*'``;
    rule ``tag`` on ``namespace``, create. The model is immutable, so the one cached instance is
    shared."""
    return load_config(DEFAULT_CONFIG_TEXT)


def load_config(text: str | bytes, *, source: str = "") -> SchedulerConfig:
    """Parse and validate queues.yaml text.

    ``""`` or whitespace only gives ``default_config()``. Raises ``ConfigError``
    with every fault found (at most ``MAX_ERRORS`` plus a summary line). The
    returned model has names lower-cased, ``root`` inserted where needed,
    quantities as ints (vcore in milli-cores) and ``checksum`` set.
    ``source`` (a file name) starts the messages of faults in the YAML text
    itself, which give a line and column: ``queues.yaml: invalid YAML at line 3, ...``.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config is not valid UTF-8: {exc}") from None
    if not isinstance(text, str):
        raise ConfigError(f"config must be text, got {type(text).__name__}")
    if text.strip() == "":
        return default_config()
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config too large: {size} bytes, the limit is {MAX_CONFIG_BYTES} bytes")
    try:
        raw = read_yaml(text)
    except YamlError as exc:
        raise ConfigError(f"{source}: {exc}" if source else str(exc)) from None
    builder = _Builder()
    try:
        partitions = builder.scheduler(raw)
    except _TooMany:
        partitions = ()
    errors = builder.errors
    if len(errors) > MAX_ERRORS:
        errors = errors[:MAX_ERRORS] + [f"... and {len(errors) - MAX_ERRORS} more errors"]
    if errors:
        raise ConfigError(errors)
    return SchedulerConfig(partitions=partitions, checksum=config_checksum(text), warnings=tuple(builder.warnings))


class _Builder:
    """Strict conversion of composed YAML into the model; collects errors instead of stopping."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.queue_count = 0

    # --- generic typed accessors -------------------------------------------------------------
    def mapping(self, raw: Any, keys: tuple[str, ...], where: str, path: str) -> dict | None:
        """``raw`` as a dict with only ``keys``; None (and an error) when it is not a mapping."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.errors.append(f"{where}: {path + ' ' if path else ''}must be a mapping, got {_kind(raw)}")
            return None
        for key in raw:
            if key not in keys:
                hint = _suggest(key, keys)
                self.errors.append(f"{where}: unknown key '{key}' at {path}.{key}{hint}" if path else f"{where}: unknown key '{key}'{hint}")
        return raw

    def named_mapping(self, raw: Any, keys: tuple[str, ...], where: str, path: str) -> dict | None:
        """``mapping``, and an error when its ``name`` is missing, empty or not a string."""
        m = self.mapping(raw, keys, where, path)
        if m is not None and (not isinstance(m.get("name"), str) or m.get("name") == ""):
            self.errors.append(f"{where}: {path}.name is required and must be a string")
        return m

    def string(self, raw: Any, where: str, path: str) -> str:
        if raw is None:
            return ""
        if isinstance(raw, str):
            return raw
        self.errors.append(f"{where}: {path} must be a string, got {_kind(raw)}")
        return ""

    def boolean(self, raw: Any, where: str, path: str) -> bool:
        if raw is None:
            return False
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        self.errors.append(f"{where}: {path} must be true or false, got {_show(raw)}")
        return False

    def uint(self, raw: Any, where: str, path: str) -> int:
        if raw is None:
            return 0
        if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
            value = int(raw.strip())
            if value <= UINT64_MAX:
                return value
        self.errors.append(f"{where}: {path} must be a non-negative integer, got {_show(raw)}")
        return 0

    def str_list(self, raw: Any, where: str, path: str) -> tuple[str, ...]:
        if raw is None:
            return ()
        if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        self.errors.append(f"{where}: {path} must be a list of strings, got {_show(raw)}")
        return ()

    def str_map(self, raw: Any, where: str, path: str) -> dict[str, str]:
        if raw is None:
            return {}
        if isinstance(raw, dict):
            out: dict[str, str] = {}
            for key, value in raw.items():
                if value is None:
                    value = ""
                if not isinstance(value, str):
                    self.errors.append(f"{where}: {path}.{key} must be a string, got {_kind(value)}")
                    continue
                out[key] = value
            return out
        self.errors.append(f"{where}: {path} must be a mapping of strings, got {_kind(raw)}")
        return {}

    def items(self, raw: Any, where: str, path: str) -> list:
        if raw is None:
            return []
        if isinstance(raw, list):
            return raw
        self.errors.append(f"{where}: {path} must be a list, got {_kind(raw)}")
        return []

    def resources(self, raw: Any, where: str, path: str) -> dict[str, int]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.errors.append(f"{where}: {path} must be a mapping of resource quantities, got {_kind(raw)}")
            return {}
        parsed, errs = parse_resources(raw)
        self.errors.extend(f"{where}: {path}: {e}" for e in errs)
        return parsed

    # --- the schema --------------------------------------------------------------------------
    def scheduler(self, raw: Any) -> tuple[PartitionConfig, ...]:
        if raw is None:
            self.errors.append("scheduler config is not set")
            return ()
        top = self.mapping(raw, _TOP_KEYS, "config", "")
        if top is None:
            return ()
        if "partitions" not in top:
            self.errors.append("config: no partitions defined (key 'partitions' is missing)")
        raw_parts = self.items(top.get("partitions"), "config", "partitions")
        if "partitions" in top and not raw_parts and isinstance(top["partitions"], (list, type(None))):
            self.errors.append("config: no partitions defined")
        partitions: list[PartitionConfig] = []
        seen: set[str] = set()
        for index, raw_part in enumerate(raw_parts):
            part = self.partition(raw_part, index)
            if part is None:
                continue
            if part.name.lower() in seen:
                self.errors.append(f"partition {part.name}: duplicate partition name found with name {part.name}")
            seen.add(part.name.lower())
            partitions.append(part)
        return tuple(partitions)

    def partition(self, raw: Any, index: int) -> PartitionConfig | None:
        path = f"partitions[{index}]"
        name = ""
        if isinstance(raw, dict):
            name = raw.get("name") if isinstance(raw.get("name"), str) else ""
        if name == "" or name.lower() == "default":
            name = "default"
        where = f"partition {name}"
        part = self.mapping(raw, _PARTITION_KEYS, where, path)
        if part is None:
            return None
        self.string(part.get("name"), where, f"{path}.name")
        raw_queues = self.items(part.get("queues"), where, f"{path}.queues")
        # Name queues in messages by the path they will have once root is inserted.
        top = "" if _single_root(raw_queues) else "root"
        queues = [
            q for i, raw_q in enumerate(raw_queues)
            if (q := self.queue(raw_q, where, f"{path}.queues[{i}]", top, 0)) is not None
        ]
        if not raw_queues:
            self.errors.append(f"{where}: queue config is not set")
        root = _with_root(tuple(queues))
        rules = tuple(
            r
            for i, raw_rule in enumerate(self.items(part.get("placementrules"), where, f"{path}.placementrules"))
            if (r := self.rule(raw_rule, f"{where}, placement rule {i + 1}", f"{path}.placementrules[{i}]", 0)) is not None
        )
        limits = self.limits(part.get("limits"), where, f"{path}.limits")
        preemption = PreemptionConfig()
        raw_pre = self.mapping(part.get("preemption"), _PREEMPTION_KEYS, where, f"{path}.preemption")
        if raw_pre:
            preemption = PreemptionConfig(
                enabled=(None if raw_pre.get("enabled") is None
                         else self.boolean(raw_pre.get("enabled"), where, f"{path}.preemption.enabled")),
                quotapreemptionenabled=self.boolean(raw_pre.get("quotapreemptionenabled"), where,
                                                    f"{path}.preemption.quotapreemptionenabled"))
        raw_resolver = self.mapping(part.get("usergroupresolver"), _RESOLVER_KEYS, where, f"{path}.usergroupresolver")
        resolver = UserGroupResolverConfig(
            type=self.string((raw_resolver or {}).get("type"), where, f"{path}.usergroupresolver.type"))
        nodesort = self.nodesort(part.get("nodesortpolicy"), where, f"{path}.nodesortpolicy")
        topology = self.topology(part.get("topology"), where, f"{path}.topology")
        dump = self.string(part.get("statedumpfilepath"), where, f"{path}.statedumpfilepath")
        if dump:
            self.warnings.append(f"{where}: statedumpfilepath is deprecated and ignored")
        config = PartitionConfig(
            name=name,
            queues=(root,) if root is not None else (),
            placementrules=rules,
            limits=limits,
            preemption=preemption,
            nodesortpolicy=nodesort,
            statedumpfilepath=dump,
            usergroupresolver=resolver,
            topology=topology,
        )
        if root is not None:
            errors, warnings = validate_partition(config)
            self.errors.extend(errors)
            self.warnings.extend(warnings)
        return config

    def queue(self, raw: Any, where: str, path: str, parent_path: str, depth: int) -> QueueConfig | None:
        self.queue_count += 1
        if self.queue_count > MAX_QUEUES:
            self.errors.append(f"{where}: too many queues: more than {MAX_QUEUES} queues in one config")
            raise _TooMany()
        name = _name(raw)
        qpath = f"{parent_path}.{name or '?'}" if parent_path else (name or "?")
        qwhere = f"{where}, queue {qpath}"
        q = self.named_mapping(raw, _QUEUE_KEYS, qwhere, path)
        if q is None:
            return None
        if depth > MAX_QUEUE_DEPTH:
            self.errors.append(f"{qwhere}: queue hierarchy deeper than {MAX_QUEUE_DEPTH} levels")
            return None
        children = tuple(
            c
            for i, raw_child in enumerate(self.items(q.get("queues"), qwhere, f"{path}.queues"))
            if (c := self.queue(raw_child, where, f"{path}.queues[{i}]", qpath, depth + 1)) is not None
        )
        template = None
        if q.get("childtemplate") is not None:
            template = self.template(q.get("childtemplate"), qwhere, f"{path}.childtemplate")
        return QueueConfig(
            name=name,
            parent=self.boolean(q.get("parent"), qwhere, f"{path}.parent"),
            resources=self.resources_config(q.get("resources"), qwhere, f"{path}.resources"),
            maxapplications=self.uint(q.get("maxapplications"), qwhere, f"{path}.maxapplications"),
            properties=self.str_map(q.get("properties"), qwhere, f"{path}.properties"),
            adminacl=self.string(q.get("adminacl"), qwhere, f"{path}.adminacl"),
            submitacl=self.string(q.get("submitacl"), qwhere, f"{path}.submitacl"),
            childtemplate=template,
            queues=children,
            limits=self.limits(q.get("limits"), qwhere, f"{path}.limits"),
        )

    def section(self, model: Callable[..., _Model], raw: Any, where: str, path: str,
                **readers: Callable[[Any, str, str], Any]) -> _Model:
        """``raw``, a mapping of exactly the keys of ``readers``, as a ``model`` whose fields are
        read by them (their errors name ``where`` and ``path.key``); absent, empty or not a
        mapping: the model's defaults."""
        m = self.mapping(raw, tuple(readers), where, path)
        if not m:
            return model()
        return model(**{key: read(m.get(key), where, f"{path}.{key}") for key, read in readers.items()})

    def resources_config(self, raw: Any, where: str, path: str) -> ResourcesConfig:
        return self.section(ResourcesConfig, raw, where, path, guaranteed=self.resources, max=self.resources)

    def template(self, raw: Any, where: str, path: str) -> ChildTemplateConfig | None:
        t = self.mapping(raw, _TEMPLATE_KEYS, where, path)
        if t is None:
            return None
        return ChildTemplateConfig(
            properties=self.str_map(t.get("properties"), where, f"{path}.properties"),
            resources=self.resources_config(t.get("resources"), where, f"{path}.resources"),
            maxapplications=self.uint(t.get("maxapplications"), where, f"{path}.maxapplications"),
        )

    def rule(self, raw: Any, where: str, path: str, depth: int) -> PlacementRuleConfig | None:
        name = _name(raw)
        rwhere = f"{where} ({name or '?'})"
        r = self.named_mapping(raw, _RULE_KEYS, rwhere, path)
        if r is None:
            return None
        parent = None
        raw_parent = r.get("parent")
        if isinstance(raw_parent, list):
            # Seed 001 writes parent as a one-element list; the reference documents a mapping.
            if len(raw_parent) != 1:
                self.errors.append(
                    f"{rwhere}: {path}.parent must be one rule (a mapping or a list of exactly one rule), got a list of {len(raw_parent)}"
                )
                raw_parent = None
            else:
                raw_parent = raw_parent[0]
        if raw_parent is not None:
            if depth >= MAX_RULE_DEPTH:
                self.errors.append(f"{rwhere}: parent rules nested deeper than {MAX_RULE_DEPTH} levels")
            else:
                parent = self.rule(raw_parent, f"{rwhere} parent", f"{path}.parent", depth + 1)
        return PlacementRuleConfig(
            name=name,
            create=self.boolean(r.get("create"), rwhere, f"{path}.create"),
            parent=parent,
            filter=self.filter(r.get("filter"), rwhere, f"{path}.filter"),
            value=self.string(r.get("value"), rwhere, f"{path}.value"),
        )

    def filter(self, raw: Any, where: str, path: str) -> FilterConfig:
        f = self.section(FilterConfig, raw, where, path, type=self.string, users=self.str_list,
                         groups=self.str_list)
        return replace(f, type=(f.type or "allow").lower())

    def limits(self, raw: Any, where: str, path: str) -> tuple[LimitConfig, ...]:
        out: list[LimitConfig] = []
        for i, raw_limit in enumerate(self.items(raw, where, path)):
            lwhere = f"{where}, limit {i + 1}"
            lim = self.mapping(raw_limit, _LIMIT_KEYS, lwhere, f"{path}[{i}]")
            if lim is None:
                continue
            out.append(
                LimitConfig(
                    limit=self.string(lim.get("limit"), lwhere, f"{path}[{i}].limit"),
                    users=self.str_list(lim.get("users"), lwhere, f"{path}[{i}].users"),
                    groups=self.str_list(lim.get("groups"), lwhere, f"{path}[{i}].groups"),
                    maxresources=self.resources(lim.get("maxresources"), lwhere, f"{path}[{i}].maxresources"),
                    maxapplications=self.uint(lim.get("maxapplications"), lwhere, f"{path}[{i}].maxapplications"),
                )
            )
        return tuple(out)

    def topology(self, raw: Any, where: str, path: str) -> TopologyConfig:
        """Korral's ``topology.levels``: ``[{name, label}]`` widest first (checked in validate)."""
        top = self.mapping(raw, _TOPOLOGY_KEYS, where, path)
        levels = []
        for i, raw_level in enumerate(self.items((top or {}).get("levels"), where, f"{path}.levels")):
            lv = self.mapping(raw_level, _LEVEL_KEYS, where, f"{path}.levels[{i}]")
            if lv is not None:
                levels.append(TopologyLevelConfig(name=self.string(lv.get("name"), where, f"{path}.levels[{i}].name"),
                                                  label=self.string(lv.get("label"), where, f"{path}.levels[{i}].label")))
        return TopologyConfig(levels=tuple(levels))

    def nodesort(self, raw: Any, where: str, path: str) -> NodeSortPolicyConfig:
        if isinstance(raw, str) and raw:
            self.errors.append(f"{where}: {path} must be a mapping, e.g. 'nodesortpolicy: {{type: {raw}}}', got the string '{raw}'")
            return NodeSortPolicyConfig()
        ns = self.mapping(raw, _NODESORT_KEYS, where, path)
        if not ns:
            return NodeSortPolicyConfig()
        weights: dict[str, float] = {}
        raw_weights = ns.get("resourceweights")
        if raw_weights is not None and not isinstance(raw_weights, dict):
            self.errors.append(f"{where}: {path}.resourceweights must be a mapping of resource name to number")
        for key, value in (raw_weights or {}).items() if isinstance(raw_weights, dict) else ():
            weight = _number(value)
            if weight is None:
                self.errors.append(f"{where}: {path}.resourceweights.{key} must be a number, got {_show(value)}")
            else:
                weights[key] = weight
        return NodeSortPolicyConfig(
            type=self.string(ns.get("type"), where, f"{path}.type") or "fair", resourceweights=weights
        )


def _with_root(queues: tuple[QueueConfig, ...]) -> QueueConfig | None:
    """YuniKorn's root insertion: anything but exactly one top queue named root gets a root above it."""
    if not queues:
        return None
    if len(queues) == 1 and queues[0].name == "root":
        q = queues[0]
        return QueueConfig(
            name="root", parent=True, resources=q.resources, maxapplications=q.maxapplications,
            properties=q.properties, adminacl=q.adminacl, submitacl=q.submitacl,
            childtemplate=q.childtemplate, queues=q.queues, limits=q.limits,
        )
    return QueueConfig(name="root", parent=True, queues=queues)


def _single_root(raw_queues: list) -> bool:
    return (
        len(raw_queues) == 1
        and isinstance(raw_queues[0], dict)
        and isinstance(raw_queues[0].get("name"), str)
        and raw_queues[0]["name"].lower() == "root"
    )


def _number(raw: Any) -> float | None:
    if not isinstance(raw, str):
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _kind(raw: Any) -> str:
    if isinstance(raw, dict):
        return "a mapping"
    if isinstance(raw, list):
        return "a list"
    if raw is None:
        return "nothing"
    return f"the value '{raw}'"


def _show(raw: Any) -> str:
    return f"'{raw}'" if isinstance(raw, str) else _kind(raw)


def _suggest(key: Any, keys: tuple[str, ...]) -> str:
    lowered = str(key).lower()
    if lowered in keys:
        return f" (keys are lower-case: did you mean '{lowered}'?)"
    close = difflib.get_close_matches(lowered, keys, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(keys)})"

