"""Two ``korral k8s-shim`` replicas electing a leader through a Lease, end to end (``korral up`` +
``korral k8s-fake`` + two shims), with short lease settings (3 s, renew deadline 2 s, retries
every 0.5 s; longer where a loaded machine's pauses must not cost the lease):

- ``kill -9`` of the leader: the standby (informers synced, nothing registered) takes the Lease
  once it expires, registers, replays and binds the pods that came meanwhile; no pod is bound
  twice. Prints one ``leader-takeover`` JSON line: seconds from the kill to the standby holding
  the Lease and to the next binding (``-m slow``: the same at 5,000 nodes, and with
  kube-scheduler's default lease of 15 s).
- SIGSTOP of the leader past its lease: the standby takes over and binds; on SIGCONT the old
  leader binds nothing and exits (status 1), as kube-scheduler does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from k8s_shim.demo import configmap, namespace, pod
from tests.conftest import stop_process, wait_until
from tests.k8s_shim.cluster import ShimCluster, placement_problems
from tests.k8s_shim.scenarios import QUEUES

pytestmark = pytest.mark.timeout(240)

LEASE_FLAGS = ("--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
               "--leader-elect-retry-period", "0.5s")
# a lease far longer than a takeover on a released lease takes, and a renew deadline a loaded
# machine's pauses stay under
LONG_LEASE = ("--leader-elect-lease-duration", "20s", "--leader-elect-renew-deadline", "3s",
              "--leader-elect-retry-period", "0.5s")
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/yunikorn/leases/yunikorn"
NS = "work"


class Replicas:
    """The fake API server, a stack, and shim replicas by name (each its own log)."""

    def __init__(self, stack, workdir: Path, nodes: int, lease_flags: tuple[str, ...] = LEASE_FLAGS) -> None:
        self.c = ShimCluster(stack, workdir)
        self.kube = self.c.start_fake("--nodes", str(nodes), "--node-cpu", "8", "--node-memory", "32Gi")
        self.kube.create("/api/v1/namespaces", namespace("yunikorn"))
        self.kube.create("/api/v1/namespaces/yunikorn/configmaps",
                         configmap("yunikorn-configs", "yunikorn", {"queues.yaml": QUEUES}))
        self.kube.create("/api/v1/namespaces", namespace(NS))
        self.procs: dict[str, subprocess.Popen] = {}
        self.nodes = nodes
        self.lease_flags = lease_flags

    def start(self, name: str) -> subprocess.Popen:
        c = self.c
        proc = c._run("k8s-shim", "--kubeconfig", str(c.kubeconfig), "--namespace", "yunikorn",
                      "--si-address", c.stack.si_address, "--rest-address", c.stack.rest_address,
                      "--instance", name, *self.lease_flags, log=self.log_path(name))
        self.procs[name] = proc
        return proc

    def log_path(self, name: str) -> Path:
        return self.c.workdir / f"shim-{name}.log"

    def log(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text() if path.exists() else ""

    def logs(self) -> str:
        tails = [f"--- shim-{n}.log (last 30 lines)\n" + "\n".join(self.log(n).splitlines()[-30:]) for n in self.procs]
        return "\n".join(tails) + "\n" + self.c.logs()

    def holder(self) -> str:
        try:
            return self.kube.get(LEASE_PATH)["spec"].get("holderIdentity", "")
        except Exception:
            return ""

    def leads(self, name: str) -> None:
        wait_until(lambda: self.holder().startswith(name + "_"), 30, f"{name} holding the lease", self.logs)

    def stands_by(self, name: str) -> None:
        wait_until(lambda: "standing by" in self.log(name), 60, f"{name} synced and standing by", self.logs)

    def nodes_open(self) -> None:
        wait_until(lambda: sum(1 for n in self.c.korral_nodes().values() if n["schedulable"]) == self.nodes, 90,
                   "every node open in Korral", self.logs)

    def create_pods(self, prefix: str, count: int) -> None:
        for i in range(count):
            self.kube.create(f"/api/v1/namespaces/{NS}/pods",
                             pod(f"{prefix}-{i}", NS, "100m", "64Mi",
                                 labels={"applicationId": prefix, "queue": "root.stream"}))

    def bound(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.kube.pods(NS) if p["spec"].get("nodeName")}

    def twice(self) -> list[str]:
        """Pods with more than one binding request or binding (each must have exactly one)."""
        return [f"{pod} bound {n['bound']} times in {n['requests']} requests"
                for pod, n in self.c.bind_requests().items() if n["requests"] != 1 or n["bound"] != 1]

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_process(proc, 10)
        self.c.stop()


@pytest.fixture
def replicas(stack_factory, tmp_path, request):
    r = Replicas(stack_factory(workers=1), tmp_path, *getattr(request, "param", (2,)))
    try:
        yield r
    finally:
        r.stop()


def _leader_and_standby(r: Replicas) -> None:
    r.start("a")
    r.leads("a")
    r.nodes_open()
    r.start("b")
    r.stands_by("b")
    assert "registered as RM" not in r.log("b")  # a standby registers nothing with Korral


@pytest.mark.parametrize("replicas", [(2,), pytest.param((5000,), marks=pytest.mark.slow),
                                      pytest.param((5000, ()), marks=pytest.mark.slow)], indirect=True,
                         ids=["2-nodes", "5000-nodes", "5000-nodes-default-lease"])
def test_kill_9_of_the_leader_the_standby_takes_over_and_binds_what_came_meanwhile(replicas):
    r = replicas
    _leader_and_standby(r)
    r.create_pods("before", 5)
    wait_until(lambda: len(r.bound()) == 5, 60, "the leader binding the first pods", r.logs)
    killed = time.monotonic()
    r.procs["a"].send_signal(signal.SIGKILL)
    r.procs["a"].wait(10)
    r.create_pods("after", 5)
    first = took = None
    deadline = killed + 60  # the default lease (15 s) included
    while len(r.bound()) < 10:  # bounded: 60 s from the kill
        if took is None and r.holder().startswith("b_"):
            took = time.monotonic() - killed
        if first is None and len(r.bound()) > 5:
            first = time.monotonic() - killed
        assert time.monotonic() < deadline, f"the standby did not bind the new pods\n{r.logs()}"
        time.sleep(0.05)
    first = first if first is not None else time.monotonic() - killed
    assert r.holder().startswith("b_")
    assert "registered as RM" in r.log("b")
    assert r.twice() == [] and placement_problems(r.kube, terminating=False) == []
    print("leader-takeover " + json.dumps({"nodes": r.nodes, "lease_s": r.lease_flags[1] if r.lease_flags else "15s",
                                           "lease_taken_s": took and round(took, 2), "next_bind_s": round(first, 2)}))


@pytest.mark.parametrize("replicas", [(2, ("--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline",
                                             "3s", "--leader-elect-retry-period", "0.5s"))],
                         indirect=True, ids=["4s-lease"])
def test_a_leader_frozen_past_its_lease_binds_nothing_when_it_wakes_and_exits(replicas):
    r = replicas
    _leader_and_standby(r)
    r.create_pods("before", 3)
    wait_until(lambda: len(r.bound()) == 3, 60, "the leader binding the first pods", r.logs)
    a = r.procs["a"]
    os.kill(a.pid, signal.SIGSTOP)
    try:
        r.leads("b")
        r.create_pods("while-frozen", 4)  # the frozen leader's watches see these when it wakes
        wait_until(lambda: len(r.bound()) == 7, 60, "the new leader binding the pods", r.logs)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.wait(20) == 1, r.logs()  # it exits at once: its first write, or its renewal, finds the lease lost
    assert "leadership lost" in r.log("a")
    r.create_pods("later", 2)
    wait_until(lambda: len(r.bound()) == 9, 60, "the new leader binding later pods", r.logs)
    assert r.holder().startswith("b_")
    assert r.twice() == [] and placement_problems(r.kube, terminating=False) == []


@pytest.mark.parametrize("replicas", [(2, LONG_LEASE)], indirect=True, ids=["20s-lease"])
def test_a_clean_stop_releases_the_lease_and_the_standby_takes_over_at_once(replicas):
    r = replicas
    _leader_and_standby(r)
    stopped = time.monotonic()
    assert not stop_process(r.procs["a"], 10)
    assert r.procs["a"].returncode == 0, r.logs()
    r.leads("b")
    took = time.monotonic() - stopped
    assert took < 10, f"took {took:.1f}s: the released lease was waited out (20 s)"
    r.create_pods("after", 3)
    wait_until(lambda: len(r.bound()) == 3, 60, "the new leader binding", r.logs)
    assert r.twice() == []
