"""YuniKorn queues.yaml: the model, the loader and validator, the default config.

``load_config(text) -> SchedulerConfig`` raises ``ConfigError`` (with ``.errors``,
one message per fault naming the partition/queue/rule concerned).
"""

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
)

__all__ = [
    "ChildTemplateConfig",
    "FilterConfig",
    "LimitConfig",
    "NodeSortPolicyConfig",
    "PartitionConfig",
    "PlacementRuleConfig",
    "PreemptionConfig",
    "QueueConfig",
    "ResourcesConfig",
    "SchedulerConfig",
]
