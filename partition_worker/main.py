"""The partition worker process: owns one partition and runs its scheduling core.

The loop owns the ZeroMQ socket, the clock and Redis; all scheduling happens in
``partition_worker.session.PartitionSession`` (pure, time passed in). Each turn:
handle everything that arrived (a 10,000-ask request is one turn), then
``step(now)`` once — timers and one scheduling cycle — and send the outcomes.

Liveness does not depend on the length of a turn: applying a 200,000-ask request
or the first cycle over it can take seconds, longer than the broker's ``EXPIRY``.
The loop beats between turns; a heartbeat thread beats while the loop is busy in a
handler or a step, so a slow turn is not taken for a dead worker. A hung loop must
still look dead: the thread stops beating once the loop has made no turn for
``STALL_SECONDS``, and the broker's ordinary expiry reassigns the partition.
ZeroMQ sockets are not thread safe, so every use of the socket (poll, recv, send,
close/reconnect) happens under one lock; the loop never holds it while it runs a
handler or a step, only while it polls (at most ``CYCLE_INTERVAL``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import redis
import zmq

from common import addresses, registry, security, si_internal_pb2 as si
from common.config import load_config
from common.config.durations import parse_duration_ns
from common.config.errors import ConfigError
from common.envelope import Envelope, Kind, dispatch, encode
from common.gcpause import SteadyCollector, gc_paused
from common.heartbeat import EXPIRY, INTERVAL
from common.links import broker_dealer
from common.messages import BadQuery, ConfigUpdate, Heartbeat, NotFound, PartitionRemove, Query, Reply, SiRevision
from common.si_revision import Revision
from common.si_rows import RequestRows
from partition_worker.core.settings import CoreSettings
from partition_worker.health import HealthFile, check as check_health
from partition_worker.queries import answer as answer_query
from partition_worker.step_stats import observe_step, observe_wire
from partition_worker.ldap_groups import DEFAULT_SECRETS_DIR, LdapLookup, load_settings
from partition_worker.os_groups import os_lookup
from partition_worker.placement import GroupLookupError

log = logging.getLogger("korral.worker")
# one INFO line per finished app that ran (YuniKorn's core.scheduler.application.usage logger)
usage_log = logging.getLogger("korral.worker.application.usage")

CYCLE_INTERVAL = 0.1  # seconds: a cycle runs at least this often even when nothing arrived
# allocations per step: a burst's allocations leave in parts of this many (about 10 ms of
# cycle each) while the cycle goes on, instead of all at its end
CYCLE_ALLOCATIONS = 1000
# A loop that made no turn for this long is hung, not slow: the heartbeat thread stops so the
# broker declares the worker dead. Far above the slowest honest turn (seconds), far below "never".
STALL_SECONDS = 60.0
RESERVATION_WAIT_TIMEOUT_NS = 60 * 60 * 1_000_000_000  # YuniKorn's reservationWaitTimeout (CoreSettings' default)

_REQUEST_TYPES = {  # read with the internal model: a request of either SI revision
    Kind.SI_APPLICATION: (si.ApplicationRequest, "apply_application_request"),
    Kind.SI_NODE: (si.NodeRequest, "apply_node_request"),
}


@dataclass(slots=True)
class Owned:
    rm_id: str
    partition: str
    epoch: int
    session: Any  # PartitionSession
    last_seq: int = 0
    resolver: str = ""  # the partition's usergroupresolver.type the session's lookup follows


class WorkerLoop:
    def __init__(
        self,
        ctx: zmq.Context,
        broker: str,
        store: registry.RegistryStore,
        name: str,
        pin: str | None = None,
        session_factory: Callable[..., Any] | None = None,
        curve: tuple[str | None, str | None] = (None, None),
        group_lookup: Callable[[str], tuple[str, ...] | None] | None = os_lookup,
        stall_seconds: float = STALL_SECONDS,
        health: HealthFile | None = None,
        ldap_secrets_dir: str = DEFAULT_SECRETS_DIR,
        reservation_wait_timeout_ns: int = RESERVATION_WAIT_TIMEOUT_NS,
    ) -> None:
        if session_factory is None:
            from partition_worker.session import PartitionSession as session_factory  # noqa: N813
        self.ctx = ctx
        self.broker = broker
        self.store = store
        self.name = name
        self.pin = pin
        self.curve = curve  # (own secret certificate, broker's public certificate)
        self.group_lookup = group_lookup  # groups of users whose ugi has none (usergroupresolver "")
        self.ldap_secrets_dir = ldap_secrets_dir  # usergroupresolver ldap: its settings, one file per key
        self.reservation_wait_timeout_ns = reservation_wait_timeout_ns  # CoreSettings' (compatibility 1.9+)
        self.session_factory = session_factory
        self.owned: Owned | None = None
        self.running = True
        self.dropped = 0
        self.sock: zmq.Socket | None = None
        self.broker_expires = 0.0
        self.broker_heard: float | None = None  # monotonic time of the last message from the broker
        self.health = health  # --health-file, for probes
        self.collector = SteadyCollector()  # full GC passes every few minutes, not every few seconds
        self._unsent_logged = 0.0
        self.stall_seconds = stall_seconds
        self._sock_lock = threading.Lock()  # every use of self.sock, from either thread
        self._beat_at = 0.0  # monotonic time of the last heartbeat sent, by either thread
        self._turn_at = 0.0  # monotonic time the loop last started a turn: its sign of progress

    # -- socket ---------------------------------------------------------------------

    def _connect(self) -> None:
        with self._sock_lock:  # the heartbeat thread must not send on a socket being replaced
            if self.sock is not None:
                self.sock.close(0)
            self.sock = broker_dealer(self.ctx, self.broker, self.name, self.curve)
            # no heartbeat before the announcement: from a new identity the broker would answer
            # it with "reannounce", a second announcement for nothing
            self._beat_at = time.monotonic()
        self._announce()
        self.broker_expires = time.monotonic() + EXPIRY

    def _announce(self) -> None:
        owns = None
        if self.owned is not None:
            owns = {"rm_id": self.owned.rm_id, "partition": self.owned.partition, "epoch": self.owned.epoch}
        self._send(Envelope(Kind.WORKER_READY, body={
            "name": self.name, "host": socket.gethostname(), "pid": os.getpid(), "pin": self.pin, "owns": owns}))

    def _send(self, env: Envelope) -> None:
        raw = encode(env)  # outside the lock: a large body must not delay the heartbeat thread
        with self._sock_lock:
            assert self.sock is not None
            try:
                self.sock.send(raw, zmq.NOBLOCK, copy=False)
            except zmq.Again:  # no connection to the broker: unreachable, or it refused our CURVE key
                self.dropped += 1
                now = time.monotonic()
                if now - self._unsent_logged > 10:
                    self._unsent_logged = now
                    log.warning("cannot reach the broker at %s (unreachable, or it refused this worker's "
                                "CURVE key); dropped %s, retrying", self.broker, env.kind)
                return
            if env.kind is Kind.HEARTBEAT:
                self._beat_at = time.monotonic()

    # -- loop -----------------------------------------------------------------------

    def run(self) -> None:
        """Turns until ``running`` is False; the heartbeat thread lives exactly as long."""
        self._turn_at = time.monotonic()
        self._connect()
        beater = threading.Thread(target=self._beat_while_busy, name=f"korral-beat-{self.name}", daemon=True)
        beater.start()
        try:
            while self.running:
                self._turn()
        finally:
            self.running = False
            beater.join()  # after this the caller may close the socket safely

    def _turn(self) -> None:
        self._turn_at = time.monotonic()
        wake = self._turn_at + CYCLE_INTERVAL
        if self.owned is not None:
            deadline = self.owned.session.next_wakeup_ns()
            if deadline is not None:
                wake = min(wake, time.monotonic() + (deadline - time.time_ns()) / 1e9)
        timeout_ms = max(0, int((min(wake, self._beat_at + INTERVAL) - time.monotonic()) * 1000))
        with self._sock_lock:  # held while polling only: at most CYCLE_INTERVAL
            assert self.sock is not None
            arrived = self.sock.poll(timeout_ms, zmq.POLLIN)
        if arrived:
            self._drain()
        # Only now, with everything queued read: a long previous turn left the broker's
        # heartbeats waiting in the socket, which is not silence.
        if time.monotonic() > self.broker_expires:  # broker silent: reconnect and announce again
            log.warning("broker silent for %.0fs, reconnecting to %s", EXPIRY, self.broker)
            self._connect()
        self._step()
        if time.monotonic() >= self._beat_at + INTERVAL:
            self._send(Envelope(Kind.HEARTBEAT))
        if self.health is not None:
            self.health.update(self)
        self.collector.after_turn()  # no full GC pass over the partition inside a request's path

    def _beat_while_busy(self) -> None:
        """Heartbeat thread: beat whenever a beat is due and the loop has not, stop while the
        loop is stalled (no turn for ``stall_seconds``). Ends when ``running`` goes False."""
        stalled = False
        while self.running:
            time.sleep(INTERVAL / 5)
            now = time.monotonic()
            idle = now - self._turn_at
            if idle > self.stall_seconds:
                if not stalled:
                    stalled = True
                    log.error("worker loop made no progress for %.0fs (stuck in a handler or a cycle): "
                              "heartbeats stop so the broker reassigns the partition", idle)
                continue
            if stalled:
                stalled = False
                log.warning("worker loop is making progress again; heartbeats resume")
            if now >= self._beat_at + INTERVAL:
                self._send(Envelope(Kind.HEARTBEAT))  # waits at most one poll for the lock

    def _drain(self) -> None:
        for _ in range(10_000):
            with self._sock_lock:  # released before the handler runs, so the thread can beat
                assert self.sock is not None
                if not self.sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    return  # (cheaper than the zmq.Again a receive would raise)
                raw = self.sock.recv(zmq.NOBLOCK)
            self.broker_heard = time.monotonic()
            self.broker_expires = self.broker_heard + EXPIRY
            if not dispatch(self, raw, self._HANDLERS, f"worker {self.name}"):
                self.dropped += 1

    def _step(self) -> None:
        if self.owned is None:
            return
        o = self.owned
        started = time.perf_counter()
        out = o.session.step(time.time_ns())
        stepped = time.perf_counter()
        allocations = out.allocation_outcomes()
        if allocations is not None:  # new allocations as rows (rmproxy writes their SI), the rest beside them
            self._send(Envelope(Kind.SI_ALLOCATION_RESPONSE, o.rm_id, o.partition, o.epoch, 0, allocations.wire()))
        for kind, msg in (
            (Kind.SI_APPLICATION_RESPONSE, out.application),
            (Kind.SI_NODE_RESPONSE, out.node),
        ):
            if msg is not None:
                self._send(Envelope(kind, o.rm_id, o.partition, o.epoch, 0, msg.SerializeToString()))
        if out.events:
            self._send(Envelope(Kind.EVENTS, o.rm_id, o.partition, o.epoch, 0,
                                [e.SerializeToString() for e in out.events]))
        if out.scheduling_states:
            self._send(Envelope(Kind.SCHEDULING_STATES, o.rm_id, o.partition, o.epoch, 0,
                                [s.SerializeToString() for s in out.scheduling_states]))
        sent = time.perf_counter()
        observe_step(o.session, out, stepped - started)  # cycle metrics for REST, once the answers left
        for line in out.app_summaries:
            usage_log.info("%s", line)
        respond = o.session.last_respond_seconds
        observe_wire(o.session, cycle=stepped - started - respond, respond=respond, send=sent - stepped)

    # -- handlers -------------------------------------------------------------------

    def _on_heartbeat(self, env: Envelope) -> None:
        if Heartbeat.decode(env.body).reannounce:
            self._announce()

    def _on_assign(self, env: Envelope) -> None:
        if self.owned is not None and (self.owned.rm_id, self.owned.partition) != (env.rm_id, env.partition):
            log.warning("assigned [%s]%s while owning [%s]%s: dropping the old one",
                        env.rm_id, env.partition, self.owned.rm_id, self.owned.partition)
        self.owned = None
        error = None
        try:
            session, resolver = self._load_session(env.rm_id, env.partition)
        except (ConfigError, LookupError, redis.RedisError) as exc:
            error = f"worker {self.name} cannot load partition [{env.rm_id}]{env.partition}: {exc}"
            log.error("%s", error)
        else:
            self.owned = Owned(env.rm_id, env.partition, env.epoch, session, resolver=resolver)
            log.info("owning [%s]%s epoch %d", env.rm_id, env.partition, env.epoch)
        self._send(env.reply(Kind.PARTITION_LOADED, {"error": error}))

    def _group_lookup_for(self, config: Any) -> Callable[[str], tuple[str, ...] | None] | None:
        """The group lookup of the partition's ``usergroupresolver``; an LDAP server is checked
        (one bind, bounded) so a config naming an unusable one is refused with the reason."""
        kind = config.usergroupresolver.type
        if kind == "":
            return self.group_lookup
        if kind == "os":
            return os_lookup
        try:
            lookup = LdapLookup(load_settings(self.ldap_secrets_dir))
            lookup.check()
        except (ValueError, GroupLookupError) as exc:
            raise ConfigError(f"partition {config.name}: usergroupresolver ldap: {exc}") from None
        return lookup

    def _load_session(self, rm_id: str, partition: str) -> tuple[Any, str]:
        reg = self.store.load(rm_id)
        if reg is None:
            raise LookupError(f"RM {rm_id} has no registration in Redis")
        config = load_config(reg.config).partition(partition)
        if config is None:
            raise LookupError(f"the config of RM {rm_id} has no partition {partition}")
        session = self.session_factory(rm_id, partition, config,
                                       CoreSettings(group_lookup=self._group_lookup_for(config),
                                                    stage_timer=time.perf_counter,
                                                    cycle_allocation_limit=CYCLE_ALLOCATIONS,
                                                    reservation_wait_timeout_ns=self.reservation_wait_timeout_ns),
                                       created_ns=time.time_ns())
        # the compatibility switch: explicit, or by the RM's build and SI revision (common.compat)
        session.follow_rm(reg.extra_config, reg.build_info)
        return session, config.usergroupresolver.type

    def _on_release(self, env: Envelope) -> None:
        if self.owned is not None and (self.owned.rm_id, self.owned.partition) == (env.rm_id, env.partition):
            log.info("released [%s]%s epoch %d", env.rm_id, env.partition, self.owned.epoch)
            self.owned = None

    def _current(self, env: Envelope) -> Owned | None:
        """The owned partition if env is for it, in its epoch, and not seen before."""
        o = self.owned
        if o is None or (o.rm_id, o.partition) != (env.rm_id, env.partition) or env.epoch != o.epoch:
            self.dropped += 1
            log.debug("dropped %s for [%s]%s epoch %d: not owned in that epoch", env.kind, env.rm_id,
                      env.partition, env.epoch)
            return None
        if env.seq and env.seq <= o.last_seq:
            self.dropped += 1  # a redelivery: requests are idempotent by sequence
            return None
        if env.seq:
            o.last_seq = env.seq
        return o

    def _on_si(self, env: Envelope) -> None:
        o = self._current(env)
        if o is None:
            return
        message_type, method = _REQUEST_TYPES[env.kind]
        t0 = time.perf_counter()
        try:
            request = message_type.FromString(env.body)
        except Exception as exc:  # protobuf's DecodeError or a non-bytes body
            self.dropped += 1
            log.warning("dropped %s for [%s]%s: undecodable body: %s", env.kind, env.rm_id, env.partition, exc)
            return
        t1 = time.perf_counter()
        getattr(o.session, method)(request, time.time_ns())
        observe_wire(o.session, decode=t1 - t0, apply=time.perf_counter() - t1)

    def _on_allocation_rows(self, env: Envelope) -> None:
        """The allocation stream: asks as rows, the rest of the request beside them (common.si_rows)."""
        o = self._current(env)
        if o is None:
            return
        t0 = time.perf_counter()
        try:
            body = RequestRows.unpack(env.body)
        except ValueError as exc:
            self.dropped += 1
            log.warning("dropped %s for [%s]%s: undecodable body: %s", env.kind, env.rm_id, env.partition, exc)
            return
        t1 = time.perf_counter()
        o.session.apply_allocation_rows(body, time.time_ns())
        observe_wire(o.session, decode=t1 - t0, apply=time.perf_counter() - t1)

    def _on_revision(self, env: Envelope) -> None:
        o = self._current(env)
        if o is None:
            return
        value = SiRevision.decode(env.body).revision
        try:
            o.session.set_revision(Revision(value))
        except ValueError:
            self.dropped += 1
            log.warning("dropped %s for [%s]%s: unknown SI revision %r", env.kind, env.rm_id, env.partition, value)

    def _on_config(self, env: Envelope) -> None:
        o = self._current(env)
        if o is None:
            return
        update = ConfigUpdate.decode(env.body)
        error = None
        try:
            config = load_config(update.config).partition(o.partition)
            if config is None:
                raise ConfigError(f"partition {o.partition} is not in the new config")
            resolver = config.usergroupresolver.type
            lookup = self._group_lookup_for(config) if resolver != o.resolver else None
            o.session.update_config(config, time.time_ns(), update.extra_config)
            if resolver != o.resolver:  # checked before anything changed; the old one stays on error
                o.session.core.set_group_lookup(lookup)
                o.resolver = resolver
                log.info("partition [%s]%s: group resolver now %s", o.rm_id, o.partition, resolver or "the default")
        except (ConfigError, ValueError) as exc:
            error = str(exc)
        self._send(env.reply(Kind.CONFIG_RESULT, Reply(update.id, error=error).wire()))

    def _on_remove(self, env: Envelope) -> None:
        """The partition left the RM's config: fail its apps, release everything, tell the RM."""
        o = self._current(env)
        if o is None:
            return
        o.session.stop(time.time_ns())
        self._step()
        self._send(env.reply(Kind.CONFIG_RESULT, Reply(PartitionRemove.decode(env.body).id).wire()))

    def _on_query(self, env: Envelope) -> None:
        """A read for REST/status: answered between cycles, so it is consistent for the partition.
        The answer goes as plain msgpack data: the broker forwards the frame without decoding it."""
        o = self._current(env)
        query = Query.decode(env.body)
        qid = query.id  # first key of the reply: the broker finds the asker by it
        if o is None:
            mine = self.owned is not None and (self.owned.rm_id, self.owned.partition) == (env.rm_id, env.partition)
            now = f" (it owns epoch {self.owned.epoch})" if mine else ""  # type: ignore[union-attr]
            self._send(env.reply(Kind.QUERY_RESULT, Reply(qid, stale=True, error=(
                f"partition [{env.rm_id}]{env.partition} is not owned by worker {self.name} "
                f"in epoch {env.epoch}{now}: its owner is changing, ask again")).wire()))
            return
        with gc_paused():  # a large answer: no GC pass walks it while it is built and packed
            try:
                data = answer_query(o.session, query)
                reply = Reply(qid, not_found=data) if isinstance(data, NotFound) else Reply(qid, data=data)
            except ValueError as exc:
                reply = Reply(qid, error=str(exc) if isinstance(query, BadQuery) else f"bad query {query.what!r}: {exc}")
            self._send(env.reply(Kind.QUERY_RESULT, reply.wire()))

    _HANDLERS: dict[Kind, Callable[["WorkerLoop", Envelope], None]] = {
        Kind.HEARTBEAT: _on_heartbeat,
        Kind.PARTITION_ASSIGN: _on_assign,
        Kind.PARTITION_RELEASE: _on_release,
        Kind.SI_ALLOCATION: _on_allocation_rows,
        Kind.SI_APPLICATION: _on_si,
        Kind.SI_NODE: _on_si,
        Kind.SI_REVISION: _on_revision,
        Kind.CONFIG_UPDATE: _on_config,
        Kind.PARTITION_REMOVE: _on_remove,
        Kind.QUERY: _on_query,
    }


def configure(parser: argparse.ArgumentParser) -> None:
    addresses.add_flag(parser, "--broker", "broker_backend", "broker backend address to connect to")
    addresses.add_flag(parser, "--redis-url", "redis_url", "Redis URL (RM registrations)")
    parser.add_argument("--name", default=os.environ.get("KORRAL_WORKER_NAME", ""),
                        help="worker name shown in status [$KORRAL_WORKER_NAME, default <host>-<pid>]")
    parser.add_argument("--partition", default=os.environ.get("KORRAL_WORKER_PARTITION"),
                        help="pin this worker to one partition, as rmID/name [$KORRAL_WORKER_PARTITION]")
    parser.add_argument("--group-lookup", choices=("os", "none"), default=os.environ.get("KORRAL_GROUP_LOOKUP", "os"),
                        help="groups of a user whose application names none: 'os' looks them up on this host "
                             "(pwd/grp, NSS), 'none' uses the user name as the only group, as YuniKorn v1.2 does "
                             "[$KORRAL_GROUP_LOOKUP, default os]")
    parser.add_argument("--ldap-secrets-dir", default=os.environ.get("KORRAL_LDAP_SECRETS_DIR", DEFAULT_SECRETS_DIR),
                        metavar="DIR",
                        help="settings of the LDAP group resolver (a partition's usergroupresolver: {type: ldap}): "
                             "one file per key (Host, Port, BaseDN, Filter, GroupAttr, ReturnAttr, BindUser, "
                             f"BindPassword, SSL, Insecure), as YuniKorn reads them [$KORRAL_LDAP_SECRETS_DIR, "
                             f"{DEFAULT_SECRETS_DIR}]")
    parser.add_argument("--reservation-wait-timeout", default=os.environ.get("KORRAL_RESERVATION_WAIT_TIMEOUT", "60m"),
                        metavar="DURATION",
                        help="YuniKorn 1.9's reservation wait timeout: an RM on compatibility 1.9 or later has a "
                             "reservation whose ask a queue max or a user/group limit holds cancelled twice this "
                             "long after it was made, as YuniKorn computes it (Go duration, > 0) "
                             "[$KORRAL_RESERVATION_WAIT_TIMEOUT, 60m]")
    parser.add_argument("--stall-seconds", type=float,
                        default=float(os.environ.get("KORRAL_WORKER_STALL_SECONDS", STALL_SECONDS)),
                        help="stop heartbeating when the loop has made no progress for this long, so a hung "
                             "worker is declared dead; keep it above the slowest honest request or cycle "
                             f"[$KORRAL_WORKER_STALL_SECONDS, {STALL_SECONDS:g}]")
    parser.add_argument("--health-file", default=os.environ.get("KORRAL_WORKER_HEALTH_FILE") or None, metavar="FILE",
                        help="rewrite FILE (at most once a second) with the time of the loop's last turn and of "
                             "the last message from the broker, for --probe [$KORRAL_WORKER_HEALTH_FILE]")
    parser.add_argument("--probe", choices=("live", "ready"), default=None,
                        help="check the --health-file of a running worker instead of running one, and exit "
                             "0 or 1: live = its loop turned within --stall-seconds; ready = live and it heard "
                             "the broker within the broker's expiry (for container probes)")
    security.add_curve_client_flags(parser)
    addresses.add_log_level(parser)


def run(args: argparse.Namespace) -> int:
    addresses.setup_logging(args.log_level, "worker")
    if args.stall_seconds <= 0:
        log.error("--stall-seconds must be positive, got %g", args.stall_seconds)
        return 2
    try:
        wait_ns = parse_duration_ns(args.reservation_wait_timeout)
    except ValueError as exc:
        wait_ns, why = 0, str(exc)
    else:
        why = "it must be positive"
    if wait_ns <= 0:
        log.error("--reservation-wait-timeout %r: %s", args.reservation_wait_timeout, why)
        return 2
    if args.probe:
        if not args.health_file:
            print("korral worker --probe needs --health-file (or $KORRAL_WORKER_HEALTH_FILE)", file=sys.stderr)
            return 2
        healthy, why = check_health(args.health_file, args.probe, args.stall_seconds)
        print(why, file=sys.stdout if healthy else sys.stderr)
        return 0 if healthy else 1
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    store = registry.RegistryStore(registry.connect(args.redis_url))
    ctx = zmq.Context()
    loop = WorkerLoop(ctx, args.broker_backend, store, name, pin=args.partition,
                      curve=(args.curve_secret, args.curve_server),
                      group_lookup=os_lookup if args.group_lookup == "os" else None,
                      stall_seconds=args.stall_seconds,
                      health=HealthFile(args.health_file) if args.health_file else None,
                      ldap_secrets_dir=args.ldap_secrets_dir, reservation_wait_timeout_ns=wait_ns)

    def stop(signum, frame):  # noqa: ARG001
        loop.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("worker %s connecting to %s", name, args.broker_backend)
    try:
        loop.run()
    except security.SecurityError as exc:
        raise SystemExit(f"korral worker: {exc}") from None
    finally:
        if loop.sock is not None:
            loop.sock.close(0)
        ctx.term()
    return 0
