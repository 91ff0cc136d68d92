"""Partitions per node pool end to end: ``korral up`` (two partitions, each on its own worker, and
a spare), ``korral k8s-fake --node-pools`` (two labelled pools of fake nodes) and ``korral
k8s-shim --partition-label``, all real processes. Pods of both pools are scheduled at once, each
bound only to a node of its pool and within allocatable; a node and a pod naming a partition the
config lacks wait, saying why, until a reload adds it; ``kill -9`` of one pool's worker: only that
pool's partition is replayed (the per-partition resync, no re-registration), the other pool's
worker keeps its partition and binds, the killed pool recovers and binds what waited, and
nothing is bound twice; the same while tiny pods stream into both pools, the other pool's longest
gap between bindings measured (one ``partition-resync`` JSON line); a node relabelled into the
other pool leaves its partition at once and joins the other once the pods running on it have
ended."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time

import pytest

from common.netutil import http_get_json
from k8s_shim.demo import configmap, namespace, node, pod
from tests.conftest import Background, wait_until
from tests.k8s_shim.cluster import ShimCluster, condition, placement_problems, pod_events
from tests.k8s_shim.test_kill_e2e import PlacementWatch
from tests.k8s_shim.test_shim_e2e import name, ours

LABEL = "korral.io/pool"
REPLAYED_ALONE = "partition blue lost its worker: replaying it alone"  # the shim's log, per-partition resync
RE_REGISTERED = "scheduler connection restored"  # the shim's log, after a whole re-registration
PARTITION = "yunikorn.apache.org/partition"
POOLS = ("blue", "green")


def queues(*partitions: str) -> str:
    out = "partitions:\n"
    for p in partitions:
        out += (f"  - name: {p}\n    placementrules:\n      - name: tag\n        value: namespace\n"
                "        create: true\n    queues:\n      - name: root\n        submitacl: '*'\n")
    return out


@pytest.fixture
def pools_cluster(stack_factory, tmp_path):
    cluster = ShimCluster(stack_factory(workers=3), tmp_path)  # a worker per partition, and a spare
    try:
        kube = cluster.start_fake("--node-pools", "blue=2,green=2", "--node-pool-label", LABEL,
                                  "--node-cpu", "4", "--node-memory", "8Gi")
        kube.create("/api/v1/namespaces", namespace("yunikorn"))
        kube.create("/api/v1/namespaces/yunikorn/configmaps",
                    configmap("yunikorn-configs", "yunikorn", {"queues.yaml": queues(*POOLS)}))
        yield cluster
    finally:
        cluster.stop()


def korral_nodes(c: ShimCluster, partition: str) -> dict[str, dict]:
    body = http_get_json(f"http://{c.stack.rest_address}/ws/v1/partition/%5Bmycluster%5D{partition}/nodes").body
    return {n["nodeID"]: n for n in body} if isinstance(body, list) else {}


def owner_pid(c: ShimCluster, partition: str) -> int | None:
    workers = http_get_json(f"http://{c.stack.rest_address}/ws/v1/korral/stack").body["cluster"].get("workers", [])
    return next((w["pid"] for w in workers if w.get("partition") == f"mycluster/{partition}"), None)


def pool_of(kube, node_name: str) -> str:
    return kube.get(f"/api/v1/nodes/{node_name}")["metadata"]["labels"].get(LABEL, "")


def pool_pod(pool: str, i: int, via_namespace: bool) -> dict:
    """A 1-cpu pod of ``pool``: by its namespace's annotation, or by its own in the other team's namespace."""
    if via_namespace:
        return pod(f"{pool}-{i}", f"{pool}-team", "1", "256Mi", labels={"applicationId": f"{pool}-app"})
    other = "green" if pool == "blue" else "blue"
    return pod(f"{pool}-{i}", f"{other}-team", "1", "256Mi", labels={"applicationId": f"{pool}-own-{i}"},
               annotations={PARTITION: pool})


def bound(kube) -> dict[str, str]:
    return {name(p): p["spec"]["nodeName"] for p in ours(kube) if p["spec"].get("nodeName")}


def create(kube, pods: list[dict]) -> set[str]:
    for p in pods:
        kube.create(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
    return {name(p) for p in pods}


def expected_pool(p: str) -> str:
    return p.split("/")[1].split("-")[0]


def partitions_hold_their_pools(c: ShimCluster) -> None:
    """Each partition holds exactly the pods running in its pool (once it has caught up)."""
    for part in POOLS:
        running = {p["metadata"]["uid"] for p in ours(c.kube)
                   if p["spec"].get("nodeName") and pool_of(c.kube, p["spec"]["nodeName"]) == part}
        wait_until(lambda: {a["allocationKey"] for n in korral_nodes(c, part).values()
                            for a in n.get("allocations") or []} == running, 60,
                   f"partition {part}'s allocations equal its pool's running pods", c.logs)


def test_two_node_pools_are_two_partitions_scheduled_at_once_and_one_survives_the_others_worker(pools_cluster):
    c, kube = pools_cluster, pools_cluster.kube
    kube.create("/api/v1/nodes", node("purple-node-0", "4", "8Gi", {LABEL: "purple"}))  # a pool the config lacks
    c.start_shim("--partition-label", LABEL)
    for p in POOLS:
        wait_until(lambda: sorted(n for n, v in korral_nodes(c, p).items() if v["schedulable"]) ==
                   [f"{p}-node-0", f"{p}-node-1"], 60, f"the {p} pool's nodes registered in partition {p}", c.logs)
    for p in POOLS:
        kube.create("/api/v1/namespaces", namespace(f"{p}-team", {PARTITION: p}))

    # both pools at once, interleaved: by namespace, and by the pod's own annotation in the other team's namespace
    first = create(kube, [pool_pod(p, i, via_namespace=i < 4) for i in range(6) for p in POOLS])
    lost = create(kube, [pod("lost", "blue-team", "100m", "64Mi", labels={"applicationId": "lost"},
                             annotations={PARTITION: "purple"})])
    create(kube, [pod("huge", "green-team", "6", "64Mi", labels={"applicationId": "huge"})])  # fits no green node
    wait_until(lambda: set(bound(kube)) == first, 90, "the pods of both pools bound", c.logs)
    for p, n in bound(kube).items():
        assert pool_of(kube, n) == expected_pool(p), (p, n)
    assert not placement_problems(kube), placement_problems(kube)
    # what names a partition the config lacks waits, saying so; Korral's partitions never saw it
    events = kube.events()
    assert any(e["reason"] == "NodeRejected" and e["regarding"]["name"] == "purple-node-0"
               and f"metadata.labels[{LABEL}]=purple names a partition the configuration lacks" in e["note"]
               for e in events)
    note = next(e["note"] for e in events if e["regarding"].get("name") == "lost" and e["reason"] == "FailedScheduling")
    assert f"metadata.annotations[{PARTITION}]=purple names a partition the configuration lacks" in note
    assert all("purple-node-0" not in korral_nodes(c, p) for p in POOLS)
    # why a pod waits is asked of its own partition: the green pool's two nodes
    huge = wait_until(lambda: condition(kube.get("/api/v1/namespaces/green-team/pods/huge")), 60,
                      "the huge pod's PodScheduled condition", c.logs)
    assert huge["reason"] == "Unschedulable" and huge["message"].startswith("0/2 nodes are available: "), huge

    # kill -9 the blue pool's worker (by its pid, a child of the stack's supervisord)
    blue_pid, green_pid = owner_pid(c, "blue"), owner_pid(c, "green")
    assert blue_pid and green_pid and blue_pid != green_pid
    assert blue_pid in {p.pid for n, p in c.stack.current_procs().items() if n.startswith("worker")}
    os.kill(blue_pid, signal.SIGKILL)
    killed = time.monotonic()
    second = create(kube, [pool_pod(p, i, via_namespace=True) for i in range(6, 8) for p in POOLS])
    green_new = {p for p in second if expected_pool(p) == "green"}
    wait_until(lambda: green_new <= set(bound(kube)), 90, "the green pool binding after blue's worker died", c.logs)
    green_after = time.monotonic() - killed
    wait_until(lambda: second <= set(bound(kube)), 90, "the blue pool recovered and bound what waited", c.logs)
    print(f"after kill -9 of blue's worker: green's new pods bound in {green_after:.1f}s, "
          f"blue's in {time.monotonic() - killed:.1f}s")
    wait_until(lambda: REPLAYED_ALONE in c.shim_log.read_text(), 60, "the shim replayed partition blue alone",
               c.logs)
    assert RE_REGISTERED not in c.shim_log.read_text()
    assert owner_pid(c, "green") == green_pid  # the green pool's worker kept its partition
    assert owner_pid(c, "blue") not in (None, blue_pid)
    for p, n in bound(kube).items():
        assert pool_of(kube, n) == expected_pool(p), (p, n)
    assert not placement_problems(kube), placement_problems(kube)
    for p, reasons in pod_events(kube).items():
        assert reasons.count("Scheduled") <= 1, (p, reasons)  # nothing bound twice
    partitions_hold_their_pools(c)

    # the config gains the purple partition (the spare worker takes it): its node and its pod are taken
    kube.request("PATCH", "/api/v1/namespaces/yunikorn/configmaps/yunikorn-configs",
                 {"data": {"queues.yaml": queues(*POOLS, "purple")}}, "application/merge-patch+json")
    wait_until(lambda: lost <= set(bound(kube)), 90, "the purple pod bound once its partition exists", c.logs)
    assert bound(kube)["blue-team/lost"] == "purple-node-0"
    assert "purple-node-0" in korral_nodes(c, "purple")

    # a node relabelled into the other pool leaves green at once, and joins blue only once the green
    # pods running on it have ended (blue would not count them)
    moved = "green-node-1"
    on_it = [p for p in ours(kube) if p["spec"].get("nodeName") == moved]
    assert on_it
    kube.request("PATCH", f"/api/v1/nodes/{moved}", {"metadata": {"labels": {LABEL: "blue"}}},
                 "application/merge-patch+json")
    wait_until(lambda: moved not in korral_nodes(c, "green"), 60, f"{moved} gone from partition green", c.logs)
    assert moved not in korral_nodes(c, "blue")
    wait_until(lambda: any(e["reason"] == "NodePartitionChanged" and e["regarding"]["name"] == moved
                           for e in kube.events()), 30, f"the NodePartitionChanged event on {moved}", c.logs)
    assert {name(p) for p in on_it} <= set(bound(kube))  # nothing running there is touched
    for p in on_it:
        kube.request("DELETE", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}")
    wait_until(lambda: moved in korral_nodes(c, "blue"), 60, f"{moved} registered in partition blue", c.logs)
    assert not placement_problems(kube), placement_problems(kube)


class PoolStreams(Background):
    """Tiny pods created in each pool at ``rate`` a second, and when each pool's bindings were
    first seen (the API server's count of bindings, polled every 20 ms)."""

    interval = 0.02

    def __init__(self, kube, rate: float = 20.0) -> None:
        super().__init__("pool-streams")
        self.kube, self.rate = kube, rate
        self.created: dict[str, float] = {}  # namespace/name -> when created
        self.bound_at: dict[str, float] = {}  # namespace/name -> when first seen bound
        self.started = time.monotonic()
        self.made = 0

    def step(self) -> None:
        while self.made <= (time.monotonic() - self.started) * self.rate:
            for p in POOLS:
                made = pod(f"s{self.made}", f"{p}-team", "1m", "16Mi", labels={"applicationId": f"{p}-stream"})
                self.created[f"{p}-team/s{self.made}"] = time.monotonic()
                self.kube.create(f"/api/v1/namespaces/{p}-team/pods", made)
            self.made += 1
        seen = time.monotonic()
        for key, counts in self.kube.get("/korral-fake/bindings").items():
            if counts["bound"] and key in self.created:
                self.bound_at.setdefault(key, seen)

    def bound(self, pool: str, since: float = 0.0) -> list[float]:
        return sorted(t for k, t in self.bound_at.items() if k.startswith(f"{pool}-team/") and t >= since)

    def gaps(self, pool: str, since: float, until: float) -> list[float]:
        times = [t for t in self.bound(pool, since) if t <= until]
        return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.timeout(300)
def test_a_lost_pools_worker_pauses_only_that_pool_while_pods_stream_into_both(pools_cluster):
    """kill -9 of blue's worker while tiny pods stream into both pools: the shim replays blue alone
    (no re-registration), green's bindings go on with no longer gap than before the kill, blue
    binds what came meanwhile, nothing is bound twice, no node over its allocatable."""
    c, kube = pools_cluster, pools_cluster.kube
    c.start_shim("--partition-label", LABEL)
    for p in POOLS:
        kube.create("/api/v1/namespaces", namespace(f"{p}-team", {PARTITION: p}))
        wait_until(lambda: sorted(n for n, v in korral_nodes(c, p).items() if v["schedulable"]) ==
                   [f"{p}-node-0", f"{p}-node-1"], 60, f"the {p} pool's nodes registered in partition {p}", c.logs)
    blue_pid, green_pid = owner_pid(c, "blue"), owner_pid(c, "green")
    assert blue_pid and green_pid and blue_pid != green_pid
    with PlacementWatch(c) as watch, PoolStreams(kube) as streams:
        # green's normal pace and its noise (a 20 ms poll on a shared machine) over 4 s before the kill
        wait_until(lambda: all(len(streams.bound(p)) >= 80 for p in POOLS), 60, "both pools' streams binding",
                   c.logs)
        warm = streams.bound("green")[5]  # the first bindings wait for the stream's application
        os.kill(blue_pid, signal.SIGKILL)
        killed = time.monotonic()
        blue_back = wait_until(lambda: min((t for k, t in streams.bound_at.items() if k.startswith("blue-")
                                            and streams.created[k] > killed), default=None), 60,
                               "blue binding a pod created after its worker died", c.logs)
        waited = {k for k, t in streams.created.items() if k.startswith("blue-") and t <= blue_back}
        wait_until(lambda: waited <= set(streams.bound_at), 60, "blue bound every pod created meanwhile", c.logs)
        settled = time.monotonic()
        wait_until(lambda: all(len(streams.bound(p, settled)) >= 20 for p in POOLS), 60,
                   "both pools' streams binding after blue's rebuild", c.logs)
        ended = time.monotonic()
    # green from the kill until 20 bindings after blue's rebuild, against green before the kill
    before, after = streams.gaps("green", warm, killed), streams.gaps("green", killed, ended)
    print("partition-resync " + json.dumps({
        "green_gap_before_kill_ms": {"median": round(statistics.median(before) * 1000),
                                     "longest": round(max(before) * 1000)},
        "green_gap_after_kill_ms": {"median": round(statistics.median(after) * 1000),
                                    "longest": round(max(after) * 1000)},
        "blue_longest_gap_s": round(max(streams.gaps("blue", warm, ended)), 2),
        "blue_rebuilt_s": round(blue_back - killed, 2), "blue_all_waiting_bound_s": round(settled - killed, 2)}))
    # only blue was replayed: the shim never re-registered
    books = c.shim_books() or {}
    assert books.get("replays") == {"registrations": 1, "partitions": {"blue": 1}}, books.get("replays")
    assert REPLAYED_ALONE in c.shim_log.read_text() and RE_REGISTERED not in c.shim_log.read_text()
    assert owner_pid(c, "green") == green_pid and owner_pid(c, "blue") not in (None, blue_pid)
    # green did not pause: no gap longer than its own pace gave before the kill, but for a stall of the
    # whole machine: supervisord restarts the killed worker at once, and its start (0.6 s of one of
    # the two cores) stalled both pools together for 0.57-0.72 s in 2 of 17 runs. The counter above
    # tells the two recoveries apart at this size (a whole re-registration paused green only
    # 0.17-0.25 s here, docs/benchmarks.md); this catches a pause of green's own (blue's fallback
    # timeouts are 10 s)
    assert max(after) <= max(before) + 1.0, (before, after)
    assert not watch.seen and not placement_problems(kube), (watch.seen, placement_problems(kube))
    assert all(n["bound"] <= 1 for n in c.bind_requests().values())  # nothing bound twice
    for p, n in bound(kube).items():
        assert pool_of(kube, n) == p.split("-team/")[0], (p, n)
    partitions_hold_their_pools(c)
