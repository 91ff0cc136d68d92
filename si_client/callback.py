"""What the RM implements: the callback of seed 000, the state dump plugin, the replay hook.

``ResourceManagerCallback`` mirrors the Go interface of the spec method for method.
Every method has a do-nothing default so an RM overrides only what it consumes.
A method may be a plain function or an ``async def`` coroutine function: the
client runs coroutine callbacks on the event loop given to ``SchedulerAPI``, one at
a time in the order received, so the ordering guarantees below hold for both flavours.

Ordering guarantee (the contract of ``SchedulerAPI``): callbacks fed by one
stream never run concurrently with each other and run in the order the
scheduler sent them. Callbacks of different streams (allocations, applications,
nodes, notices) may run concurrently, so state they share needs a lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common import si_pb2

__all__ = [
    "RecoverableState",
    "RecoverySnapshot",
    "ResourceManagerCallback",
    "StateDumpPlugin",
]


class ResourceManagerCallback:
    """Receives what the scheduler sends to the RM (seed 000, ``ResourceManagerCallback``).

    The three stream callbacks get messages of the client's SI revision (``si_revision``):
    ``common.si_pb2`` or ``common.si_v18_pb2``. Notices (events, scheduling states) come over
    korral.v1 and are ``common.si_pb2`` messages for either revision."""

    def update_allocation(self, response: Any) -> None:
        """New allocations, releases (confirmations and scheduler-made) and rejections. Seed:
        allocations named by UUID, ``releasedAsks``, ``rejected``. v1.8: everything named by
        allocationKey, a timed-out ask is a ``released`` entry, rejections in
        ``rejectedAllocations``, and allocations the RM reported with a nodeID are confirmed in
        ``new``."""

    def update_application(self, response: Any) -> None:
        """Accepted, rejected and updated (state change) applications."""

    def update_node(self, response: Any) -> None:
        """Accepted and rejected node registrations."""

    def predicates(self, args: Any) -> None:
        """Predicate check before an allocation; raise to veto.

        Part of the spec's in-process API only: the gRPC path (si.v1 and
        korral.v1) carries no predicate calls, so over gRPC this is never called.
        """

    def send_event(self, events: list[si_pb2.EventRecord]) -> None:
        """Scheduler events (korral.v1 ``Subscribe`` notices)."""

    def update_container_scheduling_state(
        self, request: si_pb2.UpdateContainerSchedulingStateRequest
    ) -> None:
        """Container scheduling state; may repeat an unchanged state (spec: must be idempotent)."""

    # Korral additions: connection observers, not part of the spec's interface.
    def connection_lost(self, reason: str) -> None:
        """The client lost the scheduler and starts to reconnect and replay."""

    def connection_restored(self) -> None:
        """Re-registration and replay finished; normal traffic resumed."""


class StateDumpPlugin:
    """RM side of ``/ws/v1/fullstatedump`` (seed 000, ``StateDumpPlugin``)."""

    def get_state_dump(self) -> str:
        """Return a JSON document describing the RM's state."""
        raise NotImplementedError


@dataclass(slots=True)
class RecoverySnapshot:
    """The RM's full state, replayed after (re-)registration in the shim's order, as messages
    of the client's SI revision.

    ``applications`` are sent first and each one's accept/reject is awaited; then ``nodes``
    (``NodeInfo`` with action CREATE), awaiting every node's accept/reject; then the work:

    - seed: running allocations in the nodes' ``existingAllocations``, pending asks in ``asks``;
    - v1.8: ``allocations``, every one: running ones with their ``nodeID`` (the scheduler
      confirms each in ``new``), pending ones without.
    """

    applications: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    asks: list = field(default_factory=list)
    allocations: list = field(default_factory=list)


class RecoverableState:
    """The replay hook: the RM reports its full state when the client asks.

    Contract, so that nothing is dropped or sent twice: the RM changes the state
    this method reports *before* it calls the matching ``SchedulerAPI.update_*``,
    and ``recoverable_state`` holds the same lock the RM holds while it changes
    state and sends. Then every message sent before the snapshot is covered by
    it, and every message sent after it is delivered after the replay.
    """

    def recoverable_state(self) -> RecoverySnapshot:
        raise NotImplementedError

    def recoverable_partition_state(self, partition: str) -> RecoverySnapshot:
        """Optional, a Korral extension: the state of ``partition`` alone (its applications, the
        nodes in it with their running allocations, its pending asks), under the same contract
        as ``recoverable_state``. An RM that overrides it declares ``partitionResync`` when it
        subscribes (unless its attribute ``partition_resync`` is False): when one partition's
        worker is lost, only that partition is replayed and the others keep scheduling
        (docs/client.md). Without it the RM re-registers whole."""
        raise NotImplementedError


def rebuilds_partitions(hook: RecoverableState | None) -> bool:
    """The hook overrides ``recoverable_partition_state`` and does not turn it off."""
    return hook is not None and getattr(hook, "partition_resync", True) is not False and (
        type(hook).recoverable_partition_state is not RecoverableState.recoverable_partition_state)
