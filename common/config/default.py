"""The configuration used when an RM registers or updates with an empty config.

The text is YuniKorn v1.2's ``DefaultSchedulerConfig`` byte for byte, so the
checksum shown by ``/ws/v1/config`` is the one YuniKorn users see.
"""

from __future__ import annotations

from functools import lru_cache

from common.config.model import SchedulerConfig

__all__ = ["DEFAULT_CONFIG_TEXT", "default_config"]

DEFAULT_CONFIG_TEXT = """
partitions:
  - name: default
    placementrules:
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
        submitacl: '*'
"""


@lru_cache(maxsize=1)
def default_config() -> SchedulerConfig:
    """One partition ``default``; root with ``submitacl: '*'``; rule ``tag`` on ``namespace``, create.

    The model is immutable, so the one cached instance is shared.
    """
    from common.config.loader import load_config

    return load_config(DEFAULT_CONFIG_TEXT)
