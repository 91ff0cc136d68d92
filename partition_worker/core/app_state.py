"""The application state machine of seed 004, as a transition table.

``TRANSITIONS[(state, event)] -> new state``. A same-state transition is a
silent no-op (YuniKorn); any other pair not in the table raises
``IllegalTransition`` naming the state and the event, and the state is unchanged.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["AppState", "AppEvent", "TRANSITIONS", "IllegalTransition", "next_state",
           "RUNNING_STATES", "TERMINAL_STATES"]


class AppState(str, Enum):
    NEW = "New"
    ACCEPTED = "Accepted"
    STARTING = "Starting"
    RUNNING = "Running"
    COMPLETING = "Completing"
    COMPLETED = "Completed"
    EXPIRED = "Expired"
    FAILING = "Failing"
    FAILED = "Failed"
    REJECTED = "Rejected"
    RESUMING = "Resuming"


class AppEvent(str, Enum):
    """Event names as YuniKorn sends them in ``UpdatedApplication.message``."""

    RUN = "runApplication"
    REJECT = "rejectApplication"
    COMPLETE = "completeApplication"
    FAIL = "failApplication"
    EXPIRE = "expireApplication"
    RESUME = "resumeApplication"


S, E = AppState, AppEvent
TRANSITIONS: dict[tuple[AppState, AppEvent], AppState] = {
    (S.NEW, E.REJECT): S.REJECTED,
    (S.NEW, E.RUN): S.ACCEPTED,
    (S.RESUMING, E.RUN): S.ACCEPTED,
    (S.ACCEPTED, E.RUN): S.STARTING,
    (S.STARTING, E.RUN): S.RUNNING,
    (S.RUNNING, E.RUN): S.RUNNING,
    (S.COMPLETING, E.RUN): S.RUNNING,
    (S.ACCEPTED, E.COMPLETE): S.COMPLETING,
    (S.STARTING, E.COMPLETE): S.COMPLETING,
    (S.RUNNING, E.COMPLETE): S.COMPLETING,
    (S.COMPLETING, E.COMPLETE): S.COMPLETED,
    (S.NEW, E.FAIL): S.FAILING,
    (S.ACCEPTED, E.FAIL): S.FAILING,
    (S.STARTING, E.FAIL): S.FAILING,
    (S.RUNNING, E.FAIL): S.FAILING,
    (S.FAILING, E.FAIL): S.FAILED,
    (S.NEW, E.RESUME): S.RESUMING,
    (S.ACCEPTED, E.RESUME): S.RESUMING,
    (S.COMPLETED, E.EXPIRE): S.EXPIRED,
    (S.FAILED, E.EXPIRE): S.EXPIRED,
    (S.REJECTED, E.EXPIRE): S.EXPIRED,
}
del S, E

# Apps counted as running for maxapplications (YuniKorn counts from Starting on).
RUNNING_STATES = frozenset({AppState.STARTING, AppState.RUNNING})
TERMINAL_STATES = frozenset({AppState.COMPLETED, AppState.FAILED, AppState.REJECTED,
                             AppState.EXPIRED})


class IllegalTransition(ValueError):
    def __init__(self, app_id: str, state: AppState, event: AppEvent) -> None:
        super().__init__(f"application {app_id}: event {event.value} is not allowed in state {state.value}")
        self.state = state
        self.event = event


def next_state(app_id: str, state: AppState, event: AppEvent) -> AppState | None:
    """The state after ``event``; ``None`` for a silent same-state no-op."""
    new = TRANSITIONS.get((state, event))
    if new is None:
        raise IllegalTransition(app_id, state, event)
    return None if new is state else new
