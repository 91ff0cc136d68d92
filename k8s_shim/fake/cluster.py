"""A whole fake cluster in one event loop: the API server, the objects a fresh server creates for
itself, nodes with a fake kubelet, the garbage collector, and the persistent-volume binder with an
external provisioner (``fake.volumes``). Tests start one in-process;
``korral k8s-fake`` runs one as a process."""

from __future__ import annotations

import base64
import ipaddress
import os
import socket
import ssl
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import yaml

from k8s_shim.fake.api import Api
from k8s_shim.fake.claims import ResourceClaimController
from k8s_shim.fake.gc import GarbageCollector
from k8s_shim.fake.kubelet import FAKE_KUBELET, FakeKubelet
from k8s_shim.fake.volumes import VolumeController
from k8s_shim.fake.kinds import PriorityClasses
from k8s_shim.fake.server import FakeApiServer, ServerOptions
from k8s_shim.fake.store import Store
from k8s_shim.fake.podgroup_protection import PodGroupProtection
from k8s_shim.fake.workloads import RUNTIME_CONFIG

__all__ = ["FAKE_KUBELET", "ClusterOptions", "FakeCluster", "NodeTemplate", "write_kubeconfig"]


@dataclass(slots=True)
class NodeTemplate:
    """The nodes ``--nodes N`` creates: names from ``name_pattern`` (``{i}`` is 0..N-1)."""

    count: int = 0
    name_pattern: str = "fake-node-{i}"
    cpu: str = "32"
    memory: str = "128Gi"
    pods: str = "110"
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    extra_resources: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterOptions:
    token: str | None = None
    history: int = 10_000  # watch/list history kept per resource (older versions answer 410)
    bookmark_interval: float = 60.0
    idle_timeout: float = 90.0  # kube-apiserver's: a kept-alive connection without a request is closed
    nodes: NodeTemplate = field(default_factory=NodeTemplate)
    pools: list[NodeTemplate] = field(default_factory=list)  # more nodes, one template per node pool
    kubelet: bool = True
    garbage_collector: bool = True
    resourceclaim_controller: bool = True  # claims from templates, reservations of deleted pods (DRA)
    pod_start_seconds: float = 0.0  # bound pod -> Running
    volume_binder: bool = True  # the persistent-volume binder and an external provisioner (fake.volumes)
    provisioners: frozenset[str] | None = None  # the CSI drivers the provisioner serves (None: all; empty: none)
    tls: tuple[str, str] | None = None  # (certificate, key) files: serve HTTPS
    throttle_qps: float = 0.0  # >0: requests beyond this rate answered 429 as APF does (ServerOptions)
    # kube-apiserver's --runtime-config entries for groups off by default (fake.workloads.RUNTIME_CONFIG)
    runtime_config: frozenset[str] = frozenset()


class FakeCluster:
    def __init__(self, options: ClusterOptions | None = None):
        self.options = options or ClusterOptions()
        self.store = Store(history=self.options.history)
        self.api = Api(self.store, runtime_config=self.options.runtime_config)
        self.server = FakeApiServer(self.api, ServerOptions(token=self.options.token,
                                                            bookmark_interval=self.options.bookmark_interval,
                                                            idle_timeout=self.options.idle_timeout,
                                                            throttle_qps=self.options.throttle_qps))
        self.host = "127.0.0.1"
        self.port = 0
        self._bootstrap()
        self.controllers: list[Any] = []
        if self.options.garbage_collector:
            self.controllers.append(GarbageCollector(self.api))
        if self.options.resourceclaim_controller:
            self.controllers.append(ResourceClaimController(self.api))
        if RUNTIME_CONFIG in self.options.runtime_config:  # its protection controller runs with it
            self.controllers.append(PodGroupProtection(self.api))
        if self.options.kubelet:
            self.controllers.append(FakeKubelet(self.api, self.options.pod_start_seconds))
        if self.options.volume_binder:
            self.controllers.append(VolumeController(self.api, self.options.provisioners))

    @property
    def url(self) -> str:
        scheme = "https" if self.options.tls else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    def _bootstrap(self) -> None:
        """What a new kube-apiserver creates for itself (files 08, 42)."""
        api = self.api
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            api.create(api.kind("v1", "namespaces"), "", {"metadata": {"name": ns}}, "kube-apiserver")
        pcs = api.kind("scheduling.k8s.io/v1", "priorityclasses")
        for name, (value, description) in PriorityClasses.SYSTEM.items():
            api.create(pcs, "", {"metadata": {"name": name}, "value": value, "description": description},
                       "kube-apiserver")
        api.create(api.kind("v1", "services"), "default", {
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": 6443}],
                     "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "type": "ClusterIP",
                     "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                     "internalTrafficPolicy": "Cluster"},
            "status": {"loadBalancer": {}}}, "kube-apiserver")
        for nodes in (self.options.nodes, *self.options.pools):
            for i in range(nodes.count):
                self.api.create(self.api.kind("v1", "nodes"), "", node_object(nodes, i), "korral-fake-kubelet")


    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0: a free port); returns the URL."""
        self.host = host
        if port == 0:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.port = port
        self.server.options.address = f"{host}:{port}"
        context = None
        if self.options.tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.options.tls)
        await self.server.http.start(host, port, context)
        for controller in self.controllers:
            controller.start()
        return self.url

    async def stop(self) -> None:
        for controller in self.controllers:
            await controller.stop()
        await self.server.http.stop(grace=2.0)

    def kubeconfig(self, user: str = "korral") -> dict[str, Any]:
        user_entry: dict[str, Any] = {"token": self.options.token} if self.options.token else {}
        cluster: dict[str, Any] = {"server": self.url}
        if self.options.tls:
            cluster["certificate-authority-data"] = base64.b64encode(Path(self.options.tls[0]).read_bytes()).decode()
        return {"apiVersion": "v1", "kind": "Config", "current-context": "korral-fake",
                "clusters": [{"name": "korral-fake", "cluster": cluster}],
                "users": [{"name": user, "user": user_entry}],
                "contexts": [{"name": "korral-fake", "context": {"cluster": "korral-fake", "user": user,
                                                                  "namespace": "default"}}],
                "preferences": {}}


def node_object(template: NodeTemplate, i: int) -> dict[str, Any]:
    """The Node a kubelet registers for fake node ``i`` (its status is posted with it)."""
    name = template.name_pattern.format(i=i)
    capacity = {"cpu": template.cpu, "memory": template.memory, "pods": template.pods,
                "ephemeral-storage": "100Gi", **template.extra_resources}
    labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", **template.labels}
    spec: dict[str, Any] = {"podCIDR": f"10.{64 + i // 256 % 64}.{i % 256}.0/24",
                            "podCIDRs": [f"10.{64 + i // 256 % 64}.{i % 256}.0/24"]}
    if template.taints:
        spec["taints"] = [dict(t) for t in template.taints]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {FAKE_KUBELET: "true"}},
            "spec": spec,
            "status": {"capacity": capacity, "allocatable": dict(capacity),
                       "addresses": [{"type": "InternalIP",
                                      "address": str(ipaddress.ip_address("172.16.0.1") + i % (1 << 20))},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": {"machineID": f"fake-{i}", "systemUUID": f"fake-{i}", "bootID": f"fake-{i}",
                                    "kernelVersion": "5.15.0-fake", "osImage": "Korral fake node",
                                    "containerRuntimeVersion": "fake://1.0", "kubeletVersion": "v1.24.0-fake",
                                    "kubeProxyVersion": "v1.24.0-fake", "operatingSystem": "linux",
                                    "architecture": "amd64"}}}


def write_kubeconfig(path: str, config: dict[str, Any]) -> None:
    """Write a kubeconfig readable only by its owner (it may hold the token)."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(config, out, sort_keys=False)
    os.replace(tmp, path)
