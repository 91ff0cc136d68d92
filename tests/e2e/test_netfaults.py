"""Network faults across hosts: Korral on network-namespace hosts under load, links cut, made
one-way, slowed, made lossy and flapping, hosts partitioned (``tests/e2e/netsoak.py`` has the
layout, the fault kinds and the checks after every heal; ``tests/e2e/netfaults.py`` the injector).

- The injector itself: each fault kind does to packets what it says, and healing undoes it.
- The zombie: the owner of a partition keeps scheduling while nothing it sends gets out, is cut
  from the broker, loses its partition to a spare and comes back believing it owns it; its
  allocations reach the broker and go no further: the RM never gets one.
- Two bugs this suite found, each with the scenario that showed it: a partition moving while the
  spare picked first cannot reach Redis, and while the broker cannot.
- ``make test``: a short soak, one fault of each of six kinds (the zombie and the Redis links
  while a partition moves have their own tests above).
- ``make soak-net`` (slow): ``KORRAL_NETSOAK_FAULTS`` faults (default 100), every kind, alone and
  mixed two at a time, seeded (``KORRAL_NETSOAK_SEED`` replays a run's choices; timings differ);
  ``KORRAL_NETSOAK_REPORT=FILE`` writes the figures as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import wait_until
from tests.e2e.netfaults import Fault, Injector, delay_unavailable_reason, unavailable_reason
from tests.e2e.netns import NetLab
from tests.e2e.netsoak import KINDS, NetSoak, NetStack, PausableLoad, Step, hold
from tests.e2e.soak_rm import NODE_MEMORY, NODE_VCORE, PARTITIONS, SoakRM

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"network faults need namespaces and nftables: {REASON}")

FAULTS = int(os.environ.get("KORRAL_NETSOAK_FAULTS", 100))
SHORT_KINDS = ("partition-long", "one-way", "delay", "loss", "flap", "broker-during-move")


@pytest.fixture
def injector(lab):
    inj = Injector(lab, seed=1)
    try:
        yield inj
    finally:
        inj.heal_all()


# -- the injector -------------------------------------------------------------------------------

# A TCP echo server, run inside a host: the probes below talk to it.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 7000)); s.listen()
while True:
    c, _ = s.accept()
    c.settimeout(5)
    try:
        while data := c.recv(100):
            c.sendall(data)
    except OSError:
        pass
    c.close()
"""
# argv: an ip, a mode. "connect": can one TCP connection to the echo be made (1.5 s); "rtt": 10
# round trips over one connection, in ms; "send N": N numbered UDP datagrams to ip:7001, then
# "end" 20 times; "listen": the numbers received on ip:7001 until an "end", or a line on stdin
# (the sender is done: what crossed is in the socket's buffer), or 60 s.
PROBE = """
import json, socket, sys, time
ip, mode = sys.argv[1], sys.argv[2]
if mode == "connect":
    try:
        socket.create_connection((ip, 7000), timeout=1.5).close(); print(json.dumps(True))
    except OSError:
        print(json.dumps(False))
elif mode == "rtt":
    c = socket.create_connection((ip, 7000), timeout=10); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(10):
        t = time.monotonic(); c.sendall(b"x"); c.recv(10); out.append((time.monotonic() - t) * 1000)
    print(json.dumps(out))
elif mode == "send":
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for data in [str(i).encode() for i in range(int(sys.argv[3]))] + [b"end"] * 20:
        try:
            u.sendto(data, (ip, 7001))
        except PermissionError:  # dropped by this host's own output rules
            pass
        time.sleep(0.001)
else:
    import select
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind((ip, 7001)); u.setblocking(False)
    print("listening", flush=True)
    got, end, done = set(), time.monotonic() + 60, False
    while not done and time.monotonic() < end:
        ready, _, _ = select.select([u, sys.stdin], [], [], 1.0)
        done = sys.stdin in ready  # the sender is done: read what arrived, then stop
        while True:
            try:
                data = u.recv(100)
            except BlockingIOError:
                break
            if data == b"end":
                done = True
                break
            got.add(int(data))
    print(json.dumps(sorted(got)))
"""


def probe(lab: NetLab, src, dst, *mode: str):
    result = lab.run(src, [sys.executable, "-c", PROBE, dst.ip, *mode], timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def datagrams(lab: NetLab, src, dst, count: int) -> int:
    """How many of ``count`` UDP datagrams from src arrive at dst (one way only)."""
    listener = lab.start(dst, f"listen-{dst.name}-{time.monotonic_ns()}", [sys.executable, "-c", PROBE, dst.ip,
                                                                          "listen"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert listener.popen.stdout.readline().strip() == b"listening"
    sent = lab.run(src, [sys.executable, "-c", PROBE, dst.ip, "send", str(count)], timeout=60)
    assert sent.returncode == 0, sent.stderr
    out, _ = listener.popen.communicate(b"done\n", timeout=60)
    return len(json.loads(out))


@pytest.fixture
def hosts(lab):
    """Three hosts, each running the probes' echo server."""
    made = [lab.add_host(n) for n in ("a", "b", "c")]
    for h in made:
        lab.start(h, f"server-{h.name}", [sys.executable, "-c", SERVER, h.ip])
    wait_until(lambda: all(probe(lab, x, y, "connect") for x in made for y in made if x is not y), 20,
               "every host reaching every other")
    return made


def reach(lab, hosts) -> set[tuple[str, str]]:
    """Which host can open a TCP connection to which (all pairs probed at once)."""
    pairs = [(x, y) for x in hosts for y in hosts if x is not y]
    with ThreadPoolExecutor(len(pairs)) as pool:
        ok = list(pool.map(lambda pair: probe(lab, *pair, "connect"), pairs))
    return {(x.name, y.name) for (x, y), yes in zip(pairs, ok) if yes}


def test_a_partition_cuts_a_host_off_from_all_others_and_a_cut_one_link_only(lab, injector, hosts):
    a, b, c = hosts
    everyone = reach(lab, hosts)
    fault = injector.inject(Fault.partition(a))
    assert reach(lab, hosts) == {("b", "c"), ("c", "b")}
    injector.heal(fault)
    assert reach(lab, hosts) == everyone
    fault = injector.inject(Fault.cut(a, b))
    assert reach(lab, hosts) == everyone - {("a", "b"), ("b", "a")}
    injector.heal(fault)
    assert reach(lab, hosts) == everyone


def test_one_way_loss_drops_one_direction_only(lab, injector, hosts):
    a, b, _ = hosts
    fault = injector.inject(Fault.one_way(a, b))  # a -> b lost, b -> a arrives
    assert datagrams(lab, a, b, 50) == 0
    assert datagrams(lab, b, a, 50) == 50
    assert probe(lab, b, a, "connect") is False  # TCP needs both ways: b's SYN arrives, a's answer does not
    injector.heal(fault)
    assert datagrams(lab, a, b, 50) == 50


def test_random_loss_drops_about_the_share_asked(lab, injector, hosts):
    a, b, _ = hosts
    injector.inject(Fault.loss(a, b, 30))
    assert 0.55 * 400 < datagrams(lab, a, b, 400) < 0.85 * 400
    assert 0.55 * 400 < datagrams(lab, b, a, 400) < 0.85 * 400


def test_delay_and_jitter_lengthen_round_trips(lab, injector, hosts):
    reason = delay_unavailable_reason()
    if reason is not None:
        pytest.skip(f"delay faults need NFQUEUE: {reason}")
    a, b, c = hosts
    plain = probe(lab, a, b, "rtt")
    fault = injector.inject(Fault.delay(a, b, 60, 20))  # each way: a round trip takes 80-160 ms
    slow = probe(lab, a, b, "rtt")
    assert min(slow) >= 75 and sorted(slow)[5] < 1000, slow  # never faster than the delay; slower only by load
    assert max(slow) - min(slow) > 5, f"no jitter: {slow}"
    other = probe(lab, a, c, "rtt")  # the other links of a are not slowed
    injector.heal(fault)
    healed = probe(lab, a, b, "rtt")
    assert max(sorted(x)[5] for x in (plain, other, healed)) < 75, (plain, other, healed)


def test_a_flapping_link_goes_down_and_up_until_healed(lab, injector, hosts):
    a, b, _ = hosts
    fault = injector.inject(Fault.flap(a, b, down_s=0.5, up_s=0.5))
    got = datagrams(lab, a, b, 3000)  # ~3 s of datagrams, 1 ms apart: several periods
    assert 0.1 * 3000 < got < 0.9 * 3000, f"{got} of 3000 datagrams crossed a link down half the time"
    injector.heal(fault)
    assert datagrams(lab, a, b, 50) == 50


# -- Korral under network faults ----------------------------------------------------------------

@pytest.fixture
def netstack(lab, tmp_path) -> NetStack:
    stack = NetStack(lab)
    stack.start(tmp_path / "redis")
    return stack


def run_netsoak(lab: NetLab, stack: NetStack, faults: int, kinds: tuple[str, ...] = KINDS,
                mixed_share: float = 0.25, load_between: tuple[int, int] = (30, 120),
                rm_ids: tuple[str, ...] = ("rm-a", "rm-b"), script=None, warmup: int = 1) -> tuple[dict, NetSoak]:
    """``faults`` steps of the kinds given (round-robin; ``script(soak, step)`` puts a test's own
    faults in instead), the checks after each heal; between two, each partition gets
    ``load_between`` more allocations; before the first, ``warmup`` each. Returns the report and the soak."""
    seed = int(os.environ.get("KORRAL_NETSOAK_SEED") or time.time())
    no_delay = delay_unavailable_reason()
    if no_delay is not None and "delay" in kinds:
        kinds = tuple(k for k in kinds if k != "delay")
        print(f"network-fault soak: no delay faults here ({no_delay})")
    print(f"network-fault soak: seed {seed}, {faults} faults of {', '.join(kinds)}")
    injector = Injector(lab, seed)
    rms = [SoakRM(rm_id, node_memory=NODE_MEMORY, node_vcore=NODE_VCORE, si_address=stack.si,
                  rest_address=stack.rest, seed=seed) for rm_id in rm_ids]
    load = PausableLoad(rms)
    soak = NetSoak(stack, injector, rms, load, seed)
    report: dict = {"seed": seed, "completed": False}
    try:
        for rm in rms:
            rm.start()
        with load:
            wait_until(lambda: all(rm.allocated.get(p, 0) >= warmup for rm in rms for p in PARTITIONS), 120,
                       f"every partition allocating ({warmup} allocations each)", stack.context)
            for step in soak.plan(faults, kinds, mixed_share):
                soak.run_step(step, script)
                print(f"  {step.describe()}: held {step.held:.1f}s, outage {step.outage:.2f}s ({step.outage_of}), "
                      f"heal -> scheduling {step.sched_gap:.2f}s, reads {step.reads_gap:.2f}s, re-registrations "
                      f"{step.reregistrations}, moved {step.moved}, stale {step.stale_dropped}")
                counts = {(rm.rm_id, p): rm.allocated.get(p, 0) for rm in rms for p in PARTITIONS}
                more = soak.rng.randint(*load_between)
                wait_until(lambda: all(rm.allocated.get(p, 0) >= counts[(rm.rm_id, p)] + more
                                       for rm in rms for p in PARTITIONS), 90, "the load running on", stack.context)
            assert load.errors == [], f"seed {seed}: the load failed: {load.errors[:5]}"
        report["completed"] = True
        return report, soak
    finally:
        injector.heal_all()
        report.update(soak.summary())
        print("network-fault soak figures:\n" + json.dumps(report, indent=2, default=str))
        path = os.environ.get("KORRAL_NETSOAK_REPORT")
        if path:
            with open(path, "w") as f:
                json.dump(report | {"steps": [dataclasses.asdict(s) for s in soak.steps]}, f, indent=2, default=str)
        for rm in rms:
            rm.close()
        soak.close()


@pytest.mark.timeout(300)
def test_a_zombie_owner_never_gets_an_allocation_to_the_rm(lab, tmp_path):
    """The owner of a partition keeps scheduling the RM's traffic while nothing it sends gets out
    (one way), is then cut from the broker (still reaching Redis and rmproxy's host), loses its
    partition to the spare, and comes back believing it owns it. Its allocations of the old epoch
    arrive at the broker and are dropped there: the RM gets none (no key twice, no unknown ask,
    its allocations equal the scheduler's), and the zombie gives the partition up."""
    stack = NetStack(lab, workers=3)  # one RM's two partitions and a spare
    stack.start(tmp_path / "redis")
    # at the load's steady state (nodes near full, tasks finishing and asks arriving every tick),
    # so the zombie has releases to fill while its answers cannot get out
    report, soak = run_netsoak(lab, stack, 1, kinds=("zombie",), mixed_share=0, rm_ids=("rm-a",), warmup=250)
    step: Step = soak.steps[0]
    assert report["completed"] and step.reads_gap, report
    worker, partition = step.zombie
    assert step.beliefs_at_heal[worker] == partition, f"not a zombie at the heal: {step.beliefs_at_heal}"
    assert step.moved == [partition] and step.reregistrations >= 1, step
    assert stack.beliefs()[worker] is None, "the zombie still believes it owns a partition"
    # its allocations of the old epoch (rows, or a response with releases) reached the broker, late
    allocations = step.stale_dropped.get("si.allocations", 0) + step.stale_dropped.get("si.allocation.response", 0)
    assert allocations > 0, f"the zombie's allocations never came back to the broker: {step}"


def moving(soak: NetSoak, step: Step) -> tuple[str, SoakRM, str, float]:
    """Partition a partition's owner off (seeded); its RM is asked to re-register and the partition
    moves. Returns (its worker, its RM, its short name, when the cut went in)."""
    s = soak.stack
    worker, partition = soak.owner()
    rm_id, short = partition.split("/")
    soak.inject(step, Fault.partition(s.worker_hosts[worker]), f"owner of {partition}: it moves")
    return worker, next(rm for rm in soak.rms if rm.rm_id == rm_id), short, time.monotonic()


@pytest.mark.timeout(300)
def test_a_partition_moves_past_a_spare_that_cannot_reach_redis(lab, netstack):
    """Found by this suite: the spare the broker picks first (by name) cannot reach Redis, fails
    to load the moving partition, and used to get it again at every re-registration while
    another spare stood idle. Now the partition goes to the next spare and schedules while the
    faults are still in."""
    def script(soak: NetSoak, step: Step) -> None:
        s = soak.stack
        first = s.spares()[0]
        soak.inject(step, Fault.cut(s.worker_hosts[first], s.redis_host), "the spare the broker picks first")
        worker, rm, short, cut = moving(soak, step)
        wait_until(lambda: rm.lost_count and rm.restored_at > cut and rm.last_alloc.get(short, 0) > rm.restored_at,
                   60, f"[{rm.rm_id}]{short} scheduling on another spare while {first} cannot reach Redis",
                   s.context, interval=0.1)
        owner = s.owner_of(f"{rm.rm_id}/{short}")
        assert owner not in (worker, first, None), owner

    report, _ = run_netsoak(lab, netstack, 1, kinds=("scripted",), mixed_share=0, load_between=(10, 20),
                            script=script)
    assert report["completed"], report


@pytest.mark.timeout(300)
def test_a_broker_cut_from_redis_fails_registrations_at_once_and_keeps_the_others_running(lab, netstack):
    """Found by this suite: with the broker cut from Redis while a partition moved, rm.register
    raised out of the broker's table and went unanswered: the RM's registration waited 10 s and
    was told "no worker took partition(s) ... start more workers", and each attempt stalled the
    broker's loop for Redis' 2 s timeout. Now each attempt fails at once naming Redis, the
    broker keeps its heartbeats (the other RM never re-registers), and the move completes once
    Redis is back."""
    others: dict[str, int] = {}

    def script(soak: NetSoak, step: Step) -> None:
        s = soak.stack
        soak.inject(step, Fault.cut(s.broker_host, s.redis_host))
        worker, rm, short, cut = moving(soak, step)
        others.update({r.rm_id: r.lost_count for r in soak.rms if r is not rm})
        hold(12.0)  # longer than a registration's 10 s wait for owners
        others.update({k: soak.rms[[r.rm_id for r in soak.rms].index(k)].lost_count - v for k, v in others.items()})

    report, soak = run_netsoak(lab, netstack, 1, kinds=("scripted",), mixed_share=0, load_between=(10, 20),
                               script=script)
    assert report["completed"], report
    assert others == {other: 0 for other in others}, f"the other RM re-registered during the cut: {others}"
    log = (lab.log_dir / "rmproxy.log").read_text()
    assert "could not take a new epoch from Redis" in log, log[-3000:]
    assert "no worker took partition" not in log, log[-3000:]


@pytest.mark.timeout(420)
def test_network_faults_short(lab, netstack):
    """One fault of each of six kinds, the checks after each heal (the soak's mechanism in CI)."""
    report, soak = run_netsoak(lab, netstack, len(SHORT_KINDS), kinds=SHORT_KINDS, mixed_share=0,
                               load_between=(10, 40))
    assert report["completed"], report
    assert sorted(s.kind for s in soak.steps) == sorted(SHORT_KINDS)


@pytest.mark.slow
@pytest.mark.timeout(FAULTS * 60 + 600)
def test_network_fault_soak(lab, netstack):
    report, soak = run_netsoak(lab, netstack, FAULTS)
    assert report["completed"] and report["faults"] == FAULTS, report
    assert all(report["per_kind"][k]["faults"] >= FAULTS // len(KINDS) for k in KINDS), report["per_kind"]
    assert report["mixed"] > 0, report
