"""rmproxy's requests to partitions' workers and their replies: one id counter, one timeout, one
table of pending futures, for everything rmproxy asks a worker and waits for (config updates,
partition removal, REST reads).

A request goes out through the broker stamped with a fresh id; the worker's answer
(CONFIG_RESULT, QUERY_RESULT) carries the id back and ``answer`` resolves the waiting request.
The broker keys the way back to the asking rmproxy by the id, so ids are unique across rmproxies
(a random start). A request that gets no answer within ``TIMEOUT`` raises ``NoAnswer``; an answer
that comes later finds nobody waiting and is dropped. A request whose worker is known to be gone
(``fail_partition``: the partition lost that epoch; ``fail_all``: the broker restarted with it in
flight) is answered at once with an ``unavailable`` error instead of waiting out the timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from typing import Callable

import msgpack

from common.envelope import Envelope, Kind
from common.gcpause import gc_paused
from common.messages import ConfigUpdate, PartitionRemove, Query, Reply, with_request_id

__all__ = ["WorkerRequests", "NoAnswer", "TIMEOUT"]

TIMEOUT = 5.0  # seconds a worker has to answer a request


class NoAnswer(Exception):
    """The worker did not answer within the timeout; the message names the partition."""


class WorkerRequests:
    def __init__(self, send: Callable[[Envelope], None], timeout: float = TIMEOUT) -> None:
        self._send = send
        self.timeout = timeout
        # request id -> its waiting future and where it went (rm_id, partition, epoch)
        self.pending: dict[int, tuple[asyncio.Future[Reply], tuple[str, str, int]]] = {}
        self._ids = itertools.count(secrets.randbits(40) << 20)

    async def ask(self, kind: Kind, rm_id: str, partition: str, epoch: int, seq: int,
                  body: ConfigUpdate | PartitionRemove | Query) -> Reply:
        """Send ``body`` to the owner of ``[rm_id]partition`` in ``epoch`` (``seq`` 0: outside the
        RM's request sequence) and wait for the reply; NoAnswer after ``timeout``."""
        qid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[qid] = (fut, (rm_id, partition, epoch))
        try:
            self._send(Envelope(kind, rm_id, partition, epoch, seq, with_request_id(body, qid).wire()))
            return await asyncio.wait_for(fut, self.timeout)
        except asyncio.TimeoutError:
            raise NoAnswer(f"partition [{rm_id}]{partition}: no answer from its worker "
                           f"within {self.timeout:.0f}s") from None
        finally:
            self.pending.pop(qid, None)

    def fail_partition(self, rm_id: str, partition: str, epoch: int, reason: str) -> None:
        """``[rm_id]partition`` lost ``epoch`` (its worker died): its requests of that epoch or
        before end now, UNAVAILABLE-style (the caller retries), instead of after the timeout."""
        for qid, (_, (r, p, e)) in list(self.pending.items()):
            if r == rm_id and p == partition and e <= epoch:
                self.answer(Reply(qid, error=f"partition [{rm_id}]{partition} lost epoch {e}: {reason}",
                                  unavailable=True))

    def fail_all(self, reason: str) -> None:
        """Every request in flight went through a broker that is gone: each ends now."""
        for qid, (_, (r, p, _)) in list(self.pending.items()):
            self.answer(Reply(qid, error=f"partition [{r}]{p}: {reason}; the request was lost with it",
                              unavailable=True))

    def answer(self, reply: Reply) -> None:
        """A reply from a worker (or the broker's word that the request could not be routed)."""
        fut, _ = self.pending.pop(reply.id or 0, (None, None))
        if fut is None or fut.done():
            return
        if reply.packed is not None:  # a worker's answer, msgpack-encoded once by the worker
            with gc_paused():
                reply = Reply(reply.id, msgpack.unpackb(reply.packed, raw=False, strict_map_key=False))
        fut.set_result(reply)
