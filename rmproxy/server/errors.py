"""The errors of an RM operation, each named for what failed, with the gRPC status to answer."""

from __future__ import annotations

import grpc

__all__ = ["RMOperationError", "RegistrationError", "ConfigUpdateError", "NO_WORKER_ADVICE", "RESYNC_DETAILS"]

NO_WORKER_ADVICE = "start more workers (korral up --workers N, or korral worker on another host)"
RESYNC_DETAILS = "korral: re-register: "  # how the details of an RM's streams ended for a resync begin


class RMOperationError(Exception):
    """An RM's operation failed; ``code`` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class RegistrationError(RMOperationError):
    """``RegisterResourceManager`` failed: the RM registers again (or fixes its request)."""


class ConfigUpdateError(RMOperationError):
    """A config update (the RM's ``UpdateConfiguration``, an operator's change) failed, and the
    RM's registration and partitions are as they were (or, for new partitions without a worker,
    the message says what stands)."""
