"""Helpers of the Kubernetes deployment tests: render deploy/kubernetes, read pods, containers, env.

``production_tree(dest)`` copies deploy/kubernetes and creates the production overlay's secret
files the way docs/kubernetes.md says (``korral keys`` for CURVE, openssl for the TLS
certificates), so the overlay renders exactly as it would for an operator.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.deploy.compose import REPO, parse_korral
from tests.deploy.kustomize import build, obj_id

__all__ = ["KUBE", "OVERLAYS", "WORKLOADS", "make_pki", "production_tree", "render_all", "by_id", "find",
           "pod_template", "workloads", "containers", "is_korral", "secret_data", "env_values", "expand",
           "var_refs", "mount_for", "volume_files", "labels_match", "load_example", "korral_argv",
           "overlay_params", "korral_containers", "container_env", "parsed", "korral_container",
           "service_target", "mounted_file"]

KUBE = REPO / "deploy" / "kubernetes"
OVERLAYS = ("dev", "production")
WORKLOADS = ("Deployment", "StatefulSet", "Job")
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr}"


def make_pki(d: Path, server_names: list[str]) -> None:
    """ca.crt/key (server CA), server.crt/key (SANs server_names), rm-ca.crt/key, rm.crt/key (client)."""
    d.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "rm-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=korral test {ca}",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d)
    for name, ca, ext in (("server", "ca", "subjectAltName=" + ",".join(f"DNS:{n}" for n in server_names)),
                          ("rm", "rm-ca", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
                 "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=d)


def production_tree(dest: Path) -> Path:
    """A copy of deploy/kubernetes with the production overlay's secrets made as documented; returns it.
    The PKI (CA, server and RM client certificates) is left in dest/pki."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command line is needed to make the production overlay's certificates")
    tree = dest / "kubernetes"
    shutil.copytree(KUBE, tree)
    secrets = tree / "overlays" / "production" / "secrets"
    (secrets / "redis.env").write_text("password=0123456789abcdef0123456789abcdef0123456789abcdef\n")
    made = subprocess.run([sys.executable, "-m", "common.cli", "keys", "--out", str(secrets / "curve"),
                           "--name", "broker", "--name", "rmproxy", "--name", "worker"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    pki = dest / "pki"
    make_pki(pki, ["korral-grpc", "korral-grpc.korral.svc", "korral-grpc.korral.svc.cluster.local"])
    (secrets / "tls").mkdir()
    shutil.copy(pki / "server.crt", secrets / "tls" / "tls.crt")
    shutil.copy(pki / "server.key", secrets / "tls" / "tls.key")
    (secrets / "client-ca").mkdir()
    shutil.copy(pki / "rm-ca.crt", secrets / "client-ca" / "ca.crt")
    return tree


def render_all(tree: Path) -> dict[str, list[dict]]:
    """Overlay name -> rendered objects, for both overlays and the monitoring kustomization."""
    out = {name: build(tree / "overlays" / name) for name in OVERLAYS}
    out["monitoring"] = build(tree / "monitoring")
    return out


def by_id(objs: list[dict]) -> dict[tuple[str, str, str, str], dict]:
    return {obj_id(o): o for o in objs}


def find(objs: list[dict], kind: str, name: str) -> dict:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"].get("name") == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} objects"
    return hits[0]


def pod_template(obj: dict) -> dict:
    return obj["spec"]["template"]


def workloads(objs: list[dict]) -> Iterator[dict]:
    return (o for o in objs if o["kind"] in WORKLOADS)


def containers(obj: dict) -> list[dict]:
    spec = pod_template(obj)["spec"]
    return list(spec.get("initContainers") or []) + list(spec["containers"])


def is_korral(container: dict) -> bool:
    """A container of the Korral image (entrypoint `korral`), whatever the registry."""
    name = container["image"].split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return name == "korral"


def secret_data(secret: dict) -> dict[str, bytes]:
    """A Secret's data decoded (kustomize may wrap long base64 lines)."""
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def env_values(container: dict, pod: dict, objs: list[dict]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: values in order, secretKeyRef and
    fieldRef (metadata.name) resolved, ``$(VAR)`` expanded from variables defined before."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            value = _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), str(item["value"]))
        else:
            ref = item["valueFrom"]
            if "secretKeyRef" in ref:
                secret = find(objs, "Secret", ref["secretKeyRef"]["name"])
                value = secret_data(secret)[ref["secretKeyRef"]["key"]].decode()
            elif "fieldRef" in ref:
                assert ref["fieldRef"]["fieldPath"] == "metadata.name", ref
                value = pod["metadata"].get("name", "pod-0")
            else:
                raise AssertionError(f"unhandled valueFrom {ref}")
        env[item["name"]] = value
    return env


def expand(text: str, env: dict[str, str]) -> str:
    return _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def var_refs(text: str) -> list[str]:
    return _VAR_REF.findall(text)


def mount_for(container: dict, pod_spec: dict, path: str) -> tuple[dict, dict] | None:
    """(volumeMount, volume) whose mountPath contains path, the deepest one."""
    best = None
    for mount in container.get("volumeMounts") or []:
        root = mount["mountPath"].rstrip("/")
        if path == root or path.startswith(root + "/"):
            if best is None or len(root) > len(best["mountPath"].rstrip("/")):
                best = mount
    if best is None:
        return None
    volume = next(v for v in pod_spec.get("volumes") or [] if v["name"] == best["name"])
    return best, volume


def volume_files(volume: dict, objs: list[dict]) -> dict[str, bytes] | None:
    """File name -> content of a Secret or ConfigMap volume; None for other volume types."""
    if "secret" in volume:
        data = secret_data(find(objs, "Secret", volume["secret"]["secretName"]))
    elif "configMap" in volume:
        data = {k: v.encode() for k, v in find(objs, "ConfigMap", volume["configMap"]["name"])["data"].items()}
    else:
        return None
    items = (volume.get("secret") or volume.get("configMap") or {}).get("items")
    if items:
        return {i["path"]: data[i["key"]] for i in items}
    return data


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def load_example(name: str) -> dict:
    import yaml

    return yaml.safe_load((KUBE / "examples" / name).read_text())


def korral_argv(container: dict) -> list[str]:
    """The argv after the image's `korral` entrypoint."""
    assert "command" not in container, "Korral containers keep the image's entrypoint (`korral`)"
    return [str(a) for a in container["args"]]


# --- for the tests of the rendered manifests -----------------------------------------------------

def overlay_params():
    return pytest.mark.parametrize("overlay", OVERLAYS)


def korral_containers(objs):
    """(workload, pod spec, container, subcommand) of every Korral process container."""
    for obj in workloads(objs):
        spec = pod_template(obj)["spec"]
        for c in containers(obj):
            if is_korral(c):
                yield obj, spec, c, korral_argv(c)[0]


def container_env(objs, obj, c) -> dict[str, str]:
    return env_values(c, {"metadata": {"name": f"{obj['metadata']['name']}-0"}}, objs)


def parsed(objs, obj, c):
    return parse_korral(korral_argv(c), container_env(objs, obj, c))


def korral_container(objs, subcommand: str):
    """The container running ``korral SUBCOMMAND``: (workload, pod spec, container, its environment,
    its parsed command line)."""
    obj, spec, c, _ = next(x for x in korral_containers(objs) if x[3] == subcommand)
    return obj, spec, c, container_env(objs, obj, c), parsed(objs, obj, c)


def service_target(objs, host: str, port: int) -> tuple[dict, dict]:
    """(workload, container port entry) that a connection to Service host:port reaches."""
    svc = find(objs, "Service", host)
    sport = next(p for p in svc["spec"]["ports"] if p["port"] == port)
    hits = []
    for obj in workloads(objs):
        if labels_match(svc["spec"]["selector"], pod_template(obj)["metadata"]["labels"]):
            for c in containers(obj):
                for p in c.get("ports") or []:
                    if sport["targetPort"] in (p.get("name"), p["containerPort"]):
                        hits.append((obj, p))
    assert len(hits) == 1, f"Service {host}:{port} reaches {len(hits)} container ports"
    return hits[0]


def mounted_file(objs, spec, c, path: str) -> bytes:
    """The bytes of the Secret file a container sees at ``path`` (fails when it is not a mounted Secret)."""
    hit = mount_for(c, spec, path)
    assert hit is not None, f"{c['name']}: {path} is not under any volume mount"
    mount, volume = hit
    files = volume_files(volume, objs)
    assert files is not None, f"{path}: mounted from a {sorted(volume)} volume, not a Secret"
    rel = path[len(mount["mountPath"].rstrip("/")) + 1:]
    assert rel in files, f"{path}: the volume {volume['name']} has {sorted(files)}"
    return files[rel]
