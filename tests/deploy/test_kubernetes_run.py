"""The production overlay run for real without a cluster: each pod in its own network namespace.

The rendered objects (tests/deploy/kube.py, secrets made as docs/kubernetes.md says) are run
the way a kubelet would run them, for what this overlay uses: one network namespace per pod
(``tests/e2e/netns.py``), an /etc/hosts giving each Service's name the address of the pod it
selects, each container's args after the image's entrypoint (``korral``, or redis-server with
the official image's ``--protected-mode no``) under its env with Secrets and the pod name
resolved and ``$(VAR)`` expanded. Probes run as written: exec commands in the pod's namespace
with the container's environment (``korral`` on PATH, as in the image), httpGet against the
pod's address and named port. CURVE is on every ZeroMQ link, the gRPC port wants TLS client
certificates, Redis a password. Then an RM (the sim Job's ``korral sim``, with the client
certificate docs/kubernetes.md describes) registers through ``korral-grpc`` and its workload
is scheduled.

Not emulated: volume mounts (paths under a mount are rewritten to a directory holding the
Secret's files or the emptyDir, in env values, args and probe commands), users and read-only
root filesystems, resource limits, Services' virtual IPs (names resolve straight to the one pod
selected), and replica counts (1 rmproxy and 2 workers instead of 2 and 6, for a 2-core machine).
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.deploy.kube import (containers, env_values, find, is_korral, labels_match, load_example, pod_template,
                               production_tree, render_all, volume_files, workloads)
from tests.conftest import wait_until
from tests.e2e.netns import NetLab, tails, unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"needs network namespaces: {REASON}")
BIN = str(Path(sys.executable).parent)  # the virtualenv's bin: `korral` is on PATH, as in the image
REDIS_SERVER = "/usr/bin/redis-server"


class Pod:
    """One pod of a workload: its host namespace, its volumes as directories, its one container."""

    def __init__(self, lab: NetLab, objs: list[dict], workload: dict, index: int, root: Path) -> None:
        self.workload = workload
        self.name = f"{workload['metadata']['name']}-{index}"
        self.labels = pod_template(workload)["metadata"]["labels"]
        spec = pod_template(workload)["spec"]
        [self.container] = containers(workload)
        self.host = lab.add_host(self.name)
        self.dirs: dict[str, Path] = {}  # mountPath -> directory standing in for the volume
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in self.container.get("volumeMounts") or []:
            d = root / self.name / mount["name"]
            d.mkdir(parents=True)
            volume = volumes.get(mount["name"])
            files = volume_files(volume, objs) if volume else None  # None: emptyDir or a claim
            for fname, content in (files or {}).items():
                (d / fname).write_bytes(content)
            self.dirs[mount["mountPath"].rstrip("/")] = d
        env = env_values(self.container, {"metadata": {"name": self.name}}, objs)
        self.env = {k: self.translate(v) for k, v in env.items()}
        self.args = [self.translate(self._expand(str(a))) for a in self.container["args"]]

    def _expand(self, text: str) -> str:
        from tests.deploy.kube import expand

        return expand(text, self.env)

    def translate(self, text: str) -> str:
        """Paths under a volume mount -> the directory standing in for it (one pass: a stand-in
        directory under /tmp is not translated again)."""
        mounts = sorted(self.dirs, key=len, reverse=True)
        pattern = r"(?<![\w/.-])(" + "|".join(re.escape(m) for m in mounts) + r")(?=/|$|[\s'\";>])"
        return re.sub(pattern, lambda m: str(self.dirs[m.group(1)]), text) if mounts else text

    def argv(self) -> list[str]:
        if is_korral(self.container):
            return [sys.executable, "-m", "common.cli", *self.args]
        assert self.args[0] == "redis-server", self.args
        return [REDIS_SERVER, "--protected-mode", "no", *self.args[1:]]

    def probe(self, lab: NetLab, kind: str) -> tuple[bool, str]:
        probe = self.container[kind]
        if "exec" in probe:
            command = [self.translate(c) for c in probe["exec"]["command"]]
            env = {**self.env, "PATH": f"{BIN}:/usr/bin:/bin:/usr/sbin:/sbin"}
            result = lab.run(self.host, command, timeout=probe.get("timeoutSeconds", 1) + 10, env=env)
            return result.returncode == 0, f"{shlex.join(command)} -> {result.returncode} {result.stdout}{result.stderr}"
        get = probe["httpGet"]
        port = next(p["containerPort"] for p in self.container["ports"] if get["port"] in (p["name"], p["containerPort"]))
        status, body = lab.http_get_json(self.host, f"http://{self.host.ip}:{port}{get['path']}")
        return status == 200, f"GET {get['path']} -> {status} {body}"


def wait_probe(lab: NetLab, pod: Pod, kind: str, procs, timeout: float = 40.0) -> None:
    why = "never ran"

    def passes() -> bool:
        nonlocal why
        ok, why = pod.probe(lab, kind)
        return ok

    wait_until(passes, timeout, f"{pod.name}: {kind} passing", lambda: f"{why}\n{tails(procs)}", interval=0.5)


def test_production_overlay_runs_as_rendered(tmp_path):
    tree = production_tree(tmp_path / "tree")
    objs = render_all(tree)["production"]
    pki = tmp_path / "tree" / "pki"
    lab = NetLab(tmp_path / "logs")
    procs = []
    try:
        counts = {"korral-redis": 1, "korral-broker": 1, "korral-rmproxy": 1, "korral-worker": 2}
        pods = {name: [Pod(lab, objs, find(objs, kind, name), i, tmp_path / "pods") for i in range(count)]
                for (kind, name), count in zip([("StatefulSet", "korral-redis"), ("Deployment", "korral-broker"),
                                                ("Deployment", "korral-rmproxy"), ("Deployment", "korral-worker")],
                                               counts.values())}
        assert {w["metadata"]["name"] for w in workloads(objs)} == set(pods)
        rm_host = lab.add_host("rm")
        hosts = {}
        for svc in (o for o in objs if o["kind"] == "Service"):
            [target] = [p for group in pods.values() for p in group[:1]
                        if labels_match(svc["spec"]["selector"], p.labels)]
            hosts[svc["metadata"]["name"]] = target.host.ip
        lab.set_hosts(hosts)

        def start(pod: Pod) -> None:
            procs.append(lab.start(pod.host, pod.name, pod.argv(), env=pod.env))

        start(pods["korral-redis"][0])
        wait_probe(lab, pods["korral-redis"][0], "startupProbe", procs)
        for name in ("korral-broker", "korral-rmproxy", "korral-worker"):
            for pod in pods[name]:
                start(pod)
        every = [p for group in pods.values() for p in group]
        for pod in every:
            for kind in ("startupProbe", "readinessProbe"):
                if kind in pod.container:
                    wait_probe(lab, pod, kind, procs)

        # the RM of the sim Job, with the client certificate of the production overlay's mutual TLS
        job = containers(load_example("sim-job.yaml"))[0]
        rm_env = {e["name"]: e["value"] for e in job["env"]}
        rm_env.update(KORRAL_TLS_CA=str(pki / "ca.crt"), KORRAL_TLS_CLIENT_CERT=str(pki / "rm.crt"),
                      KORRAL_TLS_CLIENT_KEY=str(pki / "rm.key"))
        sim = lab.run(rm_host, [sys.executable, "-m", "common.cli", *job["args"]], timeout=120, env=rm_env)
        assert sim.returncode == 0, f"korral sim: {sim.stdout[-3000:]}\n{sim.stderr[-3000:]}\n{tails(procs)}"

        plaintext = lab.run(rm_host, [sys.executable, "-m", "common.cli", *job["args"], "--duration", "5"],
                            timeout=60, env={k: v for k, v in rm_env.items() if not k.startswith("KORRAL_TLS")})
        assert plaintext.returncode != 0, "an RM without TLS got through the mutual TLS port"
        assert "UNAVAILABLE" in plaintext.stdout + plaintext.stderr, plaintext.stdout + plaintext.stderr

        for pod in every:  # still healthy after the workload, by every probe it has
            for kind in ("readinessProbe", "livenessProbe"):
                ok, why = pod.probe(lab, kind)
                assert ok, f"{pod.name} {kind}: {why}"
        for p in procs:
            assert p.alive(), f"{p.name} died:\n{p.tail()}"
    finally:
        problems = lab.close()
    assert problems == []
