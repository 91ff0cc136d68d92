"""How the shim finds the API server (``k8s_shim.kube.kubeconfig``): kubeconfig contexts, tokens,
client certificates, exec plugins, the in-cluster service account, and the errors that name the
entry at fault."""

from __future__ import annotations

import base64
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from k8s_shim.kube import kubeconfig
from k8s_shim.kube.kubeconfig import KubeConfigError
from tests.e2e.conftest import make_ca, make_cert


def write(path: Path, clusters: list, users: list, contexts: list, current: str = "") -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": current,
                                    "clusters": clusters, "users": users, "contexts": contexts}))
    return path


def test_the_current_context_gives_server_token_and_namespace(tmp_path):
    cfg = write(tmp_path / "config", [{"name": "fake", "cluster": {"server": "http://127.0.0.1:6443/"}}],
                [{"name": "me", "user": {"token": "secret"}}],
                [{"name": "dev", "context": {"cluster": "fake", "user": "me", "namespace": "yunikorn"}}], "dev")
    conf = kubeconfig.load(str(cfg))
    assert conf.server == "http://127.0.0.1:6443" and conf.ssl is None
    assert conf.namespace == "yunikorn" and conf.auth_header() == "Bearer secret"


def test_kubeconfig_files_merge_with_the_first_definition_winning(tmp_path, monkeypatch):
    a = write(tmp_path / "a", [{"name": "c", "cluster": {"server": "http://first:1"}}], [], [], "")
    b = write(tmp_path / "b", [{"name": "c", "cluster": {"server": "http://second:2"}}], [],
              [{"name": "x", "context": {"cluster": "c"}}], "x")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{b}")
    conf = kubeconfig.load()
    assert conf.server == "http://first:1" and conf.namespace == "default" and conf.auth_header() is None


@pytest.mark.parametrize("case, clusters, contexts, current, words", [
    ("no current context", [], [], "", "no current-context"),
    ("unknown context", [], [], "nope", "context 'nope' not found"),
    ("undefined cluster", [], [{"name": "x", "context": {"cluster": "gone"}}], "x", "names cluster 'gone'"),
    ("no server", [{"name": "c", "cluster": {}}], [{"name": "x", "context": {"cluster": "c"}}], "x",
     r"has no http\(s\) server"),
], ids=lambda v: v if isinstance(v, str) and " " in v else None)
def test_a_broken_kubeconfig_names_what_is_wrong(tmp_path, case, clusters, contexts, current, words):
    cfg = write(tmp_path / "config", clusters, [], contexts, current)
    with pytest.raises(KubeConfigError, match=words):
        kubeconfig.load(str(cfg))


def test_certificate_data_and_a_client_certificate_make_a_tls_context(tmp_path):
    make_ca(tmp_path, "ca")
    make_cert(tmp_path, "ca", "client", None)
    b64 = lambda name: base64.b64encode((tmp_path / name).read_bytes()).decode()  # noqa: E731
    cfg = write(tmp_path / "config", [{"name": "c", "cluster": {"server": "https://k8s:6443",
                                                                 "certificate-authority-data": b64("ca.crt")}}],
                [{"name": "u", "user": {"client-certificate": "client.crt", "client-key-data": b64("client.key")}}],
                [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "x")
    conf = kubeconfig.load(str(cfg))
    assert conf.ssl is not None and conf.ssl.verify_mode.name == "CERT_REQUIRED" and conf.auth_header() is None


def test_an_exec_plugin_gives_the_token(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json, os\nprint(json.dumps({'kind': 'ExecCredential', 'status': "
                      "{'token': 'from-exec-' + os.environ['WHO'], 'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n")
    cfg = write(tmp_path / "config", [{"name": "c", "cluster": {"server": "http://k8s:80"}}],
                [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                 "command": sys.executable, "args": [str(plugin)],
                                                 "env": [{"name": "WHO", "value": "me"}]}}}],
                [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "x")
    assert kubeconfig.load(str(cfg)).auth_header() == "Bearer from-exec-me"


def test_in_cluster_reads_the_service_account(tmp_path, monkeypatch):
    make_ca(tmp_path, "ca")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token\n")
    (sa / "namespace").write_text("yunikorn")
    (sa / "ca.crt").write_bytes((tmp_path / "ca.crt").read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conf = kubeconfig.in_cluster(sa)
    assert conf.server == "https://10.0.0.1:443" and conf.namespace == "yunikorn"
    assert conf.auth_header() == "Bearer sa-token"
    (sa / "token").chmod(0)
    if os.geteuid() != 0:  # root reads it anyway
        conf._token_read_at = -1e9
        with pytest.raises(KubeConfigError, match="token file"):
            conf.auth_header()
    (sa / "token").chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_no_connection_at_all_says_what_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match="no Kubernetes connection"):
        kubeconfig.load()


def test_a_malformed_exec_answer_is_an_error(tmp_path):
    cfg = write(tmp_path / "config", [{"name": "c", "cluster": {"server": "http://k8s:80"}}],
                [{"name": "u", "user": {"exec": {"command": sys.executable, "args": ["-c", "print('{}')"]}}}],
                [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "x")
    with pytest.raises(KubeConfigError, match="no ExecCredential"):
        kubeconfig.load(str(cfg))
