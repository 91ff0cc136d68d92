"""Korral on several "hosts" (Linux network namespaces) with CURVE on, and failover when a host is cut off.

Layout (``tests/e2e/netns.py`` builds it; one private /24 inside the lab's own namespaces):

    broker-host : redis-server (password), korral broker (CURVE server)
    host-a      : worker wa, pinned to rm-mh/pa
    host-b      : worker wb, pinned to rm-mh/pb; worker standby (unpinned)
    proxy-host  : korral rmproxy (CURVE client), and the RM (``SIRM.in_namespace``)

The RM registers two partitions, reports nodes, applications and asks in both, and gets
allocations from both hosts' workers. Then host-a's link goes down (``ip link set down``):
the broker misses wa's heartbeats, gives pa to the standby on host-b under a new epoch, and
rmproxy ends the RM's streams with UNAVAILABLE ``korral: re-register: ...``. The RM
re-registers, re-reports (nodes with their existing allocations), and pa schedules again,
holding exactly the RM's allocations. Finally host-a's link comes back: wa must give pa up
and rejoin as a spare, and pa keeps scheduling on the standby.

A second test kills the broker on its host (``kill -9``) and restarts it: the workers on the
other hosts reconnect over CURVE and re-announce their partitions, so nothing moves; the RM
resyncs and both partitions schedule again, in sync with the RM.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import grpc
import pytest

from common import si_pb2
from benchmarks.recovery import provided_partitions
from tests.conftest import wait_until
from tests.e2e.netns import NetLab, tails, unavailable_reason
from tests.e2e.sirm import SIRM
from tests.e2e.test_security import make_keys
from tests.si_builders import app, ask, node

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"multi-host test needs network namespaces: {REASON}")

RM_ID = "rm-mh"
REDIS_PASSWORD = "mh-secret"
CONFIG = provided_partitions("pa", "pb")
FRONTEND_PORT, BACKEND_PORT, REDIS_PORT, SI_PORT, REST_PORT = 5555, 5556, 6379, 9090, 9080


class Stack:
    """The processes of the layout above, started in the lab."""

    def __init__(self, lab: NetLab, keys: Path) -> None:
        self.lab = lab
        self.broker_host = lab.add_host("broker")
        self.host_a = lab.add_host("host-a")
        self.host_b = lab.add_host("host-b")
        self.proxy_host = lab.add_host("proxy")
        self.keys = keys
        b = self.broker_host.ip
        self.redis_url = f"redis://:{REDIS_PASSWORD}@{b}:{REDIS_PORT}/0"
        self.frontend = f"tcp://{b}:{FRONTEND_PORT}"
        self.backend = f"tcp://{b}:{BACKEND_PORT}"
        self.si = f"{self.proxy_host.ip}:{SI_PORT}"
        self.rest = f"{self.proxy_host.ip}:{REST_PORT}"
        self.procs = {}

    def start(self, redis_dir: Path) -> None:
        lab, k = self.lab, self.keys
        redis_dir.mkdir(parents=True, exist_ok=True)
        self.procs["redis"] = lab.start(self.broker_host, "redis", [
            shutil.which("redis-server") or "/usr/bin/redis-server", "--port", str(REDIS_PORT),
            "--bind", self.broker_host.ip, "--requirepass", REDIS_PASSWORD, "--dir", str(redis_dir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""])
        self.start_broker()
        client = lambda name: ["--curve-secret", str(k / f"{name}.key_secret"),  # noqa: E731
                               "--curve-server", str(k / "broker.key")]
        # the environment-variable spelling for one of them, as deploy/ files use it
        self.procs["wa"] = lab.korral(self.host_a, "wa", "worker", *client("wa"),
                                      env={"KORRAL_BROKER_BACKEND": self.backend, "KORRAL_REDIS_URL": self.redis_url,
                                           "KORRAL_WORKER_NAME": "wa", "KORRAL_WORKER_PARTITION": f"{RM_ID}/pa"})
        self.procs["wb"] = lab.korral(self.host_b, "wb", "worker", "--broker", self.backend, "--redis-url",
                                      self.redis_url, "--name", "wb", "--partition", f"{RM_ID}/pb", *client("wb"))
        self.procs["standby"] = lab.korral(self.host_b, "standby", "worker", "--broker", self.backend,
                                           "--redis-url", self.redis_url, "--name", "standby", *client("standby"))
        self.procs["rmproxy"] = lab.korral(
            self.proxy_host, "rmproxy", "rmproxy", "--si-address", self.si, "--rest-address", self.rest,
            "--broker", self.frontend, "--redis-url", self.redis_url, "--rm-timeout", "60", *client("rmproxy"))

    def start_broker(self, name: str = "broker") -> None:
        k = self.keys
        self.procs["broker"] = self.lab.korral(
            self.broker_host, name, "broker", "--frontend", self.frontend, "--backend", self.backend,
            "--redis-url", self.redis_url, "--curve-secret", str(k / "broker.key_secret"),
            "--curve-allowed", str(k / "allowed"))

    def stack(self) -> dict:
        status, body = self.lab.http_get_json(self.proxy_host, f"http://{self.rest}/ws/v1/korral/stack")
        return body if status == 200 and isinstance(body, dict) else {}

    def workers(self) -> dict[str, dict]:
        return {w["name"]: w for w in self.stack().get("cluster", {}).get("workers", [])}

    def owner(self, partition: str) -> dict | None:
        return next((w for w in self.workers().values() if w["partition"] == f"{RM_ID}/{partition}"), None)

    def nodes_view(self, partition: str) -> dict[str, tuple[str, str]] | None:
        """allocationKey -> (uuid, nodeID) as the scheduler holds them (None while unreachable)."""
        status, nodes = self.lab.http_get_json(self.proxy_host, f"http://{self.rest}/ws/v1/partition/{partition}/nodes")
        if status != 200 or not isinstance(nodes, list):
            return None
        view: dict[str, tuple[str, str]] = {}
        for n in nodes:
            for a in n.get("allocations") or []:
                assert a["allocationKey"] not in view, f"scheduler holds {a['allocationKey']} twice"
                view[a["allocationKey"]] = (a["uuid"], a["nodeId"])
        return view


def report(rm: SIRM, held: dict[str, si_pb2.Allocation], asks: list[si_pb2.AllocationAsk]) -> None:
    """The RM's full state after (re-)registration: apps, nodes with their existing allocations, asks."""
    rm.apps(app("app-a", "root.a", "pa"), app("app-b", "root.b", "pb"))
    rm.wait_accepted("application", {"app-a", "app-b"})
    nodes = [node(f"{part}-node-{i}", part, memory=10_000, vcore=10_000,
                  existing=[a for a in held.values() if a.nodeID == f"{part}-node-{i}"])
             for part in ("pa", "pb") for i in range(2)]
    rm.nodes(*nodes)
    rm.wait_accepted("node", {n.nodeID for n in nodes})
    if asks:
        rm.asks(*asks)


@pytest.fixture
def running(lab, tmp_path) -> Stack:
    """The layout of the module docstring, started, with every worker joined over CURVE."""
    keys = tmp_path / "keys"
    make_keys(keys, "broker", "wa", "wb", "standby", "rmproxy", allow=("wa", "wb", "standby", "rmproxy"))
    s = Stack(lab, keys)
    s.start(tmp_path / "redis")
    wait_until(lambda: set(s.workers()) == {"wa", "wb", "standby"}, 30,
               "three workers joined the broker over CURVE", lambda: tails(s.procs.values()), interval=0.2)
    return s


def first_workload(s: Stack, rm: SIRM) -> tuple[dict[str, si_pb2.Allocation], dict[str, dict]]:
    """Register, report, allocate 6 asks per partition; returns (allocations, workers by name)."""
    rm.register(CONFIG)
    rm.open()
    report(rm, {}, [])
    asks = [ask(f"a-{i}", "app-a", "pa", memory=100, vcore=100) for i in range(6)]
    asks += [ask(f"b-{i}", "app-b", "pb", memory=100, vcore=100) for i in range(6)]
    rm.asks(*asks)
    held = rm.wait_allocated({a.allocationKey for a in asks}, 30)
    assert {held[k].partitionName for k in held} == {"pa", "pb"}
    # The pinned workers own their partitions; the standby idles (the broker's status is
    # pushed to rmproxy with its heartbeats, so it may trail the assignment by one beat).
    expected = {"wa": f"{RM_ID}/pa", "wb": f"{RM_ID}/pb", "standby": None}
    workers = wait_until(lambda: (w := s.workers()) and {n: x["partition"] for n, x in w.items()} == expected
                         and w, 5, f"ownership {expected}", list(s.procs.values()))
    return held, workers


def assert_in_sync(s: Stack, held: dict[str, si_pb2.Allocation], procs) -> None:
    """No duplicate UUIDs, and each partition holds exactly the RM's allocations."""
    uuids = [a.UUID for a in held.values()]
    assert len(set(uuids)) == len(uuids), "duplicate allocation UUIDs"
    for part in ("pa", "pb"):
        rm_view = {k: (a.UUID, a.nodeID) for k, a in held.items() if a.partitionName == part}
        wait_until(lambda: s.nodes_view(part) == rm_view, 15, f"{part} holds the RM's allocations", lambda: tails(procs), interval=0.2)


def assert_resync_requested(rm: SIRM) -> None:
    for stream, end in rm.wait_ended(timeout=20).items():
        assert end.code() == grpc.StatusCode.UNAVAILABLE, (stream, end)
        assert end.details().startswith("korral: re-register: "), (stream, end.details())


def test_two_hosts_schedule_and_a_cut_host_fails_over_to_the_standby(lab, running):
    s = running
    procs = list(s.procs.values())
    rm = SIRM.in_namespace(lab, s.proxy_host, s.si, RM_ID)
    try:
        held, before = first_workload(s, rm)

        # Cut host-a off. Its worker lives on but can no longer reach the broker or Redis.
        cut_at = time.monotonic()
        lab.link_down(s.host_a)
        assert_resync_requested(rm)
        # pa's state went with its worker: it waits for the RM's re-registration, which gives it
        # one new owner in one new epoch (no spare takes it behind the RM's back)
        wait_until(lambda: "wa" not in s.workers() and s.owner("pa") is None, 20, "wa gone and pa waiting",
                   lambda: tails(procs), interval=0.2)
        assert s.owner("pb")["name"] == "wb"

        # The RM re-registers and re-reports everything it holds, then asks for more.
        rm.register(CONFIG)
        settled = s.owner("pa")  # registration returned: the owner is known at once
        assert settled is not None and settled["name"] == "standby", settled
        assert settled["epoch"] > before["wa"]["epoch"]
        rm.open()
        more = [ask(f"a-after-{i}", "app-a", "pa", memory=100, vcore=100) for i in range(4)]
        more += [ask(f"b-after-{i}", "app-b", "pb", memory=100, vcore=100) for i in range(4)]
        report(rm, held, more)
        new = rm.wait_allocated({a.allocationKey for a in more}, 30)
        resync = time.monotonic() - cut_at
        assert not held.keys() & new.keys()
        held.update(new)
        # The scheduler holds exactly the RM's allocations in each partition: none lost, none doubled.
        assert_in_sync(s, held, procs)
        print(f"host cut off -> pa owned by the standby on host-b and scheduling again in {resync:.2f}s")

        # host-a comes back: its worker still believes it owns pa under the old epoch. The broker
        # tells it to release pa (no split brain), it rejoins as a spare, and pa stays where it is.
        lab.link_up(s.host_a)
        rejoined = wait_until(lambda: (w := s.workers()).get("wa", {}).get("partition", "?") is None and w, 20,
                              "wa rejoined as a spare", lambda: tails(procs), interval=0.2)
        assert rejoined["standby"]["partition"] == f"{RM_ID}/pa" and rejoined["standby"]["epoch"] == settled["epoch"]
        last = [ask(f"a-last-{i}", "app-a", "pa", memory=100, vcore=100) for i in range(3)]
        rm.asks(*last)
        final = rm.wait_allocated({a.allocationKey for a in last}, 20)
        held.update(final)
        rm_view = {k: (a.UUID, a.nodeID) for k, a in held.items() if a.partitionName == "pa"}
        wait_until(lambda: s.nodes_view("pa") == rm_view, 15, "pa holds the RM's allocations after the rejoin", lambda: tails(procs), interval=0.2)
        for name, proc in s.procs.items():
            assert proc.alive(), f"{name} died:\n{proc.tail()}"
    finally:
        rm.close()


def test_broker_killed_on_its_host_workers_on_other_hosts_keep_their_partitions(lab, running):
    """kill -9 the broker; restarted, it rebuilds its table from the CURVE-authenticated re-announcements."""
    s = running
    rm = SIRM.in_namespace(lab, s.proxy_host, s.si, RM_ID)
    try:
        held, before = first_workload(s, rm)
        lab.kill(s.procs["broker"])
        s.procs["broker"].popen.wait(5)
        killed_at = time.monotonic()
        s.start_broker("broker-restarted")
        procs = list(s.procs.values())
        assert_resync_requested(rm)  # envelopes inside the dead broker may be lost: the RM resyncs
        # No partition moved: the same workers own them again, re-announced across hosts.
        expected = {"wa": f"{RM_ID}/pa", "wb": f"{RM_ID}/pb", "standby": None}
        wait_until(lambda: {n: x["partition"] for n, x in s.workers().items()} == expected, 20,
                   f"ownership {expected} after the broker restart", lambda: tails(procs), interval=0.2)
        assert {n: x["pid"] for n, x in s.workers().items()} == {n: x["pid"] for n, x in before.items()}

        rm.register(CONFIG)
        rm.open()
        more = [ask(f"a-after-{i}", "app-a", "pa", memory=100, vcore=100) for i in range(3)]
        more += [ask(f"b-after-{i}", "app-b", "pb", memory=100, vcore=100) for i in range(3)]
        report(rm, held, more)
        new = rm.wait_allocated({a.allocationKey for a in more}, 30)
        print(f"broker killed -> both partitions scheduling again in {time.monotonic() - killed_at:.2f}s")
        held.update(new)
        assert_in_sync(s, held, procs)
        for name, proc in s.procs.items():
            assert proc.alive(), f"{name} died:\n{proc.tail()}"
    finally:
        rm.close()


def test_lab_cleans_up_namespaces_and_processes(tmp_path):
    """close() stops the lab's processes by pid and removes every namespace it made."""
    net = NetLab(tmp_path / "logs")
    host = net.add_host("h1")
    proc = net.start(host, "sleeper", ["sleep", "300"])
    names = net.namespaces()
    assert proc.alive()
    status, _ = net.http_get_json(host, f"http://{host.ip}:1/")  # nothing listens: refused, not hung
    assert status == 0
    problems = net.close()
    assert problems == []
    assert not proc.alive()
    import subprocess

    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert not any(ns in listed.split() for ns in names), listed
