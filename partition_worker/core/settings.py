"""Tunable timings and bounds of the core. Defaults are YuniKorn v1.2's; tests shorten them.

All durations are int nanoseconds, because the core's clock (``now``) is int
nanoseconds since the epoch, passed in by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from common.compat import SEEDS, Compat

__all__ = ["CoreSettings", "SECOND", "MINUTE", "DAY"]

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
DAY = 24 * 60 * MINUTE


@dataclass(slots=True)
class CoreSettings:
    """Timers and bounds. ``0`` for a timeout means "fire at once" (YuniKorn's stateaware disable)."""

    starting_timeout_ns: int = 5 * MINUTE  # Starting -> Running without a 2nd allocation
    completing_timeout_ns: int = 30 * SECOND  # Completing -> Completed
    expire_timeout_ns: int = 3 * DAY  # Completed/Failed/Rejected -> Expired (and purged)
    placeholder_timeout_ns: int = 15 * MINUTE  # gang: app executionTimeoutMilliSeconds <= 0
    # topology-aware gang (topology.py): how long a gang whose placeholder asks do not yet cover
    # its placeholderAsk waits for the rest (an RM sends one ask per placeholder pod) before its
    # domain is chosen for the members asked so far
    gang_arrival_wait_ns: int = 5 * SECOND
    preemption_delay_ns: int = 30 * SECOND  # queue preemption.delay default (YuniKorn v1.3)
    reservation_delay_ns: int = 2 * SECOND  # an ask must be this old before it may reserve a node
    max_reservations: int = 256  # per partition; bounds the scan cost of reserving
    # YuniKorn 1.9's reservationWaitTimeout (compatibility 1.9+): a reservation whose ask a queue
    # max or a user/group limit holds is cancelled once older than twice this (YuniKorn's test:
    # now - (created + timeout) > timeout)
    reservation_wait_timeout_ns: int = 60 * MINUTE
    idle_cycle_interval_ns: int = SECOND  # cycle at this interval while asks are pending
    max_completed_apps: int = 10_000  # completed/failed/rejected apps kept for REST until expiry
    max_gone_apps: int = 10_000  # removed or expired apps remembered for `korral explain` (a few 100 B each)
    # allocations one cycle makes before the step returns, the rest in the next step at once
    # (0: no bound). The worker bounds it so a long cycle's allocations go out while it goes
    # on, and input that arrived meanwhile is applied between the parts, as YuniKorn's
    # one-allocation-per-call scheduling loop interleaves with its event handling.
    cycle_allocation_limit: int = 0
    # user -> groups, for apps whose ugi has none (results cached by the placement resolver).
    # None: YuniKorn v1.2's default, the user's own name as the only group. The worker shell
    # injects the OS lookup; the core never calls it except through this setting.
    group_lookup: Callable[[str], tuple[str, ...] | None] | None = None
    # A monotonic seconds clock for timing a cycle's stages (queue sorting, app sorting, node
    # selection) as YuniKorn's sorting-latency metrics do. None: nothing is timed. Injected by
    # the worker shell (time.perf_counter); the core only reads it and records per-cycle totals.
    stage_timer: Callable[[], float] | None = None
    # which YuniKorn version's semantics where the seeds and today differ (extraConfig
    # korral.compatibility); the partition reads it at each decision, so an update applies at once
    compat: Compat = SEEDS
