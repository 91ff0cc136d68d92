"""A Korral stack, the fake API server and the shim as real processes, for end-to-end tests.

``ShimCluster`` (fixture ``shim_cluster`` in ``conftest.py``) starts ``korral k8s-fake`` (TLS, a
bearer token, no nodes of its own) and, on ``start_shim()``, ``korral k8s-shim`` against a stack
of ``stack_factory``; everything on free loopback ports in temporary directories, stopped by pid
at the end. ``kube`` talks to the API server; ``korral`` reads Korral's REST API. The checks a
test asserts at the end (``placement_problems``) say for each bound pod what Kubernetes would
object to: a node selector, required node affinity, an untolerated taint, a host port used
twice, more requested than allocatable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.netutil import free_ports, http_get_json
from k8s_shim.translate import quantity
from k8s_shim.demo import Kube
from tests.conftest import korral_env, stop_process, wait_until

__all__ = ["ShimCluster", "placement_problems", "requests_of", "pod_events"]


class ShimCluster:
    def __init__(self, stack, workdir: Path) -> None:
        self.stack = stack
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.fake: subprocess.Popen | None = None
        self.shim: subprocess.Popen | None = None
        self.shim_log = workdir / "shim.log"
        self.kube: Kube | None = None

    def _run(self, *args: str, log: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "common.cli", *args], stdout=open(log, "a"),
                                stderr=subprocess.STDOUT, env=korral_env(), stdin=subprocess.DEVNULL)

    def start_fake(self, *extra: str) -> Kube:
        port = free_ports(1)[0]
        self.fake = self._run("k8s-fake", "--address", f"127.0.0.1:{port}", "--kubeconfig-out", str(self.kubeconfig),
                              "--nodes", "0", "--state-dir", str(self.workdir), *extra, log=self.workdir / "fake.log")
        wait_until(lambda: self.kubeconfig.exists(), 30, "the fake API server's kubeconfig", self.logs)
        self.kube = Kube.from_kubeconfig(self.kubeconfig)
        wait_until(lambda: self.kube.get("/version"), 30, "the fake API server", self.logs)
        return self.kube

    def start_fake_with_configs(self, *extra: str, queues: str = "", settings: dict[str, str] | None = None) -> Kube:
        """``start_fake`` with the shim's namespace ``yunikorn`` and its ``yunikorn-configs``: ``queues``
        (the demo's by default) and further ``settings`` of the configmap."""
        from k8s_shim.demo import QUEUES, configmap, namespace
        kube = self.start_fake(*extra)
        kube.create("/api/v1/namespaces", namespace("yunikorn"))
        data = {"queues.yaml": queues or QUEUES, "log.level": "INFO", **(settings or {})}
        kube.create("/api/v1/namespaces/yunikorn/configmaps", configmap("yunikorn-configs", "yunikorn", data))
        return kube

    def start_shim(self, *extra: str) -> None:
        self.shim = self._run("k8s-shim", "--kubeconfig", str(self.kubeconfig), "--namespace", "yunikorn",
                              "--si-address", self.stack.si_address, "--rest-address", self.stack.rest_address,
                              *extra, log=self.shim_log)

    def stop_shim(self, kill: bool = False) -> None:
        if self.shim is not None:
            if kill:
                self.shim.kill()
                self.shim.wait(10)
            else:
                stop_process(self.shim, 10)

    def stop(self) -> None:
        self.stop_shim()
        if self.fake is not None:
            stop_process(self.fake, 10)

    def logs(self) -> str:
        out = []
        for name in ("shim.log", "fake.log"):
            path = self.workdir / name
            if path.exists():
                out.append(f"--- {name} (last 40 lines)\n" + "\n".join(path.read_text().splitlines()[-40:]))
        return "\n".join(out)

    # ------------------------------------------------------------------ Korral's view
    def korral_nodes(self) -> dict[str, dict]:
        body = http_get_json(f"http://{self.stack.rest_address}/ws/v1/partition/%5Bmycluster%5Ddefault/nodes").body
        return {n["nodeID"]: n for n in body} if isinstance(body, list) else {}

    def korral_app(self, app_id: str) -> dict:
        return http_get_json(f"http://{self.stack.rest_address}/ws/v1/partition/%5Bmycluster%5Ddefault/"
                             f"application/{app_id}").body

    def korral_queues(self) -> dict:
        return http_get_json(f"http://{self.stack.rest_address}/ws/v1/partition/%5Bmycluster%5Ddefault/queues").body

    def shim_books(self) -> dict | None:
        """The shim's own books (its state dump, asked for through Korral's full state dump)."""
        body = http_get_json(f"http://{self.stack.rest_address}/debug/fullstatedump", timeout=10).body
        dump = ((body or {}).get("rmDiagnostics") or {}).get("mycluster", {}).get("stateDump")
        return json.loads(dump) if isinstance(dump, str) else dump

    def bind_requests(self) -> dict[str, dict[str, int]]:
        """``namespace/name`` -> pods/binding requests and bindings the API server saw."""
        return self.kube.get("/korral-fake/bindings")

    def disagreements(self) -> list[str]:
        """Where Korral, the shim and the API server differ about what runs where (asked when
        nothing is in flight: no pod being bound or deleted)."""
        out = []
        pods = [p for p in self.kube.pods() if p["spec"].get("nodeName")
                and p["status"].get("phase") not in ("Succeeded", "Failed")]
        ours = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("schedulerName") == "yunikorn"}
        others = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("schedulerName") != "yunikorn"}
        nodes = self.korral_nodes()
        placed = {a["allocationKey"]: nid for nid, n in nodes.items() for a in n.get("allocations") or []}
        foreign = {f["allocationKey"]: nid for nid, n in nodes.items() for f in n.get("foreignAllocations") or []}
        if placed != ours:
            out.append(f"Korral's allocations {sorted(placed.items())} are not the running pods {sorted(ours.items())}")
        if foreign != others:
            out.append(f"Korral's foreign allocations {sorted(foreign.items())} are not the other pods {sorted(others.items())}")
        books = self.shim_books() or {}
        for name, n in nodes.items():
            assumed = ((books.get("nodes") or {}).get(name) or {}).get("assumed")
            used = {k: n["allocated"].get(k, 0) + n["occupied"].get(k, 0) for k in set(n["allocated"]) | set(n["occupied"])}
            if {k: v for k, v in (assumed or {}).items() if v} != {k: v for k, v in used.items() if v}:
                out.append(f"node {name}: the shim assumes {assumed}, Korral counts {used}")
        return out


def requests_of(pod: dict) -> dict[str, int]:
    """What a pod requests as the shim computes it (vcore in milli-cores)."""
    from k8s_shim.translate.pods import pod_size

    return pod_size(pod["spec"], pod.get("status") or {}, [])


def pod_events(kube: Kube) -> dict[str, list[str]]:
    """``namespace/name`` -> the reasons of its events, in order."""
    out: dict[str, list[str]] = {}
    for e in sorted(kube.events(), key=lambda e: e.get("eventTime") or ""):
        ref = e.get("regarding") or {}
        if ref.get("kind") == "Pod":
            out.setdefault(f"{ref.get('namespace')}/{ref.get('name')}", []).append(e["reason"])
    return out


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression(labels: dict, expr: dict) -> bool:
    value, op, values = labels.get(expr["key"]), expr["operator"], expr.get("values") or []
    return {"In": lambda: value in values, "NotIn": lambda: value not in values,
            "Exists": lambda: expr["key"] in labels, "DoesNotExist": lambda: expr["key"] not in labels}[op]()


def _affinity_ok(pod: dict, node: dict) -> bool:
    required = ((((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution")) or {})
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    labels, fields = node["metadata"].get("labels") or {}, {"metadata.name": node["metadata"]["name"]}
    return any(all(_expression(labels, e) for e in t.get("matchExpressions") or [])
               and all(_expression(fields, e) for e in t.get("matchFields") or []) for t in terms)


def placement_problems(kube: Kube, terminating: bool = True) -> list[str]:
    """Everything Kubernetes' filters would object to in the current placement (see module doc).
    ``terminating=False`` leaves out pods being deleted (a preemption victim in its grace period:
    the scheduler counts its room free at once, as YuniKorn does)."""
    nodes = {n["metadata"]["name"]: n for n in kube.items("/api/v1/nodes")}
    problems: list[str] = []
    used: dict[str, dict[str, int]] = {name: {} for name in nodes}
    ports: dict[tuple[str, int, str], str] = {}
    for pod in kube.pods():
        node_name = pod["spec"].get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if not terminating and pod["metadata"].get("deletionTimestamp"):
            continue
        who = f"{pod['metadata']['namespace']}/{pod['metadata']['name']} on {node_name}"
        node = nodes.get(node_name)
        if node is None:
            problems.append(f"{who}: no such node")
            continue
        for k, v in requests_of(pod).items():
            used[node_name][k] = used[node_name].get(k, 0) + v
        if pod["spec"].get("schedulerName") != "yunikorn":
            continue  # another scheduler's choices are not Korral's
        labels = node["metadata"].get("labels") or {}
        for k, v in (pod["spec"].get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                problems.append(f"{who}: nodeSelector {k}={v} does not match")
        if not _affinity_ok(pod, node):
            problems.append(f"{who}: required node affinity does not match")
        for taint in (node["spec"].get("taints") or []):
            if taint["effect"] in ("NoSchedule", "NoExecute") and \
                    not _tolerates(pod["spec"].get("tolerations") or [], taint):
                problems.append(f"{who}: taint {taint['key']}:{taint['effect']} not tolerated")
        for c in pod["spec"].get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    key = (node_name, p["hostPort"], p.get("protocol", "TCP"))
                    if key in ports:
                        problems.append(f"{who}: host port {p['hostPort']} already used by {ports[key]}")
                    ports[key] = who
    for name, node in nodes.items():
        for k, text in (node["status"].get("allocatable") or {}).items():
            si_name, cap = quantity.si_value(k, text)
            if used[name].get(si_name, 0) > cap:
                problems.append(f"node {name}: {si_name} {used[name][si_name]} requested > {cap} allocatable")
    return problems


def condition(pod: dict, kind: str = "PodScheduled") -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)
