"""YuniKorn queues.yaml: the model, the loader and validator, the default config.

``load_config(text) -> SchedulerConfig`` raises ``ConfigError`` (with ``.errors``,
one message per fault naming the partition/queue/rule concerned).
"""

from common.config.default import DEFAULT_CONFIG_TEXT
from common.config.errors import ConfigError
from common.config.loader import (
    MAX_CONFIG_BYTES,
    MAX_ERRORS,
    MAX_QUEUE_DEPTH,
    MAX_QUEUES,
    MAX_RULE_DEPTH,
    config_checksum,
    config_with_checksum,
    default_config,
    load_config,
)
from common.config.quantity import QuantityError, format_resources, parse_quantity
from common.config.validate import is_qualified, validate_partition
from common.config import model
from common.config.model import *  # noqa: F403 (the model's public names, listed once in its __all__)

__all__ = [
    "DEFAULT_CONFIG_TEXT",
    "default_config",
    "ConfigError",
    "load_config",
    "config_checksum",
    "config_with_checksum",
    "MAX_CONFIG_BYTES",
    "MAX_ERRORS",
    "MAX_QUEUE_DEPTH",
    "MAX_QUEUES",
    "MAX_RULE_DEPTH",
    "QuantityError",
    "format_resources",
    "parse_quantity",
    "is_qualified",
    "validate_partition",
    *model.__all__,
]
