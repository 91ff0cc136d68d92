"""The one error type of configuration handling."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration that cannot be used; ``errors`` holds one message per fault.

    Each message names the partition, queue, rule or key at fault, so a user
    can fix the file without reading code.
    """

    def __init__(self, errors: list[str] | str) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))
