"""SI traffic between RMs and the partitions' workers, both ways.

In: an RM's request is checked against its SI revision (``revision.settle``), split per partition
(``split``), and each part goes to the broker stamped with the partition's epoch and the RM's
next sequence number; the allocation stream's parts as rows (``revision.request_rows``). A part
for a partition without a worker is held (``RMSession.hold``) until it has one or its deadline
passes. Out: a worker's outcomes go down the RM's stream unparsed (the allocation stream's rows
written in the RM's revision first); outcomes of an epoch the RM has moved past are dropped.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping, Protocol

from common import korral_pb2, si_pb2
from common.envelope import Envelope, Kind
from common.messages import KINDS, SiRevision, Unroutable
from common.si_rows import NewAllocations
from rmproxy import revision, split
from rmproxy.errors import NO_WORKER_ADVICE
from rmproxy.rms import RMSession

__all__ = ["Router", "Sender", "ASK_BATCH", "HOLD_SECONDS"]

log = logging.getLogger("korral.rmproxy")

HOLD_SECONDS = 30.0  # a request for a partition without a worker waits this long, then is answered
ASK_BATCH = 1000  # asks per SI_ALLOCATION envelope: a 1,000-ask part is read in ~1.5 ms

_KIND_OF_STREAM = {"allocation": Kind.SI_ALLOCATION, "application": Kind.SI_APPLICATION, "node": Kind.SI_NODE}
_STREAM_OF_REQUEST = {v: k for k, v in _KIND_OF_STREAM.items()}
_STREAM_OF_RESPONSE = {Kind.SI_APPLICATION_RESPONSE: "application", Kind.SI_NODE_RESPONSE: "node"}


def _is_marker(req) -> bool:
    """An empty request (only rmID): on a stream of an RM rebuilding a partition, the stream's
    replay-start marker (korral.v1 ResyncPartition)."""
    return all(f.name == "rmID" for f, _ in req.ListFields())


class Sender(Protocol):
    """Where envelopes to the broker go (``BrokerSide``)."""

    def send(self, env: Envelope) -> None: ...


class Router:
    """The SI traffic of the RMs in ``rms`` (see module doc)."""

    def __init__(self, rms: Mapping[str, RMSession], broker: Sender, hold_seconds: float = HOLD_SECONDS) -> None:
        self.rms = rms
        self.broker = broker
        self.hold_seconds = hold_seconds
        self.dropped = 0  # outcomes of an old epoch, malformed rows
        self.dropped_before_replay = 0  # request parts a partition's replay covers (Recovery)

    # -- RM -> workers ---------------------------------------------------------------

    def request(self, stream: str, rm: RMSession, req) -> None:
        """Split one SI request per partition and forward it; answer edge rejections at once.
        Raises ``revision.RevisionError`` (nothing applied) when the RM's SI revision forbids it."""
        if revision.settle(rm, stream, req) is not None:
            log.info("RM %s speaks SI revision %s (%s)", rm.rm_id, rm.revision, rm.revision_why)
            rm.log_compatibility(f"now that its SI revision is {rm.revision}")
            for partition, epoch in list(rm.epochs.items()):
                self._tell_revision(rm, partition, epoch)
        if rm.replay_gates and _is_marker(req):
            rm.replay_marker(stream)
            return
        _, splitter, _, _ = split.STREAMS[stream]
        parts, rejected = splitter(req, rm.rm_id, rm.partitions)
        if rejected is not None:
            rm.deliver(stream, rejected.SerializeToString())
        kind = _KIND_OF_STREAM[stream]
        send = self.broker.send
        for partition, part in parts.items():
            if rm.gated(stream, partition):  # sent before the RM's replay, which covers it
                self.dropped_before_replay += 1
                continue
            epoch = rm.epochs.get(partition)
            if epoch is None:
                rm.hold(stream, partition, part, time.monotonic() + self.hold_seconds)
                continue
            if rm.revision is not None:
                self._tell_revision(rm, partition, epoch)
            if kind is Kind.SI_ALLOCATION:  # asks as rows, the rest beside them
                for body in revision.request_rows(part, ASK_BATCH):
                    send(Envelope(kind, rm.rm_id, partition, epoch, rm.next_seq(partition), body.pack()))
            else:
                send(Envelope(kind, rm.rm_id, partition, epoch, rm.next_seq(partition), part.SerializeToString()))

    def _tell_revision(self, rm: RMSession, partition: str, epoch: int) -> None:
        """Tell the partition's worker the RM's SI revision once per epoch, in the RM's request
        sequence: it reaches the worker before any request that needs it."""
        if rm.revision_told.get(partition) != epoch:
            rm.revision_told[partition] = epoch
            self.broker.send(Envelope(Kind.SI_REVISION, rm.rm_id, partition, epoch, rm.next_seq(partition),
                                      SiRevision(rm.revision.value).wire()))  # type: ignore[union-attr]

    def drop_held(self, rm: RMSession, partition: str) -> int:
        """The partition is rebuilt by the RM's replay, which covers what waited: dropped."""
        return len(rm.take_held(partition))

    def flush_held(self, rm: RMSession, partition: str) -> None:
        """The partition has an owner again without a resync (a new partition): send what waited."""
        for stream, part in rm.take_held(partition):
            self.request(stream, rm, part)

    def expire_held(self, rm: RMSession, now: float) -> None:
        """Answer the RM's held requests past their deadline (``now``: monotonic seconds)."""
        for stream, partition, part in rm.expired_held(now):
            _, _, reject, _ = split.STREAMS[stream]
            resp = reject(part, f"partition [{rm.rm_id}]{partition} has had no worker for "
                                f"{self.hold_seconds:.0f}s: {NO_WORKER_ADVICE}")
            if resp is not None:
                rm.deliver(stream, resp.SerializeToString())

    # -- workers -> RM ---------------------------------------------------------------

    def _outcome_rm(self, env: Envelope) -> RMSession | None:
        """The RM a worker's outcome is for; None (counted) when it is from an epoch the RM has moved past."""
        rm = self.rms.get(env.rm_id)
        if rm is None or rm.epochs.get(env.partition) != env.epoch:
            self.dropped += 1
            return None
        return rm

    def outcome(self, env: Envelope) -> None:
        """A worker's outcome for an RM (``BrokerSide`` hands them over by kind)."""
        self._OUTCOMES[env.kind](self, env)

    def _on_response(self, env: Envelope) -> None:
        if (rm := self._outcome_rm(env)) is not None:
            rm.deliver(_STREAM_OF_RESPONSE[env.kind], env.body)

    def _on_allocations(self, env: Envelope) -> None:
        """A worker's allocation outcomes: new allocations as rows, written in the RM's SI
        revision with the rest beside them, down its stream."""
        if (rm := self._outcome_rm(env)) is None:
            return
        try:
            resp = revision.allocation_response(NewAllocations.decode(env.body), env.partition, rm.revision)
        except (TypeError, ValueError, IndexError) as exc:  # a bug of the worker, not of the RM
            self.dropped += 1
            log.error("dropped new allocations of [%s]%s: malformed rows: %s", env.rm_id, env.partition, exc)
            return
        rm.deliver("allocation", resp)

    def _on_events(self, env: Envelope) -> None:
        rm = self.rms.get(env.rm_id)
        if rm is None or not rm.subscribers:
            return
        batch = korral_pb2.EventBatch(events=[si_pb2.EventRecord.FromString(b) for b in env.body or []])
        rm.notify(korral_pb2.SchedulerNotice(events=batch))

    def _on_scheduling_states(self, env: Envelope) -> None:
        rm = self.rms.get(env.rm_id)
        if rm is None or not rm.subscribers:
            return
        states = [si_pb2.UpdateContainerSchedulingStateRequest.FromString(b) for b in env.body or []]
        rm.notify(korral_pb2.SchedulerNotice(schedulingStates=korral_pb2.SchedulingStates(states=states)))

    _OUTCOMES = {
        Kind.SI_ALLOCATION_RESPONSE: _on_allocations,
        Kind.SI_APPLICATION_RESPONSE: _on_response,
        Kind.SI_NODE_RESPONSE: _on_response,
        Kind.EVENTS: _on_events,
        Kind.SCHEDULING_STATES: _on_scheduling_states,
    }

    def unroutable(self, env: Envelope, unroutable: Unroutable) -> None:
        """An RM's SI request the broker could not route: rejected as the request it came in would be,
        unless it was sent in an epoch the RM has moved past (its worker died): the replay that
        rebuilds the partition, the RM's alone or its whole re-registration, covers it, and a
        rejection would make the RM give up on what it replays."""
        rm = self.rms.get(env.rm_id)
        stream = _STREAM_OF_REQUEST.get(KINDS.get(unroutable.kind or ""))  # type: ignore[arg-type]
        original = unroutable.body
        if rm is None or stream is None or not isinstance(original, bytes):
            return
        if rm.epochs.get(env.partition) != env.epoch:
            self.dropped += 1
            return
        if stream == "allocation":
            resp = revision.reject_rows(original, unroutable.reason)
        else:
            req_type, _, reject, _ = split.STREAMS[stream]
            resp = reject(req_type.FromString(original), unroutable.reason)
        if resp is not None:
            rm.deliver(stream, resp.SerializeToString())
