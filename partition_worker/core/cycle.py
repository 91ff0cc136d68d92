"""What one scheduling cycle has learnt so far, in typed memos; thrown away when it ends.

What it owns: ``Cycle`` (the time, the books the node choice and the policies read and change:
``nodes``, ``apps``, ``ledger``; what is done for the cycle: ``blocked``, ``visited``) and
its memos: the order of queues (``QueueOrder``), of apps (``AppOrder``) and of asks
(``AskOrder``), the sizes known to fit no node (``failed_shapes``, ``unreservable``, and an
app attempt's ``SizeMemo``), the FAILED reasons of asks with node terms (``why_unplaced``),
the cycle's budgets (``Budgets``) and the stage clock (``StageClock``). ``CycleResult`` is
what a cycle reports to the partition.

Who may use it: the ``scheduler`` builds one per cycle and hands it to ``node_choice``,
``reservations`` and ``preemption``. Nothing here outlives the cycle; every memo rests on
"within a cycle nodes and queue headroom only shrink" (see ``scheduler``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Hashable, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from common.resources import Resource

    from .application import Application
    from .ledger import Ledger
    from .node import NodeCollection
    from .objects import Ask
    from .queue import Queue

__all__ = ["Cycle", "CycleResult", "QueueOrder", "AppOrder", "AskOrder", "SizeMemo", "Budgets", "StageClock",
           "MAX_REQUEST_EVENTS_PER_CYCLE", "MAX_PREEMPTION_ATTEMPTS_PER_CYCLE", "NODE_TIMED_ALWAYS",
           "NODE_TIMED_EVERY"]

# REQUEST events are a diagnosis aid; a cycle over 200k quota-blocked asks must not emit 200k
MAX_REQUEST_EVENTS_PER_CYCLE = 100
# queue preemption attempts per cycle, failed ones included (each scans the nodes once and
# examines victims on up to PREEMPTION_CANDIDATE_NODES of them)
MAX_PREEMPTION_ATTEMPTS_PER_CYCLE = 32
# node selection's stage time: the first selections of a cycle are timed, then one in 16
NODE_TIMED_ALWAYS = 16
NODE_TIMED_EVERY = 16


class CycleResult(NamedTuple):
    allocations: int  # made in the cycle
    visited: int  # ask positions looked at: the cycle's cost (the partition spaces idle cycles by it)
    stages: dict[str, float] | None  # seconds per stage, when a stage timer is injected


class QueueOrder:
    """The queue side: each parent's children sorted for the cycle (re-placed one at a time
    after an allocation), each queue's sort key and priority, each leaf's apps per priority."""

    __slots__ = ("children", "keys", "priorities", "app_priorities")

    def __init__(self) -> None:
        self.children: dict[Queue, list[tuple[tuple, Queue]]] = {}  # parent -> sorted [(key, child)]
        self.keys: dict[Queue, tuple[Resource, tuple]] = {}  # queue -> (allocated it was computed for, key)
        self.priorities: dict[Queue, int] = {}
        self.app_priorities: dict[Queue, dict[int, int]] = {}  # leaf -> {app priority: apps}


class AppOrder:
    """The app side, per leaf: the fifo (and stateaware) order walked with a cursor, the fair
    order (sorted, re-placed one at a time), and stateaware's admissions of Accepted apps."""

    __slots__ = ("fifo", "fifo_cursor", "fair", "sa_epoch", "sa_candidates", "sa_cursor", "sa_admitted")

    def __init__(self) -> None:
        self.fifo: dict[Queue, list[Application]] = {}
        self.fifo_cursor: dict[Queue, int] = {}
        self.fair: dict[Queue, list[tuple[tuple, Application]]] = {}
        self.sa_epoch: dict[Queue, int] = {}  # the leaf's ``sa_epoch`` the order was built for
        self.sa_candidates: dict[Queue, list[Application]] = {}  # Accepted apps, oldest first
        self.sa_cursor: dict[Queue, int] = {}
        self.sa_admitted: dict[Queue, list[Application]] = {}


class AskOrder:
    """The ask side, per app: its asks in order for the cycle and the cursor before which all
    are done."""

    __slots__ = ("lists", "cursor")

    def __init__(self) -> None:
        self.lists: dict[Application, list[Ask]] = {}
        self.cursor: dict[Application, int] = {}

    def of(self, app: "Application") -> tuple[list["Ask"], int]:
        asks = self.lists.get(app)
        if asks is None:
            asks = self.lists[app] = app.ordered_asks()
            self.cursor[app] = 0
        return asks, self.cursor[app]


class SizeMemo:
    """One app attempt's memo (``clear`` starts it): within a cycle a failure is final, so the
    next plain ask of the size that just failed (past the limits) fails the same way: its queue
    verdict and node search are reused; and a size no node can hold is not offered a
    reservation again."""

    __slots__ = ("failed", "blocker", "unreservable")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.failed: Resource | None = None
        self.blocker: Queue | None = None  # the queue that blocked ``failed`` (None: no node)
        self.unreservable: Resource | None = None


class Budgets:
    """Work a cycle does at most: REQUEST events, queue preemption attempts; and whether the
    partition's reservation limit was reached (reservations only grow in a cycle)."""

    __slots__ = ("events", "preemptions", "reservations_full")

    def __init__(self) -> None:
        self.events = MAX_REQUEST_EVENTS_PER_CYCLE
        self.preemptions = MAX_PREEMPTION_ATTEMPTS_PER_CYCLE
        self.reservations_full = False


class StageClock:
    """Seconds per stage of a cycle (queue ordering, app ordering, node selection), as
    YuniKorn's sorting-latency metrics, with the injected ``timer``. Node selections are
    sampled: the first ``NODE_TIMED_ALWAYS``, then one in ``NODE_TIMED_EVERY`` (the clock cost
    3 % of a 10,000-allocation burst), and the sample's time is scaled to all of them."""

    __slots__ = ("timer", "stages", "node_calls", "node_timed")

    def __init__(self, timer: Callable[[], float]) -> None:
        self.timer = timer
        self.stages = {"queue": 0.0, "app": 0.0, "node": 0.0}
        self.node_calls = 0
        self.node_timed = 0

    def timed(self, stage: str, fn, *args):
        """``fn(*args)``, its time added to ``stage``."""
        start = self.timer()
        try:
            return fn(*args)
        finally:
            self.stages[stage] += self.timer() - start

    def node_choice(self, find: Callable, c: "Cycle", ask: "Ask"):
        """``find(c, ask)``, timed when it is in the sample."""
        calls = self.node_calls
        self.node_calls = calls + 1
        if calls < NODE_TIMED_ALWAYS or not calls % NODE_TIMED_EVERY:
            timer = self.timer
            started = timer()
            node = find(c, ask)
            self.stages["node"] += timer() - started
            self.node_timed += 1
            return node
        return find(c, ask)

    def result(self) -> dict[str, float]:
        stages = dict(self.stages)
        if self.node_timed < self.node_calls:  # the sample's time scaled to every selection
            stages["node"] *= self.node_calls / self.node_timed
        return stages


class Cycle:
    """One scheduling cycle (see module doc). ``blocked``: queues, apps and asks that failed
    and are done for the cycle (besides those behind a cursor); ``visited``: ask positions
    looked at."""

    __slots__ = ("now", "nodes", "apps", "ledger", "blocked", "visited", "queue_order", "app_order",
                 "asks", "sizes", "failed_shapes", "unreservable", "why_unplaced", "budgets", "clock",
                 "fair_share", "gangs", "gang_shapes")

    def __init__(self, now: int, nodes: "NodeCollection", apps: "Mapping[str, Application]",
                 ledger: "Ledger", timer: Callable[[], float] | None, fair_share: bool) -> None:
        self.now = now
        self.nodes = nodes
        self.apps = apps
        self.ledger = ledger
        self.blocked: set[object] = set()
        self.visited = 0
        self.queue_order = QueueOrder()
        self.app_order = AppOrder()
        self.asks = AskOrder()
        self.sizes = SizeMemo()  # the app attempt's (the scheduler clears it for each)
        # per signature (``feasibility.signature``; None: plain asks) the sizes that fitted no
        # node now (node_choice) and that no node can ever hold (reservations)
        self.failed_shapes: dict[Hashable, list[Resource]] = {}
        self.unreservable: dict[Hashable, list[Resource]] = {}
        # the FAILED reason of an ask with node terms, by signature and size (diagnosis.why_unplaced)
        self.why_unplaced: dict[Hashable, str | None] = {}
        self.budgets = Budgets()
        self.clock = StageClock(timer) if timer is not None else None
        self.fair_share = fair_share  # compatibility 1.6+: the queue order of fair_share.py
        self.gangs: dict[Application, bool] = {}  # gangs whose topology domain was chosen: placeable
        # (level, mode, member size, signature) -> the fewest members that found no domain (scheduler)
        self.gang_shapes: dict[tuple, int] = {}

    def timed(self, stage: str, fn, *args):
        """``fn(*args)``, timed as ``stage`` when the cycle has a stage clock."""
        clock = self.clock
        return fn(*args) if clock is None else clock.timed(stage, fn, *args)
