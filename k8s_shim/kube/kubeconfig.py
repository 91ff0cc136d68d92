"""Where the API server is and how to authenticate: a kubeconfig file or the pod's service account.

``load(kubeconfig=None, context=None)`` follows client-go's order: an explicit file (flag), then
the in-cluster service account when the process runs in a pod (``KUBERNETES_SERVICE_HOST`` and the
token file exist), then ``$KUBECONFIG`` (several files separated by ``:``; the first definition
of a name wins), then ``~/.kube/config``. Supported in a kubeconfig: ``server`` (https or http),
``certificate-authority(-data)``, ``insecure-skip-tls-verify``, ``tls-server-name``, ``token``,
``tokenFile``, ``client-certificate(-data)`` / ``client-key(-data)``, ``username``/``password``,
and ``exec`` credential plugins (the token of their ``ExecCredential``). ``auth-provider``
plugins (removed from kubectl) are not. A problem raises ``KubeConfigError`` naming the file and
the entry.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KubeConfig", "KubeConfigError", "load", "SERVICE_ACCOUNT_DIR"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0  # projected service-account tokens rotate (about hourly): re-read the file


class KubeConfigError(Exception):
    """The kubeconfig or the service account cannot be used (the message says which entry)."""


@dataclass
class KubeConfig:
    """A resolved connection: base URL, TLS context (None for http), how to authenticate, and the
    namespace the process runs in (the context's, the service account's, or ``default``)."""

    server: str
    ssl: ssl.SSLContext | None = None
    namespace: str = "default"
    token: str = ""
    token_file: str = ""
    basic_auth: tuple[str, str] | None = None
    exec_spec: dict | None = None
    source: str = ""  # where it came from, for the log
    _token_read_at: float = field(default=0.0, repr=False)
    _exec_expiry: float = field(default=0.0, repr=False)

    def auth_header(self) -> str | None:
        """The ``Authorization`` header value now (re-reading a token file, re-running an exec
        plugin when its token expired)."""
        if self.token_file and time.monotonic() - self._token_read_at > TOKEN_REREAD_SECONDS:
            try:
                self.token = Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise KubeConfigError(f"cannot read the token file {self.token_file}: {exc.strerror}") from None
            self._token_read_at = time.monotonic()
        if self.exec_spec is not None and (not self.token or time.time() >= self._exec_expiry):
            self.token, self._exec_expiry = _run_exec(self.exec_spec, self.source)
        if self.token:
            return f"Bearer {self.token}"
        if self.basic_auth:
            user, password = self.basic_auth
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return None


def load(kubeconfig: str | None = None, context: str | None = None) -> KubeConfig:
    """The connection to use (see module doc)."""
    if kubeconfig:
        return _from_files([Path(kubeconfig)], context)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        return in_cluster()
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return _from_files([Path(p) for p in env.split(os.pathsep) if p], context)
    default = Path.home() / ".kube" / "config"
    if default.exists():
        return _from_files([default], context)
    raise KubeConfigError("no Kubernetes connection: not running in a pod (no service account), "
                          "no --kubeconfig, no $KUBECONFIG and no ~/.kube/config")


def in_cluster(sa_dir: Path = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise KubeConfigError("in-cluster config: KUBERNETES_SERVICE_HOST is not set")
    ctx = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
    namespace = "default"
    try:
        namespace = (sa_dir / "namespace").read_text().strip() or "default"
    except OSError:
        pass
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    config = KubeConfig(server=f"https://{host}:{port}", ssl=ctx, namespace=namespace,
                        token_file=str(sa_dir / "token"), source="in-cluster service account")
    config.auth_header()  # read the token now: a missing file is a start-up error
    return config


def _merged(paths: list[Path]) -> tuple[dict, dict[str, Path]]:
    """The merged kubeconfig (first definition of a name wins) and each entry's file."""
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    origin: dict[str, Path] = {}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise KubeConfigError(f"kubeconfig {path} is not YAML: {exc}") from None
        if not isinstance(doc, dict):
            raise KubeConfigError(f"kubeconfig {path} is not a mapping")
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for kind, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(kind) or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if name and name not in merged[kind]:
                    merged[kind][name] = entry.get(inner) or {}
                    origin[f"{kind}/{name}"] = path
    return merged, origin


def _from_files(paths: list[Path], context: str | None) -> KubeConfig:
    merged, origin = _merged(paths)
    where = ", ".join(str(p) for p in paths)
    name = context or merged["current-context"]
    if not name:
        raise KubeConfigError(f"kubeconfig {where}: no current-context and no --kube-context")
    ctx = merged["contexts"].get(name)
    if ctx is None:
        raise KubeConfigError(f"kubeconfig {where}: context {name!r} not found")
    cluster = merged["clusters"].get(ctx.get("cluster", ""))
    if cluster is None:
        raise KubeConfigError(f"kubeconfig {where}: context {name!r} names cluster {ctx.get('cluster')!r}, "
                              "which is not defined")
    user = merged["users"].get(ctx.get("user", ""), {}) if ctx.get("user") else {}
    base = origin.get(f"clusters/{ctx['cluster']}", paths[0]).parent
    user_base = origin.get(f"users/{ctx.get('user')}", paths[0]).parent
    server = cluster.get("server", "")
    if not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"kubeconfig {where}: cluster {ctx['cluster']!r} has no http(s) server ({server!r})")
    tls = None
    if server.startswith("https://"):
        tls = _tls_context(cluster, user, base, user_base, f"kubeconfig {where}, context {name!r}")
    config = KubeConfig(server=server.rstrip("/"), ssl=tls, namespace=ctx.get("namespace") or "default",
                        source=f"kubeconfig {where}, context {name!r}")
    if user.get("token"):
        config.token = user["token"]
    elif user.get("tokenFile"):
        config.token_file = str(_resolve(user["tokenFile"], user_base))
    elif user.get("exec"):
        config.exec_spec = dict(user["exec"], _base=str(user_base))
    elif user.get("username"):
        config.basic_auth = (user["username"], user.get("password", ""))
    elif user.get("auth-provider"):
        raise KubeConfigError(f"{config.source}: auth-provider plugins are not supported (use an exec plugin "
                              "or a token)")
    config.auth_header()
    return config


def _resolve(path: str, base: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else base / p


def _tls_context(cluster: dict, user: dict, base: Path, user_base: Path, where: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        ctx.load_verify_locations(cadata=_b64(cluster["certificate-authority-data"], where).decode())
    elif cluster.get("certificate-authority"):
        ctx.load_verify_locations(cafile=str(_resolve(cluster["certificate-authority"], base)))
    cert = _pem(user, "client-certificate", user_base, where)
    key = _pem(user, "client-key", user_base, where)
    if bool(cert) != bool(key):
        raise KubeConfigError(f"{where}: a client certificate needs both client-certificate and client-key")
    if cert and key:
        # ssl loads a chain from files only: write them to private temporary files, read, remove
        with tempfile.TemporaryDirectory() as tmp:
            cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            for path, data in ((cert_path, cert), (key_path, key)):
                path.touch(mode=0o600)
                path.write_bytes(data)
            ctx.load_cert_chain(str(cert_path), str(key_path))
    return ctx


def _pem(user: dict, name: str, base: Path, where: str) -> bytes | None:
    if user.get(f"{name}-data"):
        return _b64(user[f"{name}-data"], where)
    if user.get(name):
        try:
            return _resolve(user[name], base).read_bytes()
        except OSError as exc:
            raise KubeConfigError(f"{where}: cannot read {name} {user[name]}: {exc.strerror}") from None
    return None


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise KubeConfigError(f"{where}: a *-data entry is not base64") from None


def _run_exec(spec: dict, where: str) -> tuple[str, float]:
    """Run an exec credential plugin; its token and when it expires (wall clock)."""
    command = spec.get("command")
    if not command:
        raise KubeConfigError(f"{where}: exec plugin without a command")
    env = dict(os.environ)
    for item in spec.get("env") or []:
        env[item["name"]] = item["value"]
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": spec.get("apiVersion", "client.authentication.k8s.io/v1"),
                                              "kind": "ExecCredential", "spec": {"interactive": False}})
    try:
        out = subprocess.run([command, *(spec.get("args") or [])], capture_output=True, text=True, timeout=60,
                             env=env, cwd=spec.get("_base"), stdin=subprocess.DEVNULL, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise KubeConfigError(f"{where}: exec plugin {command} failed: {exc}") from None
    try:
        status = json.loads(out)["status"]
        token = status["token"]
    except (ValueError, KeyError, TypeError):
        raise KubeConfigError(f"{where}: exec plugin {command} printed no ExecCredential with status.token") from None
    expiry = time.time() + 300.0
    stamp = status.get("expirationTimestamp")
    if stamp:
        from datetime import datetime

        try:
            expiry = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - 30
        except ValueError:
            pass
    return token, expiry
