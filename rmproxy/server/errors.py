"""The error of an RM operation (registration, config change), with the gRPC status to answer."""

from __future__ import annotations

import grpc

__all__ = ["RegistrationError"]


class RegistrationError(Exception):
    """Registration failed; ``code`` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
