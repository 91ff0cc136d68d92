"""The shim's configuration from the configmaps YuniKorn's Helm chart writes.

``yunikorn-defaults`` then ``yunikorn-configs`` (in the shim's namespace) are flattened into one
map (``flatten``): ``data`` entries, then ``binaryData`` entries (``.gz`` ones gunzipped, their key
without ``.gz``); a key of the second map overrides the first's. From that map:

- ``<policyGroup>.yaml`` (default ``queues.yaml``) is the queues config sent to Korral;
- every key not ending in ``.yaml`` goes to Korral as ``extraConfig`` (so ``korral.compatibility``,
  ``log.*``, ``health.*`` ride there, as in YuniKorn);
- ``service.*``, ``kubernetes.*`` and ``admissionController.filtering.generateUniqueAppId`` are
  the shim's own settings (``ShimConf``), parsed as YuniKorn parses them (Go durations, Go
  booleans, integers). A value that does not parse makes the whole load fail, naming the key: the
  previous configuration stays.

``NON_RELOADABLE`` are the keys YuniKorn reads only at start: a change to one of them is kept out
of the running configuration with a warning (``keep_non_reloadable``).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import re
import zlib
from dataclasses import dataclass, fields, replace

from common.config.durations import parse_duration_ns

__all__ = ["ShimConf", "ConfigMapError", "Loaded", "flatten", "parse", "load", "keep_non_reloadable",
           "NON_RELOADABLE", "DEFAULTS_NAME", "CONFIGS_NAME"]

DEFAULTS_NAME = "yunikorn-defaults"
CONFIGS_NAME = "yunikorn-configs"


class ConfigMapError(Exception):
    """The configmaps cannot be used; ``problems`` name each key at fault."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True, slots=True)
class ShimConf:
    """YuniKorn's shim settings (k8shim ``pkg/conf``), with its defaults."""

    cluster_id: str = "mycluster"  # service.clusterId: the rmID
    policy_group: str = "queues"  # service.policyGroup
    scheduling_interval: float = 1.0  # service.schedulingInterval (read for compatibility; Korral schedules on change)
    volume_bind_timeout: float = 600.0  # service.volumeBindTimeout
    event_channel_capacity: int = 1024 * 1024  # service.eventChannelCapacity
    dispatch_timeout: float = 300.0  # service.dispatchTimeout
    disable_gang_scheduling: bool = False  # service.disableGangScheduling
    enable_config_hot_refresh: bool = True  # service.enableConfigHotRefresh
    placeholder_image: str = "registry.k8s.io/pause:3.7"  # service.placeholderImage
    placeholder_run_as_user: int = 0  # service.placeholderRunAsUser
    placeholder_run_as_group: int = 0  # service.placeholderRunAsGroup
    placeholder_fs_group: int = 0  # service.placeholderFsGroup
    instance_type_label: str = "node.kubernetes.io/instance-type"  # service.nodeInstanceTypeNodeLabelKey
    kube_qps: int = 1000  # kubernetes.qps
    kube_burst: int = 1000  # kubernetes.burst
    generate_unique_app_ids: bool = False  # admissionController.filtering.generateUniqueAppId


# key -> (field, kind)
KEYS: dict[str, tuple[str, str]] = {
    "service.clusterId": ("cluster_id", "str"),
    "service.policyGroup": ("policy_group", "str"),
    "service.schedulingInterval": ("scheduling_interval", "duration"),
    "service.volumeBindTimeout": ("volume_bind_timeout", "duration"),
    "service.eventChannelCapacity": ("event_channel_capacity", "int32"),
    "service.dispatchTimeout": ("dispatch_timeout", "duration"),
    "service.disableGangScheduling": ("disable_gang_scheduling", "bool"),
    "service.enableConfigHotRefresh": ("enable_config_hot_refresh", "bool"),
    "service.placeholderImage": ("placeholder_image", "str"),
    "service.placeholderRunAsUser": ("placeholder_run_as_user", "int64"),
    "service.placeholderRunAsGroup": ("placeholder_run_as_group", "int64"),
    "service.placeholderFsGroup": ("placeholder_fs_group", "int64"),
    "service.nodeInstanceTypeNodeLabelKey": ("instance_type_label", "str"),
    "kubernetes.qps": ("kube_qps", "int32"),
    "kubernetes.burst": ("kube_burst", "int32"),
    "admissionController.filtering.generateUniqueAppId": ("generate_unique_app_ids", "bool"),
}
# YuniKorn's handleNonReloadableConfig: every setting but enableConfigHotRefresh
NON_RELOADABLE = tuple(k for k in KEYS if k != "service.enableConfigHotRefresh")

_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def go_duration(text: str) -> float:
    """Seconds of a Go duration (``300ms``, ``1h30m``, ``-2s``, ``0``)."""
    return parse_duration_ns(text) / 1e9


def _convert(kind: str, text: str):
    if kind == "str":
        return text
    if kind == "bool":
        if text in _GO_TRUE:
            return True
        if text in _GO_FALSE:
            return False
        raise ValueError(f"{text!r} is not a boolean (true or false)")
    if kind == "duration":
        return go_duration(text)
    bits = 32 if kind == "int32" else 64
    if not re.fullmatch(r"[+-]?\d+", text.strip()):
        raise ValueError(f"{text!r} is not an integer")
    value = int(text)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f"{text!r} is out of range for a {bits}-bit integer")
    return value


def flatten(configmaps: list[dict | None]) -> dict[str, str]:
    """One map of every entry of the configmaps, later maps overriding earlier ones (see module
    doc). ``ConfigMapError`` for binary data that is not base64 or not gzip."""
    result: dict[str, str] = {}
    problems = []
    for cm in configmaps:
        if not cm:
            continue
        name = (cm.get("metadata") or {}).get("name", "configmap")
        for k, v in (cm.get("data") or {}).items():
            result[k] = v
        for k, v in (cm.get("binaryData") or {}).items():
            try:
                data = base64.b64decode(v, validate=True)
                if k.lower().endswith(".gz"):
                    result[k[:-3]] = gzip.decompress(data).decode("utf-8")
                else:
                    result[k] = data.decode("utf-8")
            except (binascii.Error, ValueError) as exc:
                problems.append(f"{name}: binaryData[{k}] is not base64 text: {exc}")
            except (OSError, EOFError, zlib.error) as exc:
                problems.append(f"{name}: binaryData[{k}] is not gzip data: {exc}")
    if problems:
        raise ConfigMapError(problems)
    return result


def parse(flat: dict[str, str]) -> ShimConf:
    """The shim's settings from the flattened map; ``ConfigMapError`` naming every bad key."""
    changes, problems = {}, []
    for key, (attr, kind) in KEYS.items():
        if key in flat:
            try:
                changes[attr] = _convert(kind, flat[key])
            except ValueError as exc:
                problems.append(f"{key}: {exc}")
    if problems:
        raise ConfigMapError(problems)
    return replace(ShimConf(), **changes)


def keep_non_reloadable(old: ShimConf, new: ShimConf) -> tuple[ShimConf, list[str]]:
    """``new`` with every non-reloadable setting put back to ``old``'s, and a warning for each."""
    warnings, kept = [], {}
    attrs = {f.name for f in fields(ShimConf)}
    for key in NON_RELOADABLE:
        attr = KEYS[key][0]
        assert attr in attrs
        if getattr(old, attr) != getattr(new, attr):
            warnings.append(f"{key} changed from {getattr(old, attr)!r} to {getattr(new, attr)!r}: not reloadable, "
                            "kept the running value (restart the shim to use it)")
            kept[attr] = getattr(old, attr)
    return replace(new, **kept), warnings


@dataclass(frozen=True, slots=True)
class Loaded:
    """A usable configuration: the shim's settings, the queues YAML and the extra config."""

    conf: ShimConf
    queues: str
    extra: dict[str, str]

    def same_for_korral(self, other: "Loaded | None") -> bool:
        return other is not None and (self.queues, self.extra, self.conf.policy_group) == \
            (other.queues, other.extra, other.conf.policy_group)


def load(configmaps: list[dict | None], running: ShimConf | None = None) -> tuple[Loaded, list[str]]:
    """The configuration from the configmaps (``running``: the settings in use, whose
    non-reloadable ones stay), and the warnings. ``ConfigMapError`` when it cannot be used."""
    flat = flatten(configmaps)
    conf = parse(flat)
    warnings: list[str] = []
    if running is not None:
        conf, warnings = keep_non_reloadable(running, conf)
    queues = flat.get(f"{conf.policy_group}.yaml", "")
    extra = {k: v for k, v in flat.items() if not k.endswith(".yaml")}
    return Loaded(conf, queues, extra), warnings
