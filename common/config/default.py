"""The configuration used when an RM registers or updates with an empty config.

The text is YuniKorn v1.2's ``DefaultSchedulerConfig`` (the same in YuniKorn 1.9). ``/ws/v1/config``
serves it without its leading newline, and its checksum is that of the text served
(``config_checksum``), so it differs from the one YuniKorn shows for its default config.
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
