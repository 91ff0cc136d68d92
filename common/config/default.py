"""The configuration used when an RM registers or updates with an empty config: its text (the
loader reads it: ``common.config.loader.default_config``).

The text is YuniKorn v1.2's ``DefaultSchedulerConfig`` (the same in YuniKorn 1.9). ``/ws/v1/config``
serves it without its leading newline, and its checksum is that of the text served
(``config_checksum``), so it differs from the one YuniKorn shows for its default config.
"""

from __future__ import annotations

__all__ = ["DEFAULT_CONFIG_TEXT"]

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

