"""The real ``kubectl`` against ``korral k8s-fake`` run as a process (HTTPS with its self-signed
certificate and a bearer token, as the kubeconfig it writes says): get/list in every output,
watch, apply (create, then update), describe pod and node, cordon/uncordon, delete."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from common.netutil import free_ports
from tests.conftest import korral_env, stop_process, wait_until

pytestmark = [pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed for the certificate")]

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  schedulerName: yunikorn
  containers:
  - name: c
    image: nginx:1.25
    resources: {requests: {cpu: 100m, memory: 64Mi}}
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("k8s-fake")
    kubeconfig = tmp / "kubeconfig"
    [port] = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "common.cli", "k8s-fake", "--address", f"127.0.0.1:{port}",
                             "--nodes", "2", "--kubeconfig-out", str(kubeconfig), "--state-dir", str(tmp)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=korral_env(),
                            stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: kubeconfig.exists() or proc.poll() is not None, 30, "korral k8s-fake to write its kubeconfig")
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"
        yield kubeconfig
    finally:
        stop_process(proc)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 30) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.mark.timeout(90)
def test_kubectl_gets_nodes_from_the_fake_kubelet_ready_and_untainted(fake):
    wait_until(lambda: "NotReady" not in kubectl(fake, "get", "nodes"), 20, "the fake nodes to be Ready")
    wide = kubectl(fake, "get", "nodes", "-o", "wide")
    assert wide.split("\n")[0].split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert "INTERNAL-IP" in wide and "fake-node-0" in wide and "fake-node-1" in wide
    nodes = json.loads(kubectl(fake, "get", "nodes", "-o", "json"))["items"]
    assert all(not n["spec"].get("taints") for n in nodes)  # the not-ready taint went once Ready
    assert "kind: Node" in kubectl(fake, "get", "node", "fake-node-0", "-o", "yaml")


@pytest.mark.timeout(90)
def test_kubectl_apply_creates_then_updates_and_describe_shows_the_pod(fake):
    assert "pod/web created" in kubectl(fake, "apply", "-f", "-", stdin=POD)
    assert "pod/web configured" in kubectl(fake, "apply", "-f", "-", stdin=POD.replace("app: web", "app: web2"))
    pod = json.loads(kubectl(fake, "get", "pod", "web", "-o", "json"))
    assert pod["metadata"]["labels"] == {"app": "web2"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in pod["metadata"]["annotations"]
    described = kubectl(fake, "describe", "pod", "web")
    assert "Status:" in described and "Pending" in described and "QoS Class:" in described
    assert "web" in kubectl(fake, "get", "pods", "-o", "wide")
    kubectl(fake, "delete", "pod", "web")  # unbound: gone at once
    assert "web" not in kubectl(fake, "get", "pods")


@pytest.mark.timeout(90)
def test_kubectl_watch_sees_a_bound_pod_run_and_complete(fake):
    seen: list[str] = []
    kubectl(fake, "create", "-f", "-", stdin=POD.replace("name: web", "name: anchor"))  # -w prints once it lists one
    watch = subprocess.Popen(["kubectl", "--kubeconfig", str(fake), "get", "pods", "-w", "--request-timeout=60s"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader = threading.Thread(target=lambda: seen.extend(iter(watch.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("anchor" in line for line in seen), 20, "kubectl get -w to list the pods",
                   context=lambda: "".join(seen))
        kubectl(fake, "create", "-f", "-", stdin="""
apiVersion: v1
kind: Pod
metadata: {name: job-1, annotations: {korral.io/fake-run-seconds: "0.5"}}
spec:
  restartPolicy: Never
  nodeName: fake-node-1
  containers: [{name: c, image: busybox}]
""")
        wait_until(lambda: any("job-1" in line and "Completed" in line for line in seen), 20,
                   "the watch to show job-1 Completed", context=lambda: "".join(seen))
        assert any("job-1" in line and "Running" in line for line in seen), "".join(seen)
    finally:
        stop_process(watch)
        reader.join(timeout=5)
    described = kubectl(fake, "describe", "node", "fake-node-1")
    assert "Kubelet Version:" in described and "v1.24.0-fake" in described
    kubectl(fake, "delete", "pod", "job-1", "anchor")


@pytest.mark.timeout(90)
def test_kubectl_cordon_and_uncordon(fake):
    kubectl(fake, "cordon", "fake-node-0")
    assert "SchedulingDisabled" in kubectl(fake, "get", "node", "fake-node-0")
    assert json.loads(kubectl(fake, "get", "node", "fake-node-0", "-o", "json"))["spec"]["unschedulable"] is True
    kubectl(fake, "uncordon", "fake-node-0")
    assert "unschedulable" not in json.loads(kubectl(fake, "get", "node", "fake-node-0", "-o", "json"))["spec"]
