"""``make demo-k8s``: Korral scheduling a (fake) Kubernetes cluster through the shim, end to end.

It starts a Korral stack (``korral up``), the fake API server with its fake kubelet
(``korral k8s-fake``) and the shim (``korral k8s-shim``), each a process of its own on free
loopback ports; creates a small heterogeneous cluster (labels, a tainted GPU node) and
YuniKorn-labelled workloads as their controllers would create them (Deployment, Job and
DaemonSet pods with owner references, node selectors, tolerations, affinity, host ports), plus
a pod of another scheduler, a namespace with a quota and a pod that fits nowhere; then prints
where each pod was bound and why anything waits, and stops everything it started.

``--pools`` (``make demo-k8s-pools``) shows partitions per node pool instead: two labelled pools
of fake nodes (``k8s-fake --node-pools``), each a partition with its own worker
(``k8s-shim --partition-label``), pods of both pools (by namespace and by pod annotation), and a
node and a pod naming a partition the configuration lacks.

The builders (``Kube``, ``node``, ``pod``, ``controller_pods``, ``WORKLOAD``) are shared with the
shim's end-to-end tests.
"""

from __future__ import annotations

import base64
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

__all__ = ["Kube", "node", "pod", "create_owner", "controller_pods", "namespace", "configmap", "NODES", "workload",
           "WORKLOAD_NAMESPACES", "main", "QUEUES"]

FAKE_KUBELET = "korral.io/fake-kubelet"
RUN_SECONDS = "korral.io/fake-run-seconds"

QUEUES = """partitions:
  - name: default
    placementrules:
      - name: provided
        create: true
      - name: tag
        value: namespace
        create: true
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: batch
            resources:
              max: {vcore: 8000, memory: 16Gi}
"""


class Kube:
    """A small synchronous JSON client of the API server (for the demo and the tests)."""

    def __init__(self, url: str, token: str = "", ca_data: bytes | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cadata=ca_data.decode()) if ca_data else None

    @classmethod
    def from_kubeconfig(cls, path: Path) -> "Kube":
        """The server, token and CA of a kubeconfig's current context (as ``korral k8s-fake`` writes it)."""
        doc = yaml.safe_load(path.read_text())
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == doc["current-context"])
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next((u["user"] for u in doc.get("users") or [] if u["name"] == ctx.get("user")), {}) or {}
        ca = cluster.get("certificate-authority-data")
        return cls(cluster["server"], user.get("token", ""), base64.b64decode(ca) if ca else None)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:500].decode(errors='replace')}") from None
        return json.loads(raw) if raw else None

    def create(self, path: str, obj: dict) -> dict:
        return self.request("POST", path, obj)

    def get(self, path: str) -> dict:
        return self.request("GET", path)

    def items(self, path: str) -> list[dict]:
        return self.get(path).get("items") or []

    def pods(self, namespace: str = "") -> list[dict]:
        return self.items(f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods")

    def events(self, namespace: str = "") -> list[dict]:
        return self.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events" if namespace
                          else "/apis/events.k8s.io/v1/events")


def node(name: str, cpu: str, memory: str, labels: dict | None = None, taints: list | None = None) -> dict:
    """A Node as a kubelet registers it; the fake kubelet serves it (marks it Ready, runs its pods)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {FAKE_KUBELET: "true"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}},
            "spec": spec, "status": {"capacity": capacity, "allocatable": dict(capacity)}}


def pod(name: str, namespace: str, cpu: str, memory: str, *, labels: dict | None = None,
        annotations: dict | None = None, scheduler: str = "yunikorn", owner: dict | None = None,
        node_name: str = "", run_seconds: float | None = None, host_port: int = 0, **spec: Any) -> dict:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9",
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    if host_port:
        container["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    ann = dict(annotations or {})
    if run_seconds is not None:
        ann[RUN_SECONDS] = str(run_seconds)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": ann}
    if owner:
        meta["ownerReferences"] = [owner]
    body: dict[str, Any] = {"schedulerName": scheduler, "containers": [container], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


_OWNER_API = {"ReplicaSet": ("apps/v1", "replicasets"), "DaemonSet": ("apps/v1", "daemonsets"),
              "Job": ("batch/v1", "jobs")}


def create_owner(kube: Kube, kind: str, name: str, namespace_: str) -> dict:
    """Create the controller object (ReplicaSet, Job, DaemonSet) its pods name as their owner (the
    garbage collector deletes pods whose owner does not exist) and return that owner reference."""
    api_version, plural = _OWNER_API[kind]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace_},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}}
    created = kube.create(f"{prefix}/namespaces/{namespace_}/{plural}", body)
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": created["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def controller_pods(kube: Kube, kind: str, name: str, namespace_: str, count: int, cpu: str, memory: str, *,
                    nodes: list[str] | None = None, **kw: Any) -> list[dict]:
    """The pods a Deployment (through its ReplicaSet), a Job or a DaemonSet would create, after
    creating that controller object: owner references, the controller's labels, and for a
    DaemonSet one pod per node pinned there with a ``metadata.name`` field affinity, tolerating
    every taint, as the DaemonSet controller does."""
    labels = {"app": name, **kw.pop("labels", {})}
    if kind == "Deployment":
        ref, restart = create_owner(kube, "ReplicaSet", f"{name}-7d4b9c", namespace_), "Always"
        names = [f"{name}-7d4b9c-{i:05x}" for i in range(count)]
    elif kind == "Job":
        ref, restart = create_owner(kube, "Job", name, namespace_), "Never"
        labels["job-name"] = name
        names = [f"{name}-{i:05x}" for i in range(count)]
    elif kind == "DaemonSet":
        ref, restart = create_owner(kube, "DaemonSet", name, namespace_), "Always"
        names = [f"{name}-{n}" for n in nodes or []]
    else:
        raise ValueError(f"unknown controller kind {kind}")
    pods = []
    for i, pod_name in enumerate(names):
        extra = dict(kw)
        if kind == "DaemonSet":
            extra["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                        "values": [nodes[i]]}]}]}}}
            extra["tolerations"] = [{"operator": "Exists"}]
        pods.append(pod(pod_name, namespace_, cpu, memory, labels=labels, owner=ref, restartPolicy=restart, **extra))
    return pods


def namespace(name: str, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": annotations or {}}}


def configmap(name: str, namespace_: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace_}, "data": data}


NODES = [
    node("node-a", "4", "8Gi", {"topology.kubernetes.io/zone": "a", "disk": "ssd"}),
    node("node-b", "4", "8Gi", {"topology.kubernetes.io/zone": "b"}),
    node("node-gpu", "8", "16Gi", {"topology.kubernetes.io/zone": "a", "accelerator": "gpu"},
         [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
    node("node-small", "2", "4Gi", {"topology.kubernetes.io/zone": "b"}),
]


WORKLOAD_NAMESPACES = [namespace("shop"), namespace("analytics"), namespace("team", {
    "yunikorn.apache.org/namespace.quota": '{"cpu": "1", "memory": "2Gi"}'})]


def workload(kube: Kube) -> list[dict]:
    """The demo's pods (their namespaces, ``WORKLOAD_NAMESPACES`` and kube-system, must exist;
    their controller objects are created here)."""
    zone_b = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}]}}}
    pods = []
    pods += controller_pods(kube, "Deployment", "web", "shop", 3, "500m", "512Mi", nodeSelector={"disk": "ssd"},
                            labels={"applicationId": "shop-web"})
    pods += controller_pods(kube, "Deployment", "api", "shop", 3, "250m", "256Mi", host_port=8080,
                            labels={"applicationId": "shop-api"})
    pods += controller_pods(kube, "Job", "etl", "analytics", 4, "500m", "1Gi", affinity=zone_b, run_seconds=3,
                            labels={"yunikorn.apache.org/app-id": "etl-1", "yunikorn.apache.org/queue": "root.batch"})
    pods += controller_pods(kube, "DaemonSet", "agent", "kube-system", len(NODES), "100m", "64Mi",
                            nodes=[n["metadata"]["name"] for n in NODES])
    pods.append(pod("trainer", "analytics", "4", "8Gi", labels={"applicationId": "training"},
                    nodeSelector={"accelerator": "gpu"},
                    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]))
    pods += [pod(f"notebook-{i}", "team", "400m", "512Mi", labels={"applicationId": f"notebook-{i}"}) for i in range(3)]
    pods.append(pod("too-big", "analytics", "64", "1Gi", labels={"applicationId": "too-big"}))
    pods.append(pod("coredns", "kube-system", "500m", "256Mi", scheduler="default-scheduler", node_name="node-small",
                    owner=create_owner(kube, "ReplicaSet", "coredns-5d78c", "kube-system")))
    return pods


POOL_LABEL = "korral.io/pool"
POOL_ANNOTATION = "yunikorn.apache.org/partition"
POOLS_QUEUES = "partitions:\n" + "".join(
    f"  - name: {p}\n    placementrules:\n      - name: tag\n        value: namespace\n        create: true\n"
    "    queues:\n      - name: root\n        submitacl: '*'\n" for p in ("blue", "green"))


def pools_workload(kube: Kube) -> list[dict]:
    """The ``--pools`` demo's pods: five per pool by their namespace's annotation, one by its own,
    one naming a partition the configuration lacks."""
    pods = [pod(f"{p}-{i}", f"{p}-team", "1", "1Gi", labels={"applicationId": f"{p}-app"})
            for i in range(5) for p in ("blue", "green")]
    pods.append(pod("green-by-annotation", "blue-team", "500m", "256Mi", labels={"applicationId": "green-own"},
                    annotations={POOL_ANNOTATION: "green"}))
    pods.append(pod("lost", "blue-team", "100m", "64Mi", labels={"applicationId": "lost"},
                    annotations={POOL_ANNOTATION: "purple"}))
    return pods


@dataclass(frozen=True)
class Scenario:
    workers: int
    queues: str
    fake_args: tuple[str, ...]
    nodes: list[dict]
    namespaces: list[dict]
    workload: Callable[[Kube], list[dict]]
    shim_args: tuple[str, ...] = ()


MIXED = Scenario(1, QUEUES, (), NODES, WORKLOAD_NAMESPACES, workload)
POOLS = Scenario(3, POOLS_QUEUES, ("--node-pools", "blue=2,green=2", "--node-pool-label", POOL_LABEL,
                                   "--node-cpu", "4", "--node-memory", "8Gi"),
                 [node("purple-node-0", "4", "8Gi", {POOL_LABEL: "purple"})],
                 [namespace(f"{p}-team", {POOL_ANNOTATION: p}) for p in ("blue", "green")], pools_workload,
                 ("--partition-label", POOL_LABEL))


# ---------------------------------------------------------------------- the demo run
def _free_ports(n: int) -> list[int]:
    from common.netutil import free_ports

    return free_ports(n)


def _korral(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "common.cli", *args], text=True, capture_output=True, **kw)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, RuntimeError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"demo-k8s: {what} did not happen within {timeout:.0f}s")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _report(kube: Kube) -> None:
    pods = kube.pods()
    print(f"\n{'POD':<34} {'SCHEDULER':<18} {'NODE':<13} PHASE / WHY IT WAITS")
    for p in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        meta, spec, status = p["metadata"], p["spec"], p.get("status") or {}
        why = status.get("phase", "")
        cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if not spec.get("nodeName") and cond is not None and cond.get("status") == "False":
            why = f"{cond.get('reason')}: {cond.get('message')}"
        print(f"{meta['namespace'] + '/' + meta['name']:<34} {spec.get('schedulerName', ''):<18} "
              f"{spec.get('nodeName') or '-':<13} {why}")
    waiting = [e for e in kube.events() if e.get("reason") in ("FailedScheduling", "PodUnschedulable")]
    if waiting:
        print("\nwhy pods wait (events):")
        for e in waiting[-10:]:
            print(f"  {e['regarding']['namespace']}/{e['regarding']['name']}: {e['reason']}: {e.get('note', '')}")


def main(argv: list[str] | None = None) -> int:
    scenario = POOLS if "--pools" in (sys.argv[1:] if argv is None else argv) else MIXED
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what was started, as on Ctrl-C
    workdir = Path(tempfile.mkdtemp(prefix="korral-demo-k8s-"))
    si_port, rest_port, api_port = _free_ports(3)
    state = workdir / "state"
    fake = shim = None
    up = _korral("up", "--detach", "--state-dir", str(state), "--si-address", f"127.0.0.1:{si_port}",
                 "--rest-address", f"127.0.0.1:{rest_port}", "--workers", str(scenario.workers),
                 "--timeout", "60")
    if up.returncode != 0:
        print(up.stdout, up.stderr, file=sys.stderr)
        return 1
    print(f"Korral stack up (state {state}); REST http://127.0.0.1:{rest_port}")
    try:
        kubeconfig = workdir / "kubeconfig"
        fake = subprocess.Popen([sys.executable, "-m", "common.cli", "k8s-fake", "--address", f"127.0.0.1:{api_port}",
                                 "--kubeconfig-out", str(kubeconfig), "--nodes", "0", "--state-dir", str(workdir),
                                 *scenario.fake_args],
                                stdout=open(workdir / "fake.log", "w"), stderr=subprocess.STDOUT)
        _wait(lambda: kubeconfig.exists(), 30, "the fake API server's kubeconfig")
        kube = Kube.from_kubeconfig(kubeconfig)
        _wait(lambda: kube.get("/version"), 30, "the fake API server")
        print(f"fake API server at {kube.url} (kubeconfig {kubeconfig}: kubectl --kubeconfig {kubeconfig} get pods -A)")
        kube.create("/api/v1/namespaces", namespace("yunikorn"))
        kube.create("/api/v1/namespaces/yunikorn/configmaps", configmap("yunikorn-configs", "yunikorn",
                                                                       {"queues.yaml": scenario.queues}))
        for n in scenario.nodes:
            kube.create("/api/v1/nodes", n)
        shim = subprocess.Popen([sys.executable, "-m", "common.cli", "k8s-shim", "--kubeconfig", str(kubeconfig),
                                 "--namespace", "yunikorn", "--si-address", f"127.0.0.1:{si_port}",
                                 "--rest-address", f"127.0.0.1:{rest_port}", *scenario.shim_args],
                                stdout=open(workdir / "shim.log", "w"), stderr=subprocess.STDOUT)
        print(f"shim started (log {workdir / 'shim.log'})")
        for ns in scenario.namespaces:
            kube.create("/api/v1/namespaces", ns)
        pods = scenario.workload(kube)
        for p in pods:
            kube.create(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p)
        print(f"created {len(pods)} pods; waiting for them to settle")

        def settled():
            items = [p for p in kube.pods() if p["spec"].get("schedulerName") == "yunikorn"]
            waiting = [p for p in items if not p["spec"].get("nodeName")]
            failed = {e["regarding"].get("name") for e in kube.events() if e.get("reason") == "FailedScheduling"}
            explained = all(p["metadata"]["name"] in failed or any(
                c.get("type") == "PodScheduled" for c in (p.get("status") or {}).get("conditions") or [])
                for p in waiting)
            return len(items) == sum(1 for p in pods if p["spec"]["schedulerName"] == "yunikorn") and explained

        try:
            _wait(settled, 60, "the pods to be bound or explained")
        except SystemExit as exc:
            print(exc)
            _report(kube)
            return 1
        time.sleep(1)
        _report(kube)
        return 0
    finally:
        _stop(shim)
        _stop(fake)
        down = _korral("down", "--state-dir", str(state))
        print(f"\n{down.stdout.strip().splitlines()[-1] if down.stdout.strip() else 'korral down done'}; "
              f"logs in {workdir}")


if __name__ == "__main__":
    sys.exit(main())
