"""The network-fault soak: Korral spread over network-namespace hosts, two RMs under load, network
faults (``tests/e2e/netfaults.py``) put in and healed one after another, alone or two at once, and
after every heal the checks below.

Layout (one ``NetLab``; every process on a host of its own)::

    redis  : redis-server (password)        broker : korral broker
    proxy  : korral rmproxy                 w1..w6 : korral worker (4 partitions, 2 spares)
    rm     : the RMs' way in: portals to rmproxy's gRPC and REST ports

The two RMs are the chaos soak's ``SoakRM`` (``tests/e2e/soak_rm.py``, client-based, two
partitions each, a ``Load`` asking and finishing tasks all the time); they run in the test
process and reach rmproxy through the ``rm`` host's portals (``NetLab.portal``), so their
traffic crosses the lab's network from there, and a fault of the ``rm`` host is a fault of
the RMs' link.

Fault kinds (``KINDS``), each with its target, hold time and parameters drawn from the seed (the
targets of a kind in a round-robin of their own: 100 faults put one-way loss on every link kind
in both directions, delay and loss on every link):

- ``partition-short`` / ``partition-long``: one host (any role) cut off from all others for
  less / more than the heartbeat expiry (2.5 s);
- ``one-way``: on one link kind (worker-broker, rmproxy-broker, broker-redis, rmproxy-redis,
  worker-redis) the packets of one direction lost;
- ``zombie``: the owner of a partition first has its packets to the broker held 4 s (past the
  expiry: the broker declares it gone and its RM re-registers, while it goes on scheduling the
  requests that reach it and its answers of the old epoch arrive late), then is cut from the
  broker only (it still reaches Redis and the rmproxy's host) once its partition has another
  owner, then healed: it comes back believing it owns the partition (without NFQUEUE, the first
  phase is one-way loss instead, and fewer of its answers come back);
- ``delay`` (20-300 ms, jitter up to half of it), ``loss`` (5-40 %), ``flap`` (down and up
  every 0.5-2.5 s) on a link (the kinds above, or the RMs' link to rmproxy), or a host for flap;
- ``broker-during-move``: the owner of a partition cut off; as soon as its partition is moving
  (lost, or the RM asked to re-register), the broker's host is cut off too; both healed;
- ``redis-during-move``: the link to Redis of the broker, rmproxy or every spare cut (or one
  way), and then the owner of a partition cut off, so the partition moves while the epochs and
  the registration it needs live across a broken link.

A step may mix in a second fault (``mixed``): a partition, one-way loss, delay, loss or flap on
another target, put in with the first and healed with it.

After every heal (``NetSoak.run_step``): every partition of both RMs schedules again; every REST
read path of every partition answers 200 within ``READ_BUDGET`` of the heal and the RMs' last
re-registration; then, with the load paused, every pending ask is allocated once there is room
(0 lost), each partition holds exactly its RM's allocations (none doubled, no node over
capacity), each partition has one owner in the broker's table and exactly that worker believes
it owns it (no zombie left), the RMs saw no contract violation (an allocation for an unknown
ask or a key allocated twice is how a zombie's allocation would show), and every process still
runs. Recorded per fault: heal -> scheduling again and heal -> every read answering (timed side
by side), the longest a partition went without an allocation (the outage), the RM
re-registrations it caused, the partitions that moved, the zombie outcomes the broker dropped.
"""

from __future__ import annotations

import collections
import json
import random
import shutil
import statistics
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import Background, wait_until
from tests.e2e.netfaults import Fault, Injector, delay_unavailable_reason
from tests.e2e.netns import Host, NetLab, Proc, tails
from tests.e2e.soak import make_room, scheduler_partition, wait_reads, wait_scheduling
from tests.e2e.soak_rm import OP_TIMEOUT, PARTITIONS, Load, SoakRM, _now, http_get

__all__ = ["NetStack", "NetSoak", "PausableLoad", "Step", "KINDS", "hold"]

REDIS_PASSWORD = "netfaults"
FRONTEND_PORT, BACKEND_PORT, REDIS_PORT, SI_PORT, REST_PORT = 5555, 5556, 6379, 9090, 9080
RM_IDS = ("rm-a", "rm-b")
WORKERS = 6  # the RMs' 4 partitions and 2 spares
KINDS = ("partition-short", "partition-long", "one-way", "zombie", "delay", "loss", "flap", "broker-during-move",
         "redis-during-move")
MIXABLE = ("partition-short", "partition-long", "one-way", "delay", "loss", "flap")  # (a second fault)
LINKS = ("worker-broker", "rmproxy-broker", "broker-redis", "rmproxy-redis", "worker-redis")
RM_LINK = "rm-rmproxy"  # delay, loss and flap also on the RMs' own link
HOST_ROLES = ("redis", "broker", "proxy", "rm", "owner", "spare")
ZOMBIE_DELAY = 4.0  # seconds a zombie's packets to the broker are held: past EXPIRY, so it is declared gone
RECOVERY_CAP = 120.0  # seconds after a heal by which everything must be back, whatever happened
SETTLE = 30.0  # seconds the checks after a heal may wait for views to agree


def hold(seconds: float) -> None:
    """Keep a fault in for ``seconds``: the fault's length is the test's input (it waits for nothing)."""
    threading.Event().wait(seconds)


class Outage(Background):
    """The longest time each partition went without an allocation while it runs (polled)."""

    interval = 0.05

    def __init__(self, rms: list[SoakRM]) -> None:
        super().__init__("netsoak-outage")
        self.rms = rms
        self.longest: dict[str, float] = {}

    def step(self) -> None:
        now = _now()
        for rm in self.rms:
            for p in PARTITIONS:
                gap = now - rm.last_alloc.get(p, now)
                key = f"{rm.rm_id}/{p}"
                self.longest[key] = max(self.longest.get(key, 0.0), gap)


class PausableLoad(Load):
    """The soak's ``Load``, paused while the checks after a heal compare the views."""

    def __init__(self, rms: list[SoakRM]) -> None:
        super().__init__(rms)
        self.gate = threading.Lock()

    def step(self) -> None:
        with self.gate:
            super().step()

    @contextmanager
    def paused(self):
        with self.gate:  # a tick in progress ends first
            yield


# -- the stack on hosts -------------------------------------------------------------------------

class NetStack:
    """The layout of the module docstring, started in ``lab``."""

    def __init__(self, lab: NetLab, workers: int = WORKERS) -> None:
        self.lab = lab
        self.redis_host = lab.add_host("redis")
        self.broker_host = lab.add_host("broker")
        self.proxy_host = lab.add_host("proxy")
        self.rm_host = lab.add_host("rm")
        self.worker_hosts = {f"w{i}": lab.add_host(f"w{i}") for i in range(1, workers + 1)}
        self.redis_url = f"redis://:{REDIS_PASSWORD}@{self.redis_host.ip}:{REDIS_PORT}/0"
        self.frontend = f"tcp://{self.broker_host.ip}:{FRONTEND_PORT}"
        self.backend = f"tcp://{self.broker_host.ip}:{BACKEND_PORT}"
        self.procs: dict[str, Proc] = {}
        self.si = self.rest = ""  # the portals (127.0.0.1:PORT in the test's namespace)

    def start(self, redis_dir: Path) -> None:
        lab = self.lab
        redis_dir.mkdir(parents=True, exist_ok=True)
        self.procs["redis"] = lab.start(self.redis_host, "redis", [
            shutil.which("redis-server") or "/usr/bin/redis-server", "--port", str(REDIS_PORT),
            "--bind", self.redis_host.ip, "--requirepass", REDIS_PASSWORD, "--dir", str(redis_dir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""])
        self.procs["broker"] = lab.korral(self.broker_host, "broker", "broker", "--frontend", self.frontend,
                                          "--backend", self.backend, "--redis-url", self.redis_url)
        self.procs["rmproxy"] = lab.korral(
            self.proxy_host, "rmproxy", "rmproxy", "--si-address", f"{self.proxy_host.ip}:{SI_PORT}",
            "--rest-address", f"{self.proxy_host.ip}:{REST_PORT}", "--broker", self.frontend,
            "--redis-url", self.redis_url, "--rm-timeout", "300")
        for name, host in self.worker_hosts.items():
            self.procs[name] = lab.korral(host, name, "worker", "--broker", self.backend, "--redis-url",
                                          self.redis_url, "--name", name, "--health-file", str(self.health_file(name)))
        self.si = lab.portal(self.rm_host, f"{self.proxy_host.ip}:{SI_PORT}", "portal-si")
        self.rest = lab.portal(self.rm_host, f"{self.proxy_host.ip}:{REST_PORT}", "portal-rest")
        wait_until(lambda: set(self.workers()) == set(self.worker_hosts), 60,
                   "every worker joined the broker", self.context, interval=0.2)

    def health_file(self, worker: str) -> Path:
        return self.lab.log_dir / f"{worker}.health.json"

    # -- views ----------------------------------------------------------------------------

    def cluster(self) -> dict:
        """The broker's view, as rmproxy mirrors it ({} while unreachable)."""
        status, body = http_get(self.rest, "/ws/v1/korral/stack")
        if status != 200:
            return {}
        return json.loads(body).get("cluster") or {}

    def workers(self, wait: bool = False) -> dict[str, dict]:
        """name -> the broker's entry for the worker ({} while unreachable; ``wait``: until known)."""
        if wait:
            return wait_until(self.workers, RECOVERY_CAP, "the workers, from rmproxy's stack view", self.context)
        return {w["name"]: w for w in self.cluster().get("workers", [])}

    def owner_of(self, partition: str) -> str | None:
        """The worker owning "rmID/partition" in the broker's table."""
        return next((n for n, w in self.workers().items() if w.get("partition") == partition), None)

    def beliefs(self) -> dict[str, str | None]:
        """worker -> "rmID/partition" it believes it owns (its health file; None: none, or no file yet)."""
        out: dict[str, str | None] = {}
        for name in self.worker_hosts:
            try:
                doc = json.loads(self.health_file(name).read_text())
            except (OSError, ValueError):
                out[name] = None
                continue
            held = doc.get("partition")  # "[rmID]partition"
            out[name] = None if not held else held[1:].replace("]", "/", 1)
        return out

    def dead(self) -> list[str]:
        return [f"{name} exited ({p.popen.returncode}):\n{p.tail()}" for name, p in self.procs.items() if not p.alive()]

    def context(self) -> str:
        return tails(self.procs.values())

    # -- targets ----------------------------------------------------------------------------

    def host(self, role: str, rng: random.Random) -> Host:
        """A host of ``role``: redis, broker, proxy, rm, owner (of a partition) or spare."""
        fixed = {"redis": self.redis_host, "broker": self.broker_host, "proxy": self.proxy_host, "rm": self.rm_host}
        if role in fixed:
            return fixed[role]
        return self.worker_hosts[self.worker(role == "owner", rng)]

    def worker(self, owner: bool, rng: random.Random) -> str:
        owned = {n for n, w in self.workers(wait=True).items() if w.get("partition")}
        pool = sorted(owned if owner else set(self.worker_hosts) - owned) or sorted(self.worker_hosts)
        return rng.choice(pool)

    def spares(self) -> list[str]:
        owned = {n for n, w in self.workers(wait=True).items() if w.get("partition")}
        return sorted(set(self.worker_hosts) - owned)

    def link(self, kind: str, rng: random.Random) -> tuple[Host, Host]:
        """The two ends of a link of ``kind`` (a worker: an owner three times in four)."""
        if kind in ("worker-broker", "worker-redis"):
            worker = self.worker_hosts[self.worker(rng.random() < 0.75, rng)]
            return worker, self.broker_host if kind == "worker-broker" else self.redis_host
        ends = {"rmproxy-broker": (self.proxy_host, self.broker_host),
                "broker-redis": (self.broker_host, self.redis_host),
                "rmproxy-redis": (self.proxy_host, self.redis_host), RM_LINK: (self.rm_host, self.proxy_host)}
        return ends[kind]


# -- the soak ---------------------------------------------------------------------------------

@dataclass
class Step:
    n: int
    kind: str
    mixed: str = ""  # the kind of a second fault put in with the first ("" alone)
    faults: list[str] = field(default_factory=list)  # what was put in, in order
    held: float = 0.0  # seconds from the first fault in to the last healed
    sched_gap: float = 0.0  # heal -> every partition of every RM allocating again
    outage: float = 0.0  # the longest a partition went without an allocation, from the fault in to scheduling again
    outage_of: str = ""  # that partition
    reads_gap: float = 0.0  # heal -> every read path 200
    budget_used: float = 0.0  # seconds after max(heal, the RMs' last re-registration) the reads took
    sweeps: int = 0  # read sweeps until every path answered 200
    reregistrations: int = 0  # RM re-registrations the fault caused
    moved: list[str] = field(default_factory=list)  # partitions that changed owner
    stale_dropped: dict[str, int] = field(default_factory=dict)  # zombie outcomes the broker dropped, by kind
    check_seconds: float = 0.0
    first_failures: list[str] = field(default_factory=list)
    heal_errors: list[str] = field(default_factory=list)
    zombie: tuple[str, str] | None = None  # (worker, "rmID/partition") of a zombie step
    beliefs_at_heal: dict[str, str | None] = field(default_factory=dict)  # worker -> what it believed it owned

    def describe(self) -> str:
        return f"step {self.n} ({self.kind}{' + ' + self.mixed if self.mixed else ''}): {'; '.join(self.faults)}"


class NetSoak:
    def __init__(self, stack: NetStack, injector: Injector, rms: list[SoakRM], load: PausableLoad, seed: int) -> None:
        self.stack = stack
        self.injector = injector
        self.rms = rms
        self.load = load
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps: list[Step] = []
        self.timers: list[threading.Timer] = []  # the heals of mixed-in faults
        self._cycles: dict[str, list] = {}
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="netsoak-read")
        self.started = _now()

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def plan(self, count: int, kinds: tuple[str, ...] = KINDS, mixed_share: float = 0.25) -> list[Step]:
        """``count`` steps, the kinds round-robin (each round in a seeded order); about
        ``mixed_share`` of them with a second fault of another kind mixed in."""
        steps = []
        order: list[str] = []
        for n in range(count):
            if n % len(kinds) == 0:
                order = list(kinds)
                self.rng.shuffle(order)
            kind = order[n % len(kinds)]
            mixed = ""
            if mixed_share and self.rng.random() < mixed_share:
                mixed = self.rng.choice([k for k in MIXABLE if k != kind and k in kinds])
            steps.append(Step(n + 1, kind, mixed))
        return steps

    def fail(self, step: Step, message: str) -> AssertionError:
        return AssertionError(f"network-fault soak seed {self.seed}, {step.describe()}: {message}\n"
                              f"{self.stack.context()}")

    # -- one step -------------------------------------------------------------------------

    def run_step(self, step: Step, script=None) -> None:
        """Put the step's faults in (``script(soak, step)`` instead, for a test's own scenario),
        hold, heal, measure, check."""
        self.steps.append(step)
        lost = sum(rm.lost_count for rm in self.rms)
        before = self._owners()
        stale = self._stale_dropped()
        with Outage(self.rms) as outage:
            healed = self._put_in_and_heal(step, script)
            # both timed from the heal: scheduling watched on a thread while the reads are swept
            errors: list[BaseException] = []
            watch = threading.Thread(target=self._catching, args=(errors, self._wait_scheduling, step, healed),
                                     name="netsoak-scheduling", daemon=True)
            watch.start()
            try:
                self._wait_reads(step, healed)
            finally:
                watch.join()  # bounded: the wait ends by RECOVERY_CAP
        step.outage_of, step.outage = max(outage.longest.items(), key=lambda kv: kv[1], default=("", 0.0))
        if errors:
            raise errors[0]
        self._check(step)
        step.reregistrations = sum(rm.lost_count for rm in self.rms) - lost
        after = self._owners()
        step.moved = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        step.stale_dropped = {k: n for k, n in (self._stale_dropped() - stale).items() if n}

    def _put_in_and_heal(self, step: Step, script) -> float:
        """The step's faults in, held, and all healed (also on failure); returns when they were."""
        began = _now()
        try:
            (script or NetSoak._faults)(self, step)
        finally:
            for timer in self.timers:
                timer.cancel()
            self.timers.clear()
            self.injector.heal_all()
        healed = _now()
        step.held = healed - began
        step.beliefs_at_heal = self.stack.beliefs()
        if step.heal_errors:
            raise self.fail(step, "healing failed: " + "; ".join(step.heal_errors))
        return healed

    def _faults(self, step: Step) -> None:
        """Put the step's faults in, hold them, and return (the caller heals what is still in).
        A mixed-in second fault goes in at a seeded moment and out after its own hold, on a timer."""
        rng, s = self.rng, self.stack
        second = self._fault(step.mixed) if step.mixed else None
        if second is not None and rng.random() < 0.5:
            self._mix(step, second)
            second = None
        if step.kind == "zombie":
            worker, partition = self.owner()
            step.zombie = (worker, partition)
            host = s.worker_hosts[worker]
            # first its packets to the broker held ZOMBIE_DELAY (past the heartbeat expiry): the
            # broker declares it gone and the partition moves, while it goes on scheduling the
            # RM's requests that reach it and its answers of the old epoch arrive seconds late ...
            slow = (Fault.delay(host, s.broker_host, ZOMBIE_DELAY * 1000, direction="out")
                    if delay_unavailable_reason() is None else Fault.one_way(host, s.broker_host))
            self.inject(step, slow, f"owner of {partition}")
            self._mix(step, second)
            wait_until(lambda: s.owner_of(partition) not in (None, worker), RECOVERY_CAP,
                       f"{partition} owned by another worker than the slowed {worker}", s.context, interval=0.1)
            # ... then cut from the broker both ways (Redis and rmproxy's host still reachable);
            # healed, it comes back believing it owns the partition
            self.inject(step, Fault.cut(host, s.broker_host), f"{worker} cut from the broker")
            self.injector.heal(slow)
            hold(rng.uniform(0.5, 3.0))
            return
        if step.kind == "broker-during-move":
            worker, partition = self.owner()
            rm = next(r for r in self.rms if partition.startswith(r.rm_id + "/"))
            lost = rm.lost_count
            self.inject(step, Fault.partition(s.worker_hosts[worker]), f"owner of {partition}")
            self._mix(step, second)
            # the partition is moving once its worker is declared gone and the RM asked to re-register
            wait_until(lambda: rm.lost_count > lost or s.owner_of(partition) != worker, RECOVERY_CAP,
                       f"{partition} moving away from the cut-off {worker}", s.context, interval=0.05)
            hold(rng.uniform(0.0, 1.0))  # somewhere in the move: re-registration, assignment, loading
            self.inject(step, Fault.partition(s.broker_host), f"while {partition} moves")
            hold(rng.uniform(1.0, 6.0))
            return
        if step.kind == "redis-during-move":
            # Redis is where a moving partition's new epoch (broker) and registration (its next
            # worker, rmproxy) come from: one of their links to it cut, or one way, then the move
            worker, partition = self.owner()
            end = rng.choice(("broker", "proxy", "spare"))
            ends = [s.host(end, rng)] if end != "spare" else [s.worker_hosts[w] for w in s.spares()]
            how = rng.choice(("cut", "to-redis", "from-redis"))
            for host in ends:
                fault = (Fault.cut(host, s.redis_host) if how == "cut" else Fault.one_way(host, s.redis_host)
                         if how == "to-redis" else Fault.one_way(s.redis_host, host))
                self.inject(step, fault)
            self.inject(step, Fault.partition(s.worker_hosts[worker]), f"owner of {partition}: it moves")
            self._mix(step, second)
            hold(rng.uniform(4.0, 8.0))
            return
        fault, seconds = self._fault(step.kind)
        self.inject(step, fault)
        self._mix(step, second)
        hold(seconds)

    def owner(self) -> tuple[str, str]:
        """A seeded worker owning a partition, and that partition ("rmID/partition")."""
        owned = {n: w["partition"] for n, w in self.stack.workers(wait=True).items() if w.get("partition")}
        if not owned:
            raise AssertionError(f"no worker owns a partition: {self.stack.workers()}")
        worker = self.rng.choice(sorted(owned))
        return worker, owned[worker]

    def _mix(self, step: Step, second: tuple[Fault, float] | None) -> None:
        """The second fault in now, healed after its hold by a timer (or with the step's end)."""
        if second is None:
            return
        fault, seconds = second
        self.inject(step, fault, "mixed in")

        def heal() -> None:
            try:
                self.injector.heal(fault)
            except AssertionError as exc:
                step.heal_errors.append(str(exc))
        timer = threading.Timer(seconds, heal)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def inject(self, step: Step, fault: Fault, note: str = "") -> None:
        self.injector.inject(fault)
        step.faults.append(fault.describe() + (f" ({note})" if note else ""))

    def _next(self, name: str, choices: list):
        """The next of ``choices`` in a seeded round-robin of its own: every one comes up in turn."""
        cycle = self._cycles.setdefault(name, [])
        if not cycle:
            cycle.extend(choices)
            self.rng.shuffle(cycle)
        return cycle.pop()

    def _fault(self, kind: str) -> tuple[Fault, float]:
        """A fault of ``kind`` on a seeded target, and how long to hold it."""
        rng, s = self.rng, self.stack
        if kind in ("partition-short", "partition-long"):
            fault = Fault.partition(s.host(self._next(kind, list(HOST_ROLES)), rng))
            seconds = rng.uniform(0.5, 1.8) if kind == "partition-short" else rng.uniform(3.5, 8.0)
        elif kind == "one-way":  # each link kind, each direction, in turn
            link, forward = self._next(kind, [(link, forward) for link in LINKS for forward in (True, False)])
            a, b = s.link(link, rng)
            fault = Fault.one_way(a, b) if forward else Fault.one_way(b, a)
            seconds = rng.uniform(3.5, 7.0)
        elif kind == "delay":
            a, b = s.link(self._next(kind, list(LINKS + (RM_LINK,))), rng)
            ms = rng.uniform(20, 300)
            fault = Fault.delay(a, b, round(ms), round(rng.uniform(0, ms / 2)))
            seconds = rng.uniform(4.0, 8.0)
        elif kind == "loss":
            a, b = s.link(self._next(kind, list(LINKS + (RM_LINK,))), rng)
            fault = Fault.loss(a, b, rng.randint(5, 40))
            seconds = rng.uniform(4.0, 8.0)
        elif kind == "flap":
            down, up = round(rng.uniform(0.5, 2.5), 1), round(rng.uniform(0.5, 2.5), 1)
            target = self._next(kind, list(LINKS + (RM_LINK, "host")))
            if target == "host":
                fault = Fault.flap(s.host(rng.choice(HOST_ROLES), rng), None, down, up)
            else:
                a, b = s.link(target, rng)
                fault = Fault.flap(a, b, down, up)
            seconds = rng.uniform(8.0, 12.0)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return fault, seconds

    # -- after the heal ---------------------------------------------------------------------

    @staticmethod
    def _catching(errors: list[BaseException], wait, *args) -> None:
        try:
            wait(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again by the main thread
            errors.append(exc)

    def _wait_scheduling(self, step: Step, healed: float) -> None:
        wait_scheduling(self.rms, step, healed, lambda message: self.fail(step, message))

    def _wait_reads(self, step: Step, healed: float) -> None:
        """``wait_reads`` from the heal, within ``READ_BUDGET`` of it and of the RMs' last re-registration."""
        def base() -> float:
            return max([healed] + [rm.restored_at for rm in self.rms])
        wait_reads(self.stack.rest, self.rms, self.pool, step, healed, base, "heal",
                   lambda message: self.fail(step, message))

    def _check(self, step: Step) -> None:
        """The invariants, with the load paused (views are compared at rest)."""
        began = _now()
        with self.load.paused():
            make_room(self.rms)
            for rm in self.rms:
                if not rm.api.wait_running(OP_TIMEOUT):
                    raise self.fail(step, f"{rm.rm_id}'s client is {rm.state().value}, not Running")
                try:
                    rm.wait(lambda r: not r.pending, timeout=SETTLE)
                except TimeoutError as exc:
                    raise self.fail(step, f"lost asks: {rm.rm_id} still has {len(rm.pending)} pending with room for "
                                          f"them: {sorted(rm.pending)[:5]} ({exc})") from None
            for rm in self.rms:
                for p in PARTITIONS:
                    self._same_allocations(step, rm, p)
            self._one_owner_each(step)
            violations = [f"{rm.rm_id}: {v}" for rm in self.rms for v in rm.violations]
            if violations:
                raise self.fail(step, f"the RMs saw contract violations: {violations[:10]}")
            dead = self.stack.dead()
            if dead:
                raise self.fail(step, "processes died: " + "\n".join(dead))
        step.check_seconds = _now() - began

    def _same_allocations(self, step: Step, rm: SoakRM, partition: str) -> None:
        def same():
            view, doubled, over = scheduler_partition(self.stack.rest, rm.rm_id, partition)
            return (view, doubled, over) if view == rm.running_in(partition) else None
        try:
            view, doubled, over = wait_until(same, SETTLE, f"[{rm.rm_id}]{partition} equal to the RM's view")
        except AssertionError:
            view, doubled, over = scheduler_partition(self.stack.rest, rm.rm_id, partition)
        mine = rm.running_in(partition)
        lost, phantom = sorted(set(mine) - set(view)), sorted(set(view) - set(mine))
        moved = sorted(k for k in set(mine) & set(view) if mine[k] != view[k])
        if lost or phantom or moved or doubled or over:
            raise self.fail(step, f"[{rm.rm_id}]{partition}: the RM holds {len(lost)} the scheduler does not "
                                  f"{lost[:5]}, the scheduler {len(phantom)} the RM does not {phantom[:5]}, "
                                  f"different uuid/node {moved[:5]}, doubled {doubled[:5]}, over capacity {over[:3]}")

    def _one_owner_each(self, step: Step) -> None:
        """Each partition of each RM owned (loaded) by one worker in the broker's table, and exactly
        that worker believing it owns it: no worker believes in a partition the broker gave away."""
        wanted = {f"{rm.rm_id}/{p}" for rm in self.rms for p in PARTITIONS}

        def problems() -> list[str]:
            cluster = self.stack.cluster()
            table = collections.defaultdict(list)
            for w in cluster.get("workers", []):
                if w.get("partition"):
                    table[w["partition"]].append(w["name"])
            loaded = {f"{p['rmID']}/{p['partition']}" for p in cluster.get("partitions", []) if p.get("loaded")}
            found = [f"{p} owned by {table.get(p)} in the broker's table" for p in sorted(wanted)
                     if len(table.get(p, [])) != 1 or p not in loaded]
            owner = {p: names[0] for p, names in table.items() if len(names) == 1}
            beliefs = self.stack.beliefs()
            found += [f"{w} believes it owns {b}, the broker says {owner.get(b)}" for w, b in sorted(beliefs.items())
                      if b is not None and owner.get(b) != w]
            found += [f"{owner[p]} owns {p} in the broker's table but does not know it" for p in sorted(owner)
                      if beliefs.get(owner[p]) != p]
            return found

        try:
            wait_until(lambda: not problems(), SETTLE, "one owner per partition, believed by that worker only",
                       interval=0.2)
        except AssertionError:
            raise self.fail(step, "ownership: " + "; ".join(problems())) from None

    def _owners(self) -> dict[str, str]:
        return {w["partition"]: n for n, w in self.stack.workers(wait=True).items() if w.get("partition")}

    def _stale_dropped(self) -> collections.Counter:
        doc = wait_until(self.stack.cluster, 30, "the broker's view from rmproxy", self.stack.context)
        return collections.Counter(doc.get("staleOutcomes") or {})

    # -- figures ------------------------------------------------------------------------------

    def summary(self) -> dict:
        done = [s for s in self.steps if s.reads_gap]

        def figures(steps: list[Step]) -> dict:
            sched, reads = [s.sched_gap for s in steps], [s.reads_gap for s in steps]
            outage = [s.outage for s in steps]
            return {"faults": len(steps),
                    "outage_median": _round(statistics.median(outage)) if outage else None,
                    "outage_max": _round(max(outage)) if outage else None,
                    "sched_median": _round(statistics.median(sched)) if sched else None,
                    "sched_max": _round(max(sched)) if sched else None,
                    "reads_median": _round(statistics.median(reads)) if reads else None,
                    "reads_max": _round(max(reads)) if reads else None,
                    "reregistrations": sum(s.reregistrations for s in steps),
                    "with_reregistration": sum(1 for s in steps if s.reregistrations),
                    "moved": sum(len(s.moved) for s in steps),
                    "stale_dropped": sum(sum(s.stale_dropped.values()) for s in steps)}

        def longest(attr: str) -> str:
            if not done:
                return "-"
            s = max(done, key=lambda x: getattr(x, attr))
            return f"{getattr(s, attr):.2f}s ({s.describe()})"
        kinds = sorted({s.kind for s in self.steps})
        return {
            "seed": self.seed,
            "faults": len(self.steps),
            "healed_and_checked": len(done),
            "mixed": sum(1 for s in self.steps if s.mixed),
            "all": figures(done),
            "per_kind": {k: figures([s for s in done if s.kind == k]) for k in kinds},
            "sched_gap_longest": longest("sched_gap"),
            "reads_gap_longest": longest("reads_gap"),
            "reads_after_reregistration_longest": _round(max((s.budget_used for s in done), default=0.0)),
            "allocations": sum(sum(rm.allocated.values()) for rm in self.rms),
            "register_retries": sum(rm.register_retries for rm in self.rms),
            "retry_reasons": dict(sum((rm.retry_reasons for rm in self.rms), collections.Counter()).most_common(8)),
            "seconds": round(_now() - self.started, 1),
        }


def _round(x: float) -> float:
    return round(x, 3)
