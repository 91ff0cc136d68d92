"""rmproxy's side of the broker: the link, the one ownership view, requests to workers and
their replies, liveness (hello, heartbeats, reconnecting), and every message the broker sends.

The broker's messages are dispatched by kind (``_HANDLERS``). What concerns the stack itself
(STATUS, heartbeats, the replies to requests) is handled here; ownership changes update the
view here and then go to the RMs' side (``RMSide``: the RM registry), workers' answers to RMs
to the router (``OutcomeSink``). Neither is imported: each is attached as what it offers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import Any, Callable, Mapping, Protocol

from common.envelope import Envelope, Kind, decode_for
from common.gcpause import gc_paused
from common.heartbeat import EXPIRY, INTERVAL
from common.messages import (Heartbeat, PartitionLost, PartitionOwned, ProxyHello, Reply, Status,
                             Unroutable)
from rmproxy.broker_link import BrokerLink
from rmproxy.cluster_view import ClusterView
from rmproxy.worker_requests import WorkerRequests

__all__ = ["BrokerSide", "RMSide", "OutcomeSink", "LARGE_FRAME"]

log = logging.getLogger("korral.rmproxy")

LARGE_FRAME = 1 << 20  # bytes; a frame this large is decoded with the cyclic GC paused


class RMSide(Protocol):
    """What the broker side tells the RMs this rmproxy holds (``RMRegistry``)."""

    def rm_report(self) -> dict[str, dict]:
        """The RMs held now: rmID -> {"state", "partitions"}."""

    def partition_owned(self, rm_id: str, partition: str, epoch: int, owned: PartitionOwned) -> None:
        """``owned.worker`` owns the partition in ``epoch`` (or failed to load it: ``owned.error``)."""

    def partition_lost(self, rm_id: str, partition: str, epoch: int, reason: str) -> None:
        """The owner of the partition in ``epoch`` is gone."""

    def broker_reset(self, reason: str) -> None:
        """What was in flight through the broker may be lost (it restarted, or went silent)."""

    def registration_unroutable(self, rm_id: str, reason: str) -> None:
        """The broker could not take the RM's registration (no epoch: Redis unreachable)."""


class OutcomeSink(Protocol):
    """Where workers' answers to RMs go (``Router``)."""

    def outcome(self, env: Envelope) -> None:
        """A worker's SI response, events or scheduling states."""

    def unroutable(self, env: Envelope, unroutable: Unroutable) -> None:
        """An SI request the broker could not route."""


class BrokerSide:
    """The link to the broker and what it tells (see module doc); ``attach`` the RM side and the
    outcome sink before ``run``."""

    def __init__(self, address: str, name: str, curve: tuple[str | None, str | None] = (None, None)) -> None:
        self.address = address
        self.name = name
        self.curve = curve  # (own secret certificate, broker's public certificate)
        self.link = BrokerLink(address, f"proxy-{name}", curve, self._on_frame)
        self.view = ClusterView()  # who owns which partition in which epoch, and the rest of the stack
        # requests to workers waiting for their replies (config updates, partition removal, REST reads)
        self.requests = WorkerRequests(lambda env: self.send(env))
        self.dropped = 0
        self._rms: RMSide | None = None
        self._outcomes: OutcomeSink | None = None

    def attach(self, rms: RMSide, outcomes: OutcomeSink) -> None:
        self._rms, self._outcomes = rms, outcomes

    # -- the link ---------------------------------------------------------------------

    def send(self, env: Envelope) -> None:
        self.link.send(env)

    @property
    def connected(self) -> bool:
        return self.view.known and self.link.alive

    def cluster(self) -> dict[str, Any]:
        """The stack as ``korral status`` shows it: the broker's view (as of its last message,
        ``viewAgeMs``) with this rmproxy's own RMs as they are now; {} when not connected."""
        if not self.connected:
            return {}
        return self.view.document({"name": self.name, "host": socket.gethostname(), "pid": os.getpid()},
                                  self._report())

    def _report(self) -> dict[str, dict]:
        return self._rms.rm_report() if self._rms is not None else {}

    def _connect(self) -> None:
        self.link.connect()
        self.view.reset()
        self._hello()

    def _hello(self) -> None:
        self.send(Envelope(Kind.PROXY_HELLO, body=ProxyHello(
            self.name, socket.gethostname(), os.getpid(),
            {rm_id: tuple(held["partitions"]) for rm_id, held in self._report().items()},
        ).wire()))

    async def run(self) -> None:
        """Heartbeat the broker and reconnect when it goes silent (the link receives)."""
        self._connect()
        while True:
            await asyncio.sleep(INTERVAL)
            self.send(Envelope(Kind.HEARTBEAT, body=Heartbeat(rms=self._report()).wire()))
            if not self.link.alive:
                log.warning("broker silent for %.0fs, reconnecting to %s", EXPIRY, self.address)
                self._connect()
                self._reset("the broker stopped answering")

    def _reset(self, reason: str) -> None:
        """Requests to workers in flight end: their replies would come back through a broker that
        no longer knows who asked. Then the RMs' side hears it."""
        self.requests.fail_all(reason)
        if self._rms is not None:
            self._rms.broker_reset(reason)

    # -- what the broker sends ---------------------------------------------------------

    def _on_frame(self, raw: Any) -> None:
        """One frame from the broker (bytes or a ZeroMQ frame): decode, then its handler."""
        # a worker's large answer: thousands of objects, nothing cyclic
        with gc_paused() if len(raw) > LARGE_FRAME else contextlib.nullcontext():
            got = decode_for(raw, self._HANDLERS, f"rmproxy {self.name}")
            if got is None:
                self.dropped += 1
                return
            env, handler = got
            handler(self, env)

    def _on_heartbeat(self, env: Envelope) -> None:
        if Heartbeat.decode(env.body).reannounce:
            self._hello()
            self._reset("the broker restarted")

    def _on_status(self, env: Envelope) -> None:
        self.view.on_status(Status.decode(env.body).doc)

    def _on_owned(self, env: Envelope) -> None:
        owned = PartitionOwned.decode(env.body)
        if owned.error is None:
            self.view.on_owned(env.rm_id, env.partition, env.epoch, owned.worker)
        if self._rms is not None:
            self._rms.partition_owned(env.rm_id, env.partition, env.epoch, owned)

    def _on_lost(self, env: Envelope) -> None:
        reason = PartitionLost.decode(env.body).reason
        self.view.on_lost(env.rm_id, env.partition, env.epoch, reason)
        self.requests.fail_partition(env.rm_id, env.partition, env.epoch, reason)
        if self._rms is not None:
            self._rms.partition_lost(env.rm_id, env.partition, env.epoch, reason)

    def _on_outcome(self, env: Envelope) -> None:
        if self._outcomes is not None:
            self._outcomes.outcome(env)

    def _on_reply(self, env: Envelope) -> None:
        self.requests.answer(Reply.decode(env.body))

    def _on_unroutable(self, env: Envelope) -> None:
        """The broker could not route a request: a request to a worker is answered with the
        broker's reason; an RM's SI request goes to the outcome sink to be rejected."""
        unroutable = Unroutable.decode(env.body)
        log.warning("unroutable %s for [%s]%s: %s", unroutable.kind, env.rm_id, env.partition, unroutable.reason)
        if isinstance(unroutable.body, dict):  # a config update or a query waiting for its reply
            self.requests.answer(Reply(unroutable.request_id, error=unroutable.reason, unavailable=True))
        elif unroutable.kind == Kind.RM_REGISTER.value:
            if self._rms is not None:
                self._rms.registration_unroutable(env.rm_id, unroutable.reason)
        elif self._outcomes is not None:
            self._outcomes.unroutable(env, unroutable)

    _HANDLERS: Mapping[Kind, Callable[["BrokerSide", Envelope], None]] = {
        Kind.HEARTBEAT: _on_heartbeat,
        Kind.STATUS: _on_status,
        Kind.PARTITION_OWNED: _on_owned,
        Kind.PARTITION_LOST: _on_lost,
        Kind.SI_ALLOCATION_RESPONSE: _on_outcome,
        Kind.SI_APPLICATION_RESPONSE: _on_outcome,
        Kind.SI_NODE_RESPONSE: _on_outcome,
        Kind.EVENTS: _on_outcome,
        Kind.SCHEDULING_STATES: _on_outcome,
        Kind.CONFIG_RESULT: _on_reply,
        Kind.QUERY_RESULT: _on_reply,
        Kind.UNROUTABLE: _on_unroutable,
    }
