"""The client's connection states and the errors its calls raise."""

from __future__ import annotations

import enum

import grpc

__all__ = ["ClientState", "NotConnectedError", "SchedulerError"]


class ClientState(str, enum.Enum):
    """New -register-> Recovering -replayed-> Running -loss-> Recovering -> Running ...;
    Recovering -refused (INVALID_ARGUMENT) or no replay hook-> Failed; any -close()-> Closed.
    Sends go out in Running, are held in Recovering, and raise in New, Failed and Closed."""

    NEW = "New"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    FAILED = "Failed"
    CLOSED = "Closed"


class SchedulerError(Exception):
    """A call the scheduler refused; ``code`` is the gRPC status, ``details`` its message."""

    def __init__(self, what: str, code: grpc.StatusCode | None, details: str) -> None:
        self.code = code
        self.details = details
        name = code.name if code is not None else "ERROR"
        super().__init__(f"{what}: {name}: {details}")


class NotConnectedError(SchedulerError):
    """A send in a state where the client cannot deliver it (not registered, failed, closed)."""

    def __init__(self, what: str, state: ClientState, why: str = "") -> None:
        super().__init__(what, None, f"client is {state.value}{': ' + why if why else ''}")
