"""Workloads for the shim's end-to-end preemption and kill tests, each a ``Scenario``: what it
creates, when it is "in the middle" (the moment a kill test strikes), when it is done, and what
must then hold beyond the checks every scenario shares (``common_problems``: no pod bound twice,
no node over allocatable, Korral, the shim and the API server agreeing).

A new workload is one more ``Scenario`` subclass listed in ``SCENARIOS``: the kill tests run it
against every process.
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

from k8s_shim.demo import configmap, namespace, node, pod
from tests.conftest import Background, wait_until
from tests.k8s_shim.cluster import ShimCluster, placement_problems

__all__ = ["QUEUES", "Scenario", "Preemption", "PreemptionVictims", "Stream", "Gang", "SCENARIOS", "cluster_for", "common_problems"]

# root.low and root.high have guarantees (preemption takes back high's); root.stream and root.gang
# have none.
QUEUES = """partitions:
  - name: default
    preemption:
      enabled: true
    placementrules:
      - name: provided
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: low
            resources:
              guaranteed: {vcore: 1}
          - name: high
            resources:
              guaranteed: {vcore: 3}
            properties:
              preemption.delay: 1s
          - name: stream
          - name: gang
"""

ALLOW_PREEMPTION = "yunikorn.apache.org/allow-preemption"
TERMINATE_SECONDS = "korral.io/fake-terminate-seconds"


def cluster_for(stack, workdir) -> ShimCluster:
    """A fake API server with the scenarios' configmap (the shim not started yet)."""
    c = ShimCluster(stack, workdir)
    kube = c.start_fake()
    kube.create("/api/v1/namespaces", namespace("yunikorn"))
    kube.create("/api/v1/namespaces/yunikorn/configmaps",
                configmap("yunikorn-configs", "yunikorn", {"queues.yaml": QUEUES, "log.level": "INFO"}))
    return c


def _name(p: dict) -> str:
    return p["metadata"]["name"]


def _pods(c: ShimCluster, ns: str) -> dict[str, dict]:
    return {_name(p): p for p in c.kube.pods(ns)}


class Scenario:
    """One workload: ``start`` creates it (the shim already running), ``in_the_middle`` is true
    while it is in the state a kill should hit, ``done`` once it has finished, ``problems`` what
    is wrong with its outcome; ``stop`` ends anything it runs in the background."""

    name = ""
    timeout = 90.0  # seconds ``done`` may take after the last disturbance

    def start(self, c: ShimCluster) -> None:
        raise NotImplementedError

    def in_the_middle(self, c: ShimCluster) -> bool:
        raise NotImplementedError

    def done(self, c: ShimCluster) -> bool:
        raise NotImplementedError

    def resume(self, c: ShimCluster) -> None:
        """Called right after the kill: a workload held in the middle lets go (default: nothing held)."""

    def problems(self, c: ShimCluster, disturbed: bool) -> list[str]:
        return []

    def stop(self) -> None:
        pass


class Preemption(Scenario):
    """root.low fills both nodes (6 pods of 1 cpu on 2 × 3 cpu); two of them opt out (the pod's
    annotation, its PriorityClass's annotation). root.high then asks for 3 cpu at priority 1000:
    one pod whose class says ``preemptionPolicy: Never`` (created first, so it is considered
    first) and two that may preempt. The two take room from preemptable low pods; the Never pod
    waits until room is freed without preemption. Victims terminate in 2 s (a grace period)."""

    name = "preemption"
    NS = "prio"
    PREEMPTABLE = {f"low-{i}" for i in range(4)}

    def start(self, c: ShimCluster) -> None:
        kube = c.kube
        for n in (node("pn-1", "3", "6Gi"), node("pn-2", "3", "6Gi")):
            kube.create("/api/v1/nodes", n)
        wait_until(lambda: sum(1 for n in c.korral_nodes().values() if n["schedulable"]) == 2, 60,
                   "the two nodes open in Korral", c.logs)
        kube.create("/api/v1/namespaces", namespace(self.NS))
        for pc in ({"metadata": {"name": "keep", "annotations": {ALLOW_PREEMPTION: "false"}}, "value": 0},
                   {"metadata": {"name": "high"}, "value": 1000},
                   {"metadata": {"name": "never"}, "value": 1000, "preemptionPolicy": "Never"}):
            kube.create("/apis/scheduling.k8s.io/v1/priorityclasses",
                        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **pc})
        wait_until(lambda: "keep" in ((c.shim_books() or {}).get("priorityClasses") or {}), 30,
                   "the shim to know the priority classes", c.logs)
        for i in range(6):
            extra: dict[str, Any] = {"priorityClassName": "keep"} if i == 5 else {}
            ann = {TERMINATE_SECONDS: "2", **({ALLOW_PREEMPTION: "false"} if i == 4 else {})}
            kube.create(f"/api/v1/namespaces/{self.NS}/pods",
                        pod(f"low-{i}", self.NS, "1", "256Mi", labels={"applicationId": "low", "queue": "root.low"},
                            annotations=ann, **extra))
        wait_until(lambda: sum(1 for p in _pods(c, self.NS).values() if p["spec"].get("nodeName")) == 6, 60,
                   "root.low's six pods bound", c.logs)
        for name, cls in (("hi-never", "never"), ("hi-1", "high"), ("hi-2", "high")):
            kube.create(f"/api/v1/namespaces/{self.NS}/pods",
                        pod(name, self.NS, "1", "256Mi", labels={"applicationId": "high", "queue": "root.high"},
                            priorityClassName=cls))

    def in_the_middle(self, c: ShimCluster) -> bool:
        """The preemptors wait (created, none bound): the preemption comes after the kill."""
        pods = _pods(c, self.NS)
        return {"hi-1", "hi-2"} <= set(pods) and not any(pods[n]["spec"].get("nodeName") for n in ("hi-1", "hi-2"))

    def done(self, c: ShimCluster) -> bool:
        pods = _pods(c, self.NS)
        return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in ("hi-1", "hi-2")) \
            and not any(p["metadata"].get("deletionTimestamp") for p in pods.values())

    def victims(self, c: ShimCluster) -> set[str]:
        return {f"low-{i}" for i in range(6)} - set(_pods(c, self.NS))

    def problems(self, c: ShimCluster, disturbed: bool) -> list[str]:
        out = []
        pods = _pods(c, self.NS)
        victims = self.victims(c)
        if not victims <= self.PREEMPTABLE:
            out.append(f"a pod that opted out was preempted: {sorted(victims - self.PREEMPTABLE)}")
        if len(victims) < 2:
            out.append(f"victims {sorted(victims)}: expected at least two of {sorted(self.PREEMPTABLE)}")
        # undisturbed, exactly the room needed and the Never pod waits; a restart mid-preemption
        # may count a victim still terminating as running again and take one more, whose room
        # the Never pod may then get
        if not disturbed and len(victims) != 2:
            out.append(f"victims {sorted(victims)}: expected exactly two")
        if not disturbed and pods["hi-never"]["spec"].get("nodeName"):
            out.append("the preemptionPolicy: Never pod was bound without room freed for it")
        return out

    def finish(self, c: ShimCluster) -> None:
        """Free room without preemption: the Never pod is then bound."""
        kube = c.kube
        assert not _pods(c, self.NS)["hi-never"]["spec"].get("nodeName"), "the Never pod preempted"
        kube.request("DELETE", f"/api/v1/namespaces/{self.NS}/pods/low-4")
        wait_until(lambda: _pods(c, self.NS)["hi-never"]["spec"].get("nodeName"), 60,
                   "the Never pod bound once room was freed", c.logs)


class PreemptionVictims(Preemption):
    """The same preemption, hit while its victims terminate (in their grace period)."""

    name = "preemption-victims"

    def in_the_middle(self, c: ShimCluster) -> bool:
        return any(p["metadata"].get("deletionTimestamp") for p in _pods(c, self.NS).values())


class _Creator(Background):
    """Creates one pod every ``interval`` seconds until ``total`` are created."""

    interval = 0.2

    def __init__(self, c: ShimCluster, ns: str, total: int) -> None:
        super().__init__("k8s-stream")
        self.c, self.ns, self.total = c, ns, total
        self.created = 0
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.apps = itertools.cycle([f"stream-{i}" for i in range(4)])

    def step(self) -> None:
        if self.created >= self.total:
            self.stop.set()
            return
        name = f"s-{self.created}"
        try:
            self.c.kube.create(f"/api/v1/namespaces/{self.ns}/pods",
                               pod(name, self.ns, "500m", "128Mi", run_seconds=1.5, restartPolicy="Never",
                                   labels={"applicationId": next(self.apps), "queue": "root.stream"}))
            self.created += 1
        except OSError as exc:  # the API server is never killed: any failure is a finding
            self.errors.append(f"{name}: {exc}")
            self.stop.set()


class Stream(Scenario):
    """Pods of four applications created at 5 a second (500m, each runs 1.5 s) on 3 × 2 cpu, one
    node half taken by another scheduler's pod (a replay must count it before that node opens):
    about 6 run at a time; every one must run once."""

    name = "stream"
    NS = "flow"
    TOTAL = 60

    def __init__(self) -> None:
        self.creator: _Creator | None = None

    def start(self, c: ShimCluster) -> None:
        kube = c.kube
        for i in range(3):
            kube.create("/api/v1/nodes", node(f"sn-{i}", "2", "4Gi"))
        kube.create("/api/v1/namespaces", namespace(self.NS))
        kube.create(f"/api/v1/namespaces/{self.NS}/pods",
                    pod("other", self.NS, "1", "128Mi", scheduler="default-scheduler", node_name="sn-0"))
        wait_until(lambda: sum(1 for n in c.korral_nodes().values() if n["schedulable"]) == 3
                   and c.korral_nodes()["sn-0"].get("foreignAllocations"), 60,
                   "the three nodes open in Korral, the other scheduler's pod on sn-0", c.logs)
        self.creator = _Creator(c, self.NS, self.TOTAL)
        self.creator.__enter__()

    def _ours(self, c: ShimCluster) -> list[dict]:
        return [p for p in c.kube.pods(self.NS) if _name(p) != "other"]

    def in_the_middle(self, c: ShimCluster) -> bool:
        return self.creator is not None and self.creator.created >= self.TOTAL // 4 and \
            any(p["status"].get("phase") == "Succeeded" for p in self._ours(c))

    def done(self, c: ShimCluster) -> bool:
        pods = self._ours(c)
        return len(pods) == self.TOTAL and all(p["status"].get("phase") == "Succeeded" for p in pods)

    def problems(self, c: ShimCluster, disturbed: bool) -> list[str]:
        return list(self.creator.errors) if self.creator else []

    def stop(self) -> None:
        if self.creator is not None:
            self.creator.__exit__(None, None, None)


TASK_GROUPS = "yunikorn.apache.org/task-groups"
TASK_GROUP_NAME = "yunikorn.apache.org/task-group-name"
PLACEHOLDER = "internal.yunikorn.apache.org/placeholder"


class Gang(Scenario):
    """A gang of three (minMember 3, each placeholder 1 cpu, each member 900m) on one node of 3
    cpu, a third taken by another scheduler's pod: the shim makes three placeholders, two are
    placed and the third waits for room. That is the middle; after the kill a second node comes
    (``resume``), the third placeholder is placed and the members take the placeholders' places.
    Done: every member bound and every placeholder gone (the gang complete and cleaned up), with
    at most one set of placeholders ever bound."""

    name = "gang"
    NS = "gang"
    MEMBERS = {f"train-{i}" for i in range(3)}

    def start(self, c: ShimCluster) -> None:
        kube = c.kube
        kube.create("/api/v1/nodes", node("gn-0", "3", "6Gi"))
        kube.create("/api/v1/namespaces", namespace(self.NS))
        kube.create(f"/api/v1/namespaces/{self.NS}/pods",
                    pod("other", self.NS, "1", "128Mi", scheduler="default-scheduler", node_name="gn-0"))
        wait_until(lambda: (c.korral_nodes().get("gn-0") or {}).get("schedulable")
                   and c.korral_nodes()["gn-0"].get("foreignAllocations"), 60,
                   "gn-0 open in Korral with the other scheduler's pod", c.logs)
        groups = [{"name": "workers", "minMember": 3, "minResource": {"cpu": "1", "memory": "128Mi"}}]
        annotations = {TASK_GROUPS: json.dumps(groups), TASK_GROUP_NAME: "workers",
                       "yunikorn.apache.org/schedulingPolicyParameters": "placeholderTimeoutInSeconds=600"}
        for name in sorted(self.MEMBERS):
            kube.create(f"/api/v1/namespaces/{self.NS}/pods",
                        pod(name, self.NS, "900m", "128Mi", labels={"applicationId": "train", "queue": "root.gang"},
                            annotations=annotations))

    def _placeholders(self, c: ShimCluster) -> list[dict]:
        return [p for p in c.kube.pods(self.NS) if (p["metadata"].get("annotations") or {}).get(PLACEHOLDER)]

    def in_the_middle(self, c: ShimCluster) -> bool:
        """Three placeholders made, two of them bound: the gang waits for room."""
        phs = self._placeholders(c)
        return len(phs) == 3 and sum(1 for p in phs if p["spec"].get("nodeName")) == 2

    def resume(self, c: ShimCluster) -> None:
        c.kube.create("/api/v1/nodes", node("gn-1", "3", "6Gi"))

    def done(self, c: ShimCluster) -> bool:
        pods = _pods(c, self.NS)
        return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in self.MEMBERS) \
            and not self._placeholders(c)

    def problems(self, c: ShimCluster, disturbed: bool) -> list[str]:
        bound = sorted(k for k, n in c.bind_requests().items() if k.startswith(f"{self.NS}/tg-") and n["bound"])
        return [f"{len(bound)} placeholders bound, more than one set of 3: {bound}"] if len(bound) > 3 else []


SCENARIOS: dict[str, type[Scenario]] = {"preemption": Preemption, "preemption-victims": PreemptionVictims,
                                         "stream": Stream, "gang": Gang}


def common_problems(c: ShimCluster) -> list[str]:
    """What must hold after every scenario, disturbed or not (asked once it is done)."""
    out = [f"{pod} bound {n['bound']} times in {n['requests']} pods/binding requests"
           for pod, n in c.bind_requests().items() if n["requests"] != 1 or n["bound"] != 1]
    out += placement_problems(c.kube, terminating=False)
    return out
