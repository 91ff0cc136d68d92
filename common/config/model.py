"""The typed model of YuniKorn's queues.yaml, as ``common.config.load_config`` returns it.

Every value here is already parsed and validated: resource quantities are plain
ints (vcore in milli-cores, memory in bytes, as YuniKorn stores them), names are
lower-cased where YuniKorn lower-cases them, and each partition has exactly one
top queue, ``root``. The scheduling core consumes these objects; it never reads
YAML itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["ResourceMap", "ResourcesConfig", "LimitConfig", "ChildTemplateConfig", "QueueConfig", "FilterConfig",
           "PlacementRuleConfig", "NodeSortPolicyConfig", "PreemptionConfig", "UserGroupResolverConfig", "PartitionConfig", "SchedulerConfig"]

ResourceMap = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ResourcesConfig:
    guaranteed: ResourceMap = field(default_factory=dict)
    max: ResourceMap = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LimitConfig:
    limit: str = ""
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    maxresources: ResourceMap = field(default_factory=dict)
    maxapplications: int = 0


@dataclass(frozen=True, slots=True)
class ChildTemplateConfig:
    properties: Mapping[str, str] = field(default_factory=dict)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    maxapplications: int = 0


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    parent: bool = False
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    maxapplications: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
    adminacl: str = ""
    submitacl: str = ""
    childtemplate: ChildTemplateConfig | None = None
    queues: tuple["QueueConfig", ...] = ()
    limits: tuple[LimitConfig, ...] = ()

    @property
    def is_parent(self) -> bool:
        """A queue with children is always a parent; ``parent: true`` forces it."""
        return self.parent or bool(self.queues)


@dataclass(frozen=True, slots=True)
class FilterConfig:
    type: str = "allow"
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PlacementRuleConfig:
    name: str
    create: bool = False
    parent: "PlacementRuleConfig | None" = None
    filter: FilterConfig = field(default_factory=FilterConfig)
    value: str = ""


@dataclass(frozen=True, slots=True)
class NodeSortPolicyConfig:
    type: str = "fair"
    resourceweights: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    # None: unset, YuniKorn's default of the RM's compatibility version (on since 1.4, off before)
    enabled: bool | None = None
    quotapreemptionenabled: bool = False  # YuniKorn 1.8: enforce a lowered queue max


@dataclass(frozen=True, slots=True)
class UserGroupResolverConfig:
    """YuniKorn 1.8: ``""`` (the worker's ``--group-lookup``), ``os`` or ``ldap``."""

    type: str = ""


@dataclass(frozen=True, slots=True)
class TopologyLevelConfig:
    """Korral: one network topology level (issue 35), read from a node attribute or k8s label."""

    name: str
    label: str


@dataclass(frozen=True, slots=True)
class TopologyConfig:
    """Korral: the partition's topology levels, widest first (the host is the implicit last)."""

    levels: tuple[TopologyLevelConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    name: str
    queues: tuple[QueueConfig, ...]
    placementrules: tuple[PlacementRuleConfig, ...] = ()
    limits: tuple[LimitConfig, ...] = ()
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    nodesortpolicy: NodeSortPolicyConfig = field(default_factory=NodeSortPolicyConfig)
    statedumpfilepath: str = ""
    usergroupresolver: UserGroupResolverConfig = field(default_factory=UserGroupResolverConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)

    @property
    def root(self) -> QueueConfig:
        """The single top queue; ``load_config`` guarantees it exists and is named root."""
        return self.queues[0]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    partitions: tuple[PartitionConfig, ...]
    checksum: str = ""  # SHA-256 of the source text, uppercase hex, as /ws/v1/config shows it
    # Non-fatal findings (ignored values, deprecated keys, dropped ACL names); not part of equality.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def partition(self, name: str) -> PartitionConfig | None:
        for p in self.partitions:
            if p.name == name:
                return p
        return None
