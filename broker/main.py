"""The broker process: a ZeroMQ router between rmproxies (frontend) and workers (backend).

The socket loop is here; every decision is in ``broker.table.RoutingTable``.
Each loop turn handles what arrived, then purges dead peers and sends
heartbeats (Majordomo's shape). Bad frames are counted, logged and dropped.

Routed traffic (SI requests, queries and config changes one way; outcomes and answers the
other) is read header-only (``decode_header``) and forwarded as the very frame received: a
42 MB query answer is neither copied, decoded nor re-encoded here. Everything the broker acts
on itself (hello, registration, heartbeats, status, partition loaded) is decoded fully.
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import time
from typing import Callable

import redis
import zmq
from zmq.utils.monitor import recv_monitor_message

from broker.table import EpochUnavailable, RoutingTable, Send
from common import addresses, registry, security
from common.envelope import Envelope, EnvelopeError, Kind, RawEnvelope, decode_header, decode_typed, encode
from common.heartbeat import INTERVAL
from common.messages import Heartbeat, ProxyHello, RMPartitions, WorkerReady

__all__ = ["Broker", "EpochSource", "REANNOUNCE", "configure", "run"]

log = logging.getLogger("korral.broker")

_WORKER_OUTCOMES = {
    Kind.SI_ALLOCATION_RESPONSE, Kind.SI_APPLICATION_RESPONSE, Kind.SI_NODE_RESPONSE,
    Kind.EVENTS, Kind.SCHEDULING_STATES, Kind.CONFIG_RESULT, Kind.QUERY_RESULT,
}
_PROXY_ROUTED = {Kind.SI_ALLOCATION, Kind.SI_APPLICATION, Kind.SI_NODE, Kind.SI_REVISION,
                 Kind.CONFIG_UPDATE, Kind.PARTITION_REMOVE, Kind.QUERY}
# Tells a peer the broker does not know it (the broker restarted): announce yourself again.
REANNOUNCE = Envelope(Kind.HEARTBEAT, body=Heartbeat(reannounce=True).wire())
_PROBE = encode(Envelope(Kind.HEARTBEAT))
# After a connection closed, the peers that used its file descriptor are probed for this long:
# the socket drops a dead peer's pipe a moment after the monitor reports the close.
PROBE_WINDOW = 0.5
PROBE_INTERVAL_MS = 10
# The broker takes epochs from Redis inside its loop, which must not stall its heartbeats (a
# peer hearing nothing for EXPIRY = 2.5 s reconnects and its RMs re-register): each call to Redis
# is bounded, and once Redis failed it is not asked again for a while (each epoch asked for
# meanwhile fails at once).
REDIS_TIMEOUT = 0.5
REDIS_RETRY_AFTER = 1.0


class EpochSource:
    """``next_epoch`` for the routing table: Redis ``INCR``, ``EpochUnavailable`` when Redis
    cannot be reached (and, for ``retry_after`` seconds after that, without trying)."""

    def __init__(self, store: registry.RegistryStore, retry_after: float = REDIS_RETRY_AFTER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.retry_after = retry_after
        self.clock = clock
        self.failed_at: float | None = None
        self.error = ""

    def __call__(self, rm_id: str, partition: str, floor: int) -> int:
        now = self.clock()
        if self.failed_at is not None and now - self.failed_at < self.retry_after:
            raise EpochUnavailable(f"Redis unreachable {now - self.failed_at:.1f}s ago: {self.error}")
        try:
            epoch = self.store.next_epoch(rm_id, partition, floor)
        except redis.RedisError as exc:
            self.failed_at, self.error = self.clock(), str(exc)
            raise EpochUnavailable(f"Redis unreachable: {exc}") from None
        self.failed_at = None
        return epoch


class Broker:
    def __init__(self, ctx: zmq.Context, frontend: str, backend: str, table: RoutingTable,
                 secure: Callable[[list[zmq.Socket]], None] | None = None) -> None:
        self.table = table
        self.frontend = ctx.socket(zmq.ROUTER)
        self.backend = ctx.socket(zmq.ROUTER)
        for sock in (self.frontend, self.backend):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            sock.setsockopt(zmq.RCVHWM, 100_000)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a vanished peer's messages are dropped, not raised
        if secure is not None:  # CURVE options must be set before bind
            secure([self.frontend, self.backend])
        self.frontend.bind(frontend)
        self.backend.bind(backend)
        # A killed peer is noticed at once, not after its missed heartbeats: the socket monitor
        # reports the file descriptor of a closed connection, and each message tells which
        # descriptor its sender uses (SRCFD). A descriptor is reused as soon as it is closed, so a
        # new peer's message can arrive before the monitor's report of the old peer's close: the
        # descriptor alone does not name the peer that went away. Every peer seen on it is a
        # suspect, and a suspect is gone when the socket has no connection to it any more (a
        # send with ROUTER_MANDATORY fails with EHOSTUNREACH), not before.
        self.monitors = {sock.get_monitor_socket(zmq.EVENT_DISCONNECTED): sock
                         for sock in (self.frontend, self.backend)}
        self.peer_fd: dict[bytes, int] = {}  # identity -> the descriptor of its last message
        self.fd_peers: dict[int, set[bytes]] = {}  # descriptor -> identities seen on it
        self.suspects: dict[bytes, float] = {}  # identity -> probed until (monotonic seconds)
        self.running = True

    def close(self) -> None:
        for sock in (self.frontend, self.backend):
            sock.disable_monitor()
        for mon in self.monitors:
            mon.close(0)
        self.frontend.close(0)
        self.backend.close(0)

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.frontend, zmq.POLLIN)
        poller.register(self.backend, zmq.POLLIN)
        for mon in self.monitors:
            poller.register(mon, zmq.POLLIN)
        next_beat = time.monotonic()
        while self.running:
            timeout_ms = max(0, int((next_beat - time.monotonic()) * 1000))
            if self.suspects:
                timeout_ms = min(timeout_ms, PROBE_INTERVAL_MS)
            events = dict(poller.poll(timeout_ms))
            self.table.queue_depth = 0
            if self.frontend in events:
                self._drain(self.frontend, self._from_proxy, _PROXY_ROUTED)
            if self.backend in events:
                self._drain(self.backend, self._from_worker, _WORKER_OUTCOMES)
            for mon in self.monitors:
                if mon in events:
                    self._on_monitor(mon)
            if self.suspects:
                self._probe_suspects(time.monotonic())
            now = time.monotonic()
            if now >= next_beat:
                try:
                    self._send(self.table.purge(now))
                except redis.RedisError as exc:
                    log.error("could not reassign partitions, Redis unavailable: %s", exc)
                self._send(self.table.heartbeats(now))
                next_beat = now + INTERVAL
            elif self.table.changed:  # every rmproxy's view follows each change at once
                self._send(self.table.status_push(now))

    def _drain(self, sock: zmq.Socket, handle, forwarded: set[Kind]) -> None:
        """Handle everything queued on sock (bounded, so one side cannot starve the other);
        envelopes of the ``forwarded`` kinds are handled undecoded (RawEnvelope), the others with
        their body decoded (a bad body is a bad frame)."""
        for _ in range(10_000):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self.table.queue_depth += 1
            identity = frames[0].bytes
            self._seen(identity, frames[-1].get(zmq.SRCFD))
            if len(frames) != 2:
                self.table.bad_frames += 1
                log.warning("dropped a message of %d frames (expected identity + envelope)", len(frames))
                continue
            frame = frames[1]
            try:
                env: Envelope | RawEnvelope = decode_header(frame)
                if env.kind not in forwarded:
                    env = decode_typed(frame)
            except EnvelopeError as exc:
                self.table.bad_frames += 1
                log.warning("dropped from %r: %s", identity, exc)
                continue
            try:
                self._send(handle(identity, env, time.monotonic()), origin=sock)
            except redis.RedisError as exc:  # epochs live in Redis; the rest keeps routing
                log.error("could not handle %s from %r, Redis unavailable: %s", env.kind, identity, exc)

    def _on_monitor(self, mon: zmq.Socket) -> None:
        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                break
            if event["event"] == zmq.EVENT_DISCONNECTED:
                until = time.monotonic() + PROBE_WINDOW
                for ident in self.fd_peers.get(int(event["value"]), ()):
                    self.suspects[ident] = until
        self._probe_suspects(time.monotonic())

    def _seen(self, identity: bytes, fd: int) -> None:
        old = self.peer_fd.get(identity)
        if old == fd:
            return
        if old is not None:
            self._unmap(identity)
        self.peer_fd[identity] = fd
        self.fd_peers.setdefault(fd, set()).add(identity)

    def _unmap(self, identity: bytes) -> None:
        fd = self.peer_fd.pop(identity, None)
        peers = self.fd_peers.get(fd)  # type: ignore[arg-type]
        if peers is not None:
            peers.discard(identity)
            if not peers:
                del self.fd_peers[fd]  # type: ignore[arg-type]

    def _probe_suspects(self, now: float) -> None:
        """Declare gone each suspect the socket has no connection to; forget the others once
        their probing window is over (they are alive: their descriptor was reused)."""
        for ident, until in list(self.suspects.items()):
            if ident in self.table.workers:
                sock = self.backend
            elif ident in self.table.proxies:
                sock = self.frontend
            else:  # already gone (heartbeats) or never announced
                del self.suspects[ident]
                self._unmap(ident)
                continue
            if not self._connected(sock, ident):
                del self.suspects[ident]
                self._unmap(ident)
                self._send(self._disconnected(ident))
            elif now >= until:
                del self.suspects[ident]

    @staticmethod
    def _connected(sock: zmq.Socket, ident: bytes) -> bool:
        """Whether ``sock`` still has a connection to ``ident``: a heartbeat sent with
        ROUTER_MANDATORY fails with EHOSTUNREACH when it has none (a full queue is connected)."""
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        try:
            sock.send_multipart([ident, _PROBE], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            return exc.errno != errno.EHOSTUNREACH
        finally:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        return True

    def _disconnected(self, ident: bytes) -> list[Send]:
        if ident in self.table.workers:
            log.warning("worker %s disconnected", self.table.workers[ident].name)
            return self.table.worker_gone(ident, "its connection closed")
        if ident in self.table.proxies:
            log.info("rmproxy %r disconnected", ident)
            self.table.proxy_gone(ident)
        return []

    def _from_proxy(self, ident: bytes, env: Envelope, now: float) -> list[Send]:
        t = self.table
        if env.kind is Kind.STATUS:  # a read-only status query (korral status --broker): not a proxy
            return [(ident, Envelope(Kind.STATUS, body=t.status(now)))]
        if env.kind is Kind.PROXY_HELLO:
            return t.proxy_hello(ident, env.body, now)
        handler = _FROM_PROXY.get(env.kind)
        if handler is None:
            t.bad_frames += 1
            log.warning("dropped %s from rmproxy %r: not a proxy message", env.kind, ident)
            return []
        sends: list[Send] = []
        if not t.alive(ident, now):  # the broker restarted: learn the proxy's RMs again
            t.proxy_hello(ident, ProxyHello(), now)
            sends.append((ident, REANNOUNCE))
        return sends + handler(t, ident, env, now)

    def _from_worker(self, ident: bytes, env: Envelope, now: float) -> list[Send]:
        t = self.table
        if env.kind is Kind.WORKER_READY:
            hello = WorkerReady.decode(env.body)
            log.info("worker %s ready (%s)", hello.name, ident.hex())
            return t.worker_ready(ident, hello, now)
        if not t.alive(ident, now):  # forgotten (missed heartbeats): what it sends is stale
            if env.kind in _WORKER_OUTCOMES:
                t.stale_outcomes[env.kind.value] += 1
            return [(ident, REANNOUNCE)]
        handler = _FROM_WORKER.get(env.kind)
        if handler is None:
            t.bad_frames += 1
            log.warning("dropped %s from worker %r: not a worker message", env.kind, ident)
            return []
        return handler(t, ident, env, now)

    def _send(self, sends: list[Send], origin: zmq.Socket | None = None) -> None:
        """Send each envelope to its peer: a known worker on the backend, a known rmproxy on the
        frontend, a peer the table does not know (told to re-announce) where it spoke from."""
        for ident, env in sends:
            if ident in self.table.workers:
                sock = self.backend
            elif ident in self.table.proxies or origin is None:
                sock = self.frontend
            else:
                sock = origin
            if env.kind is Kind.PARTITION_ASSIGN:
                log.info("assigning [%s]%s epoch %d to %s", env.rm_id, env.partition, env.epoch,
                         self.table.workers[ident].name)
            # a forwarded frame goes out as received (ZeroMQ shares its buffer, no copy)
            payload = env.frame if isinstance(env, RawEnvelope) else encode(env)
            try:
                sock.send_multipart([ident, payload], zmq.NOBLOCK, copy=False)
            except zmq.ZMQError as exc:
                log.warning("could not send %s to %r: %s", env.kind, ident, exc)


def _partitions(env: Envelope) -> tuple[str, ...]:
    return RMPartitions.decode(env.body).partitions


# What the broker does with each kind of message, once the sender is known to be alive.
_Handler = Callable[[RoutingTable, bytes, Envelope, float], list[Send]]
_FROM_PROXY: dict[Kind, _Handler] = {
    Kind.HEARTBEAT: lambda t, ident, env, now: t.proxy_report(ident, env.body) or [],
    Kind.RM_REGISTER: lambda t, ident, env, now: t.rm_register(ident, env.rm_id, _partitions(env), now),
    Kind.RM_UNREGISTER: lambda t, ident, env, now: t.rm_unregister(env.rm_id),
    Kind.RM_PARTITIONS: lambda t, ident, env, now: t.rm_partitions(env.rm_id, _partitions(env)),
    **{kind: (lambda t, ident, env, now: t.route(ident, env)) for kind in _PROXY_ROUTED},
}
_FROM_WORKER: dict[Kind, _Handler] = {
    Kind.HEARTBEAT: lambda t, ident, env, now: [],
    Kind.PARTITION_LOADED: lambda t, ident, env, now: t.partition_loaded(ident, env),
    **{kind: (lambda t, ident, env, now: t.to_proxy(ident, env)) for kind in _WORKER_OUTCOMES},
}


def configure(parser: argparse.ArgumentParser) -> None:
    addresses.add_flag(parser, "--frontend", "broker_frontend", "ZeroMQ address to bind for rmproxies")
    addresses.add_flag(parser, "--backend", "broker_backend", "ZeroMQ address to bind for workers")
    addresses.add_flag(parser, "--redis-url", "redis_url", "Redis URL (partition epochs)")
    security.add_curve_server_flags(parser)
    addresses.add_log_level(parser)


def run(args: argparse.Namespace) -> int:
    addresses.setup_logging(args.log_level, "broker")
    store = registry.RegistryStore(registry.connect(args.redis_url, timeout=REDIS_TIMEOUT))
    table = RoutingTable(EpochSource(store))
    ctx = zmq.Context()
    auth = None

    def secure(sockets: list[zmq.Socket]) -> None:
        nonlocal auth
        auth = security.secure_server(ctx, sockets, args.curve_secret, args.curve_allowed)

    try:
        broker = Broker(ctx, args.broker_frontend, args.broker_backend, table, secure=secure)
    except security.SecurityError as exc:
        raise SystemExit(f"korral broker: {exc}") from None
    except zmq.ZMQError as exc:
        raise SystemExit(f"korral broker: cannot bind {args.broker_frontend} / {args.broker_backend}: {exc}") from None

    def stop(signum, frame):  # noqa: ARG001
        broker.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("broker listening: frontend %s, backend %s", args.broker_frontend, args.broker_backend)
    try:
        broker.run()
    finally:
        broker.close()
        if auth is not None:
            auth.stop()
        ctx.term()
    return 0
