"""What rmproxy knows of each RM it serves: partitions, epochs, streams, state.

Held in memory only; the registration itself is in Redis. Responses for an RM
go to its attached stream of that kind, or wait in a bounded buffer until one
attaches (an RM opens its streams after RegisterResourceManager returns).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from dataclasses import dataclass, field

from common.compat import SEEDS, CompatChoice, choose, compat_warnings
from common.config import SchedulerConfig, load_config
from common.config.errors import ConfigError
from common.registry import Registration
from common.si_revision import Revision

__all__ = ["RMSession", "RMState", "Close", "BUFFER_LIMIT", "HELD_LIMIT", "STREAM_KINDS"]

log = logging.getLogger("korral.rmproxy")

BUFFER_LIMIT = 10_000  # responses kept per stream kind while no stream is attached
HELD_LIMIT = 10_000  # requests kept while their partition has no worker
STREAM_KINDS = ("allocation", "application", "node")


class RMState(enum.StrEnum):
    """RM lifecycle of seed 000: Running while its streams are open, Paused when they drop."""

    RUNNING = "Running"
    PAUSED = "Paused"
    STOPPED = "Stopped"


class Close:
    """Sentinel put on a stream's queue to end it with a gRPC status."""

    __slots__ = ("code", "details")

    def __init__(self, code, details: str) -> None:
        self.code = code
        self.details = details


@dataclass(slots=True)
class RMSession:
    rm_id: str
    partitions: list[str]
    epochs: dict[str, int] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)
    streams: dict[str, asyncio.Queue] = field(default_factory=dict)
    buffers: dict[str, collections.deque] = field(
        default_factory=lambda: {k: collections.deque(maxlen=BUFFER_LIMIT) for k in STREAM_KINDS})
    subscribers: list[asyncio.Queue] = field(default_factory=list)
    # Requests for a partition that has no worker: (deadline, stream, partition, request). A
    # re-registration drops them (the RM's replay covers them); a new owner without a resync
    # takes them; past the deadline they are answered with an error.
    held: collections.deque = field(default_factory=lambda: collections.deque(maxlen=HELD_LIMIT))
    owned_waiters: dict[str, asyncio.Future] = field(default_factory=dict)
    state: RMState = RMState.RUNNING
    registration: Registration | None = None
    # The checksum of the config the RM itself sent last (its registration or UpdateConfiguration);
    # an operator's change makes the registration's differ, and a re-registration rmproxy asked
    # for that brings this one again keeps the operator's (RMRegistry.register)
    rm_sent_checksum: str = ""
    # Set when this rmproxy asked the RM to re-register (its partitions lost their state); a
    # stream the RM opens before it has registered again is ended at once with the same reason.
    resync_reason: str | None = None
    paused_since: float = 0.0  # monotonic seconds
    dropped_responses: int = 0
    # The SI revision the RM speaks (None: not decided yet), how it was decided, and the epoch
    # in which each partition's worker was told (rmproxy.revision)
    revision: Revision | None = None
    revision_why: str = ""
    revision_told: dict[str, int] = field(default_factory=dict)
    # Partition resync (docs/architecture.md, Recovery): the Subscribe queues that declared
    # ``partitionResync``; lost partitions waiting for a new owner, partition -> (reason,
    # monotonic deadline); partitions whose replay has been asked for, partition -> (the streams
    # whose replay-start marker has not come yet, monotonic deadline)
    resync_capable: list[asyncio.Queue] = field(default_factory=list)
    partition_resyncs: dict[str, tuple[str, float]] = field(default_factory=dict)
    replay_gates: dict[str, tuple[set[str], float]] = field(default_factory=dict)

    def compatibility(self) -> CompatChoice:
        """The compatibility switch in effect for the RM (``common.compat.choose``): from its
        registration's extraConfig and buildInfo and the SI revision it speaks."""
        reg = self.registration
        try:
            return choose(reg.extra_config if reg else None, reg.build_info if reg else None, self.revision)
        except ValueError as exc:  # refused at registration: only an old registration can hold it
            return CompatChoice(SEEDS, "default", f"the registration's value is unusable: {exc}")

    def log_compatibility(self, why: str, config: SchedulerConfig | None = None) -> CompatChoice:
        """Log the switch in effect (``why``: what chose it now) and what it changes in the RM's
        config (``config``, else the registration's) that its author should know."""
        choice = self.compatibility()
        log.info("RM %s: compatibility %s, %s", self.rm_id, choice.describe(), why)
        for warning in choice.warnings:
            log.warning("RM %s: %s", self.rm_id, warning)
        if config is None and self.registration is not None:
            try:
                config = load_config(self.registration.config)
            except ConfigError:
                config = None  # (validated at registration)
        for warning in compat_warnings(config, choice.compat) if config is not None else ():
            log.warning("RM %s config: %s", self.rm_id, warning)
        return choice

    @property
    def can_resync_partition(self) -> bool:
        """A subscriber of the RM declared it rebuilds one partition on a ResyncPartition notice."""
        return any(q in self.subscribers for q in self.resync_capable)

    def open_replay_gate(self, partition: str, deadline: float) -> None:
        """Drop the partition's requests on each stream until that stream's replay-start marker."""
        self.replay_gates[partition] = (set(STREAM_KINDS), deadline)

    def replay_marker(self, stream: str) -> None:
        """The stream's replay-start marker came: its requests reach the partitions again."""
        for partition, (waiting, _) in list(self.replay_gates.items()):
            waiting.discard(stream)
            if not waiting:
                del self.replay_gates[partition]

    def gated(self, stream: str, partition: str) -> bool:
        gate = self.replay_gates.get(partition)
        return gate is not None and stream in gate[0]

    def hold(self, stream: str, partition: str, request, deadline: float) -> None:
        self.held.append((deadline, stream, partition, request))

    def take_held(self, partition: str) -> list[tuple[str, object]]:
        taken = [(s, r) for _, s, p, r in self.held if p == partition]
        self.held = collections.deque((h for h in self.held if h[2] != partition), maxlen=HELD_LIMIT)
        return taken

    def expired_held(self, now: float) -> list[tuple[str, str, object]]:
        expired = []
        while self.held and self.held[0][0] <= now:
            _, stream, partition, request = self.held.popleft()
            expired.append((stream, partition, request))
        return expired

    def next_seq(self, partition: str) -> int:
        s = self.seqs.get(partition, 0) + 1
        self.seqs[partition] = s
        return s

    def deliver(self, kind: str, payload: bytes) -> None:
        q = self.streams.get(kind)
        if q is not None:
            q.put_nowait(payload)
            return
        buf = self.buffers[kind]
        if len(buf) == buf.maxlen:
            self.dropped_responses += 1
        buf.append(payload)

    def attach(self, kind: str, queue: asyncio.Queue) -> None:
        old = self.streams.get(kind)
        if old is not None and old is not queue:
            old.put_nowait(Close(None, "replaced by a newer stream of the same RM"))
        self.streams[kind] = queue
        buf = self.buffers[kind]
        while buf:
            queue.put_nowait(buf.popleft())
        self.state = RMState.RUNNING

    def detach(self, kind: str, queue: asyncio.Queue) -> None:
        if self.streams.get(kind) is queue:
            del self.streams[kind]
        if not self.streams and self.state is RMState.RUNNING:
            self.state = RMState.PAUSED
            self.paused_since = time.monotonic()

    def close_streams(self, code, details: str) -> None:
        for q in list(self.streams.values()):
            q.put_nowait(Close(code, details))

    def notify(self, notice) -> None:
        for q in self.subscribers:
            try:
                q.put_nowait(notice)
            except asyncio.QueueFull:  # a subscriber that does not read loses notices, not the proxy
                self.dropped_responses += 1
