"""What became of applications the partition no longer keeps: removed by the RM, or finished
and then expired (or pushed out of the finished list by newer ones). Bounded: the oldest record
goes first. Read by ``korral explain`` (an app that is gone says how and when, not "not found").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["GoneApp", "AppHistory"]


@dataclass(frozen=True, slots=True)
class GoneApp:
    """One application that is gone: the state it ended in (for a removed app, the state it was
    in when removed), since when (ns), why (the RM's removal, or the app's own message), and
    whether the RM removed it (else it finished and expired)."""

    app_id: str
    queue: str
    user: str
    state: str
    since_ns: int
    reason: str
    removed: bool


class AppHistory:
    """The last ``size`` gone applications by app id (a re-added app leaves it)."""

    __slots__ = ("size", "_apps")

    def __init__(self, size: int) -> None:
        self.size = size
        self._apps: OrderedDict[str, GoneApp] = OrderedDict()

    def add(self, gone: GoneApp) -> None:
        self._apps.pop(gone.app_id, None)
        self._apps[gone.app_id] = gone
        while len(self._apps) > self.size:
            self._apps.popitem(last=False)

    def get(self, app_id: str) -> GoneApp | None:
        return self._apps.get(app_id)

    def discard(self, app_id: str) -> None:
        self._apps.pop(app_id, None)

    def __len__(self) -> int:
        return len(self._apps)
