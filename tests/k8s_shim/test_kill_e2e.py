"""``kill -9`` of the shim, a worker, the broker or rmproxy in the middle of a workload, end to end
(``korral up`` + ``korral k8s-fake`` + ``korral k8s-shim``). After each: no pod bound twice (the
API server counts pods/binding requests), no node over allocatable at any moment it is sampled,
every pod bound once room allows (the scenario finishes), and Korral, the shim and the API server agree on what runs where.

The workloads are ``tests.k8s_shim.scenarios.SCENARIOS`` (a preemption, a steady stream of pods, a
gang of placeholders and members); a new one is one more entry there. ``make test`` runs two pairs; the whole matrix is marked ``slow``.
Each test prints one ``kill-cost`` JSON line (seconds from the kill to the next binding and to the
scenario's end), the numbers docs/kubernetes.md quotes.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from common.netutil import http_get_json
from tests.conftest import Background, wait_until
from tests.k8s_shim.cluster import ShimCluster, placement_problems
from tests.k8s_shim.scenarios import SCENARIOS, cluster_for, common_problems

pytestmark = pytest.mark.timeout(420)

TARGETS = ("shim", "worker", "broker", "rmproxy")
QUICK = {("shim", "gang"), ("worker", "stream")}  # in make test; the rest is slow


def _matrix():
    for target in TARGETS:
        for scenario in SCENARIOS:
            marks = () if (target, scenario) in QUICK else (pytest.mark.slow,)
            yield pytest.param(target, scenario, marks=marks, id=f"{target}-{scenario}")


def _owner_pid(c: ShimCluster) -> int:
    """The pid of the worker that owns the shim's partition."""
    def owner():
        view = http_get_json(f"http://{c.stack.rest_address}/ws/v1/korral/stack").body["cluster"]
        return next((w for w in view.get("workers", []) if w.get("partition") == "mycluster/default"), None)
    return wait_until(owner, 30, "the partition's worker", c.logs)["pid"]


def kill(c: ShimCluster, target: str) -> None:
    """SIGKILL ``target`` by its pid; the shim (our own process) is started again, the stack's
    processes by supervisord."""
    if target == "shim":
        c.stop_shim(kill=True)
        c.start_shim()
        return
    pid = _owner_pid(c) if target == "worker" else c.stack.pids[target]
    os.kill(pid, signal.SIGKILL)


class PlacementWatch(Background):
    """Samples the placement while the test runs: a node over its allocatable even for a moment
    (say a new pod placed before the pods already there were counted) is kept."""

    interval = 0.2

    def __init__(self, c: ShimCluster) -> None:
        super().__init__("k8s-placement-watch")
        self.c = c
        self.seen: list[str] = []

    def step(self) -> None:
        try:
            self.seen += [p for p in placement_problems(self.c.kube, terminating=False) if p not in self.seen]
        except OSError:
            pass


def _bound(c: ShimCluster) -> int:
    return sum(n["bound"] for n in c.bind_requests().values())


@pytest.fixture
def cluster(stack_factory, tmp_path):
    c = cluster_for(stack_factory(workers=2), tmp_path)  # a spare worker takes over a killed one's partition
    try:
        c.start_shim()
        yield c
    finally:
        c.stop()


@pytest.mark.parametrize("target, scenario", list(_matrix()))
def test_a_kill_in_the_middle_binds_nothing_twice_and_everything_once(cluster, target, scenario):
    c, s = cluster, SCENARIOS[scenario]()
    watch = PlacementWatch(c)
    try:
        s.start(c)
        watch.__enter__()
        wait_until(lambda: s.in_the_middle(c), 60, f"the {scenario} in the middle", c.logs)
        bound_before = _bound(c)
        killed = time.monotonic()
        kill(c, target)
        s.resume(c)
        next_bind = None
        deadline = killed + s.timeout
        while not s.done(c):  # bounded: the scenario's own timeout from the kill
            if next_bind is None and _bound(c) > bound_before:
                next_bind = time.monotonic() - killed
            assert time.monotonic() < deadline, f"{scenario} not done {s.timeout}s after the kill\n{c.logs()}"
            time.sleep(0.05)
        done = time.monotonic() - killed
        if next_bind is None and _bound(c) > bound_before:  # bound and done between two looks
            next_bind = done
    finally:
        watch.__exit__(None, None, None)
        s.stop()
    problems = s.problems(c, disturbed=True) + common_problems(c) + watch.seen
    assert problems == [], problems
    wait_until(lambda: not c.disagreements(), 30, "Korral, the shim and the API server agree",
               lambda: f"{c.disagreements()}\n{c.logs()}")
    print("kill-cost " + json.dumps({"target": target, "scenario": scenario,
                                     "next_bind_s": None if next_bind is None else round(next_bind, 2),
                                     "done_s": round(done, 2)}))
