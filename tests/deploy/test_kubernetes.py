"""deploy/kubernetes, checked offline: rendered, schema-validated, and wired to what the processes read.

Every overlay (dev, production with its secrets made as docs/kubernetes.md says) and the
monitoring kustomization are rendered with tests/deploy/kustomize.py (and compared with
``kubectl kustomize`` where kubectl is installed). Then:

- every object validates against the Kubernetes JSON schemas bundled with kubernetes-validate,
  strictly (unknown fields are errors), for 1.30 (the oldest supported) and the newest bundled;
- every KORRAL_* variable is one the container's process reads (the real ``korral`` parsers),
  every address variable is from common/addresses.py's table, bound ports are the container
  ports, and what a process connects to is a Service that leads to the process that binds it;
- the security variables (common/security.py's flags) point into mounted Secrets holding the
  right files, and the CURVE keys of the peers match the broker's;
- every Secret, ConfigMap and ServiceAccount referenced is in the render.

Probes, workload shapes, images and pod security are in test_kubernetes_workloads.py; the
renders are the package's fixtures (tests/deploy/conftest.py), the helpers in tests/deploy/kube.py.
"""

from __future__ import annotations

import copy
import shutil
import subprocess

import pytest
import yaml

from common import addresses
from tests.deploy.compose import env_var_is_read, host_port, load_compose, parse_korral
from tests.deploy.kube import (KUBE, OVERLAYS, container_env, containers, env_values, expand, find, korral_container,
                               korral_containers, load_example, mount_for, mounted_file, overlay_params, parsed,
                               pod_template, secret_data, service_target, var_refs, volume_files, workloads)
from tests.deploy.kustomize import Unsupported, build, obj_id, strategic_merge

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is a test dependency (pip install -e '.[test]')")

SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
CRD_KINDS = {"ServiceMonitor"}  # no schema bundled: checked field by field below
ADDRESS_VARS = {env: name for name, (env, _default) in addresses.DEFAULTS.items()}
DEFAULT_PORTS = {name: host_port(default)[1] for name, (_env, default) in addresses.DEFAULTS.items()}


# --- rendering ------------------------------------------------------------------------------------

def test_overlays_render_the_expected_objects(renders):
    core = {("Namespace", "korral"), ("ServiceAccount", "korral"), ("ConfigMap", "korral-queues"),
            ("Secret", "korral-redis"), ("Service", "korral-redis"), ("Service", "korral-redis-headless"),
            ("StatefulSet", "korral-redis"), ("Service", "korral-broker"), ("Deployment", "korral-broker"),
            ("Service", "korral-grpc"), ("Service", "korral-rest"), ("Deployment", "korral-rmproxy"),
            ("PodDisruptionBudget", "korral-rmproxy"), ("Deployment", "korral-worker"),
            ("PodDisruptionBudget", "korral-worker"), ("NetworkPolicy", "korral-redis"),
            ("NetworkPolicy", "korral-broker"), ("NetworkPolicy", "korral-worker")}
    secured = {("Secret", f"korral-{n}") for n in ("curve-broker", "curve-allowed", "curve-rmproxy", "curve-worker",
                                                     "grpc-tls", "grpc-client-ca")}
    kinds = {name: {(o["kind"], o["metadata"]["name"]) for o in objs} for name, objs in renders.items()}
    assert kinds["dev"] == core
    assert kinds["production"] == core | secured
    assert kinds["monitoring"] == {("ServiceMonitor", "korral")}
    for name, objs in renders.items():
        for o in objs:
            if o["kind"] != "Namespace":
                assert o["metadata"].get("namespace") == "korral", f"{name}: {o['kind']}/{o['metadata']['name']}"


def test_replicas_and_zones(renders):
    dev, prod = renders["dev"], renders["production"]
    assert find(dev, "Deployment", "korral-worker")["spec"]["replicas"] == 2
    assert find(dev, "Deployment", "korral-rmproxy")["spec"]["replicas"] == 1
    assert find(prod, "Deployment", "korral-worker")["spec"]["replicas"] == 6
    assert find(prod, "Deployment", "korral-rmproxy")["spec"]["replicas"] == 2
    # "at least one zone's worth of spares" (3 zones): 6 workers serve 6 - 6 // 3 = 4 partitions
    assert "serves up to 4 partitions" in (KUBE / "overlays/production/kustomization.yaml").read_text()


def _normalized(objs: list[dict]) -> dict:
    out = {}
    for o in objs:
        o = copy.deepcopy(o)
        if o["kind"] == "Secret":
            o["data"] = {k: v.decode() for k, v in secret_data(o).items()}  # kustomize wraps base64 lines
        out[obj_id(o)] = o
    return out


@pytest.mark.parametrize("name", [*OVERLAYS, "monitoring"])
def test_renderer_agrees_with_kubectl_kustomize(tree, renders, name):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed here; tests/deploy/kustomize.py alone renders the overlays")
    path = tree / ("monitoring" if name == "monitoring" else f"overlays/{name}")
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    if result.returncode != 0 and "unknown command" in result.stderr:
        pytest.skip(f"this kubectl has no kustomize: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    theirs = _normalized([o for o in yaml.safe_load_all(result.stdout) if o])
    ours = _normalized(renders[name])
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        assert ours[key] == theirs[key], f"{key} differs from kubectl kustomize"


def test_renderer_refuses_what_it_does_not_implement(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(Unsupported, match="commonLabels"):
        build(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("configMapGenerator:\n  - name: x\n    literals: [a=b]\n")
    with pytest.raises(Unsupported, match="disableNameSuffixHash"):
        build(tmp_path)


def test_strategic_merge_prepends_new_items_and_merges_by_key():
    base = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "args": ["x"],
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    patch = {"env": [{"name": "C", "value": "3"}, {"name": "B", "value": "20"}], "args": ["y"],
             "volumeMounts": [{"name": "keys", "mountPath": "/keys"}]}
    merged = strategic_merge(base, patch)
    assert [(e["name"], e["value"]) for e in merged["env"]] == [("C", "3"), ("A", "1"), ("B", "20")]
    assert merged["args"] == ["y"]
    assert [m["mountPath"] for m in merged["volumeMounts"]] == ["/keys", "/tmp"]
    assert "x" not in strategic_merge({"x": 1, "y": 2}, {"x": None})


# --- schemas -------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("name", [*OVERLAYS, "monitoring", "examples"])
def test_objects_validate_against_the_kubernetes_schemas(renders, name, version):
    objs = [load_example("sim-job.yaml")] if name == "examples" else renders[name]
    checked = 0
    for o in objs:
        if o["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{o['kind']}/{o['metadata'].get('name')} against {version}: "
                        f"{'.'.join(map(str, exc.path))}: {exc.message}")
        checked += 1
    assert checked == len([o for o in objs if o["kind"] not in CRD_KINDS])


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(readinesProbe={}), "readinesProbe"),
    (lambda d: d["spec"].update(replicas="two"), "'two' is not of type 'integer'"),
    (lambda d: d["spec"]["template"]["spec"]["securityContext"].update(runAsNonRoot="yes"),
     "'yes' is not of type 'boolean'"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].append({"value": "x"}), "'name' is a required"),
])
def test_schema_validation_catches_mistakes(renders, mutate, expected):
    worker = copy.deepcopy(find(renders["dev"], "Deployment", "korral-worker"))
    mutate(worker)
    with pytest.raises(kubernetes_validate.ValidationError) as info:
        kubernetes_validate.validate(worker, SCHEMA_VERSIONS[0], strict=True)
    assert expected in info.value.message


# --- environment, addresses, ports ----------------------------------------------------------------

@overlay_params()
def test_each_korral_container_runs_its_process(renders, overlay):
    found = {}
    for obj, _spec, c, sub in korral_containers(renders[overlay]):
        ns = parsed(renders[overlay], obj, c)
        assert ns._name == sub
        found[obj["metadata"]["name"]] = sub
    assert found == {"korral-broker": "broker", "korral-rmproxy": "rmproxy", "korral-worker": "worker"}


@overlay_params()
def test_every_variable_is_read_by_its_process(renders, overlay):
    """Every KORRAL_* variable set changes what the process parses; other variables exist only
    to be expanded into a later one (the Redis password into the URL)."""
    objs = renders[overlay]
    for obj, _spec, c, sub in korral_containers(objs):
        names = [e["name"] for e in c.get("env") or []]
        referenced = {ref for e in c.get("env") or [] if "value" in e for ref in var_refs(str(e["value"]))}
        for var in names:
            if var.startswith("KORRAL_"):
                assert env_var_is_read([sub], var), f"{obj['metadata']['name']}: {var} is read by no flag of `korral {sub}`"
            else:
                assert var in referenced, f"{obj['metadata']['name']}: {var} is neither KORRAL_* nor used by another variable"


def test_the_variable_check_catches_a_renamed_variable():
    assert not env_var_is_read(["broker"], "KORRAL_BROKER_FRONTED")
    assert not env_var_is_read(["worker"], "KORRAL_CURVE_ALLOWED")  # the broker's, not a worker's
    assert env_var_is_read(["worker"], "KORRAL_WORKER_HEALTH_FILE")


@overlay_params()
def test_variables_are_defined_before_they_are_expanded(renders, overlay):
    """The kubelet expands $(VAR) only from variables listed earlier in the same container."""
    for obj in workloads(renders[overlay]):
        for c in containers(obj):
            seen: set[str] = set()
            for e in c.get("env") or []:
                for ref in var_refs(str(e.get("value", ""))):
                    assert ref in seen, f"{obj['metadata']['name']}/{c['name']}: {e['name']} uses $({ref}) before it"
                seen.add(e["name"])
            for arg in c.get("args") or []:
                for ref in var_refs(str(arg)):
                    assert ref in seen, f"{obj['metadata']['name']}/{c['name']}: args use undefined $({ref})"


@overlay_params()
def test_addresses_come_from_the_table_and_bind_the_container_ports(renders, overlay):
    objs = renders[overlay]
    for obj, _spec, c, sub in korral_containers(objs):
        env = container_env(objs, obj, c)
        ns = parsed(objs, obj, c)
        ports = {p["containerPort"] for p in c.get("ports") or []}
        listened = set()
        for var in env:
            if var in ADDRESS_VARS:
                name = ADDRESS_VARS[var]
                assert getattr(ns, name) == env[var], f"{var} does not reach --{name}"
                host, port = host_port(env[var])
                assert port == DEFAULT_PORTS[name], f"{var}={env[var]}: not the table's port {DEFAULT_PORTS[name]}"
                if host in ("0.0.0.0", "*"):
                    listened.add(port)
            elif var.endswith(("_ADDRESS", "_FRONTEND", "_BACKEND", "_URL")):
                pytest.fail(f"{var} looks like an address but is not in common/addresses.py")
        assert listened == ports, f"{obj['metadata']['name']} binds {listened}, declares ports {ports}"
        if sub == "worker":
            assert ports == set(), "workers open no port"


@overlay_params()
def test_connections_reach_the_process_that_binds(renders, overlay):
    objs = renders[overlay]
    procs = {obj["metadata"]["name"]: (obj, c) for obj, _s, c, _sub in korral_containers(objs)}
    broker = parsed(objs, *procs["korral-broker"])
    rmproxy = parsed(objs, *procs["korral-rmproxy"])
    worker = parsed(objs, *procs["korral-worker"])
    for connect, bound in ((rmproxy.broker_frontend, broker.broker_frontend),
                           (worker.broker_backend, broker.broker_backend)):
        host, port = host_port(connect)
        obj, cport = service_target(objs, host, port)
        assert obj["metadata"]["name"] == "korral-broker" and cport["containerPort"] == host_port(bound)[1]
    for ns in (broker, rmproxy, worker):
        host, port = host_port(ns.redis_url)
        obj, cport = service_target(objs, host, port)
        assert obj["metadata"]["name"] == "korral-redis" and cport["containerPort"] == 6379


@overlay_params()
def test_redis_password_reaches_redis_and_every_url(renders, overlay):
    from redis.connection import parse_url

    objs = renders[overlay]
    password = secret_data(find(objs, "Secret", "korral-redis"))["password"].decode()
    assert password and password.strip() == password, "the password must not carry whitespace (newline)"
    assert all(ch.isalnum() or ch in "-._~" for ch in password), "use a URL-safe password"
    redis = find(objs, "StatefulSet", "korral-redis")
    c = containers(redis)[0]
    env = env_values(c, {"metadata": {"name": "korral-redis-0"}}, objs)
    args = [expand(str(a), env) for a in c["args"]]
    assert args[args.index("--requirepass") + 1] == password
    assert env["REDISCLI_AUTH"] == password
    assert args[args.index("--appendonly") + 1] == "yes"
    data = next(m for m in c["volumeMounts"] if m["name"] == "data")
    assert args[args.index("--dir") + 1] == data["mountPath"]
    assert [t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]] == ["data"]
    for obj, _spec, cc, _sub in korral_containers(objs):
        assert parse_url(parsed(objs, obj, cc).redis_url)["password"] == password, obj["metadata"]["name"]
    for cc in (cc for _o, _s, cc, _sub in korral_containers(objs)):
        url = next(e for e in cc["env"] if e["name"] == "KORRAL_REDIS_URL")
        assert "$(REDIS_PASSWORD)" in url["value"], "the password comes from the Secret, not the manifest"


def test_redis_image_is_the_compose_one(renders):
    compose_image = load_compose()["services"]["redis"]["image"]
    for overlay in OVERLAYS:
        redis = find(renders[overlay], "StatefulSet", "korral-redis")
        assert containers(redis)[0]["image"] == compose_image


# --- security: Secrets, CURVE, TLS ------------------------------------------------------------------

SECURITY_VARS = {"KORRAL_CURVE_SECRET": "curve_secret", "KORRAL_CURVE_SERVER": "curve_server",
                 "KORRAL_CURVE_ALLOWED": "curve_allowed", "KORRAL_TLS_CERT": "tls_cert", "KORRAL_TLS_KEY": "tls_key",
                 "KORRAL_TLS_CLIENT_CA": "tls_client_ca"}


def test_security_variables_are_the_flags_of_common_security():
    """The names above are what common/security.py's flags read (a rename there fails here)."""
    for var, dest in SECURITY_VARS.items():
        sub = "broker" if var == "KORRAL_CURVE_ALLOWED" else "rmproxy"
        assert getattr(parse_korral([sub], {var: "/x"}), dest) == "/x", var


def test_dev_is_plaintext_production_is_secured(renders):
    for obj, _spec, c, _sub in korral_containers(renders["dev"]):
        assert not SECURITY_VARS.keys() & {e["name"] for e in c["env"]}, obj["metadata"]["name"]
    want = {"korral-broker": {"KORRAL_CURVE_SECRET", "KORRAL_CURVE_ALLOWED"},
            "korral-rmproxy": {"KORRAL_CURVE_SECRET", "KORRAL_CURVE_SERVER", "KORRAL_TLS_CERT", "KORRAL_TLS_KEY",
                               "KORRAL_TLS_CLIENT_CA"},
            "korral-worker": {"KORRAL_CURVE_SECRET", "KORRAL_CURVE_SERVER"}}
    for obj, _spec, c, _sub in korral_containers(renders["production"]):
        assert SECURITY_VARS.keys() & {e["name"] for e in c["env"]} == want[obj["metadata"]["name"]]


def test_production_curve_keys_fit_together(renders, tmp_path):
    """Each peer's secret file is a key pair, its server file is the broker's public key, and the
    broker's allowed directory holds exactly the peers' public keys and its own (for its probe)."""
    import zmq.auth

    objs = renders["production"]
    publics = {}
    for obj, spec, c, sub in korral_containers(objs):
        ns = parsed(objs, obj, c)
        secret_file = tmp_path / f"{sub}.key_secret"
        secret_file.write_bytes(mounted_file(objs, spec, c, ns.curve_secret))
        public, secret = zmq.auth.load_certificate(str(secret_file))
        assert secret, f"{sub}: {ns.curve_secret} holds no secret key"
        publics[sub] = public
        if sub != "broker":
            server_file = tmp_path / f"{sub}-server.key"
            server_file.write_bytes(mounted_file(objs, spec, c, ns.curve_server))
            servers = publics.setdefault("server", set())
            servers.add(zmq.auth.load_certificate(str(server_file))[0])
    assert publics.pop("server") == {publics["broker"]}
    _broker, spec, c, _env, args = korral_container(objs, "broker")
    allowed_dir = args.curve_allowed
    mount, volume = mount_for(c, spec, allowed_dir)
    assert mount["mountPath"].rstrip("/") == allowed_dir.rstrip("/"), "the allowed directory is a whole volume"
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    for name, content in volume_files(volume, objs).items():
        (allowed / name).write_bytes(content)
    assert set(zmq.auth.load_certificates(str(allowed))) == set(publics.values())


def test_production_tls_files_are_mounted_and_pair_up(renders, tree):
    objs = renders["production"]
    _obj, spec, c, _env, ns = korral_container(objs, "rmproxy")
    cert = mounted_file(objs, spec, c, ns.tls_cert)
    key = mounted_file(objs, spec, c, ns.tls_key)
    ca = mounted_file(objs, spec, c, ns.tls_client_ca)
    assert b"BEGIN CERTIFICATE" in cert and b"PRIVATE KEY" in key and b"BEGIN CERTIFICATE" in ca
    assert find(objs, "Secret", "korral-grpc-tls")["type"] == "kubernetes.io/tls"
    assert ca == (tree.parent / "pki" / "rm-ca.crt").read_bytes()
    from common.security import grpc_server_credentials

    files = {}
    for name, content in (("cert", cert), ("key", key), ("ca", ca)):
        files[name] = tree.parent / f"mounted-{name}.pem"
        files[name].write_bytes(content)
    assert grpc_server_credentials(str(files["cert"]), str(files["key"]), str(files["ca"])) is not None


@overlay_params()
def test_every_referenced_secret_configmap_and_account_exists(renders, overlay):
    objs = renders[overlay]
    for obj in workloads(objs):
        spec = pod_template(obj)["spec"]
        where = obj["metadata"]["name"]
        if "serviceAccountName" in spec:
            find(objs, "ServiceAccount", spec["serviceAccountName"])
        for v in spec.get("volumes") or []:
            if "secret" in v:
                find(objs, "Secret", v["secret"]["secretName"])
            if "configMap" in v:
                find(objs, "ConfigMap", v["configMap"]["name"])
        for c in containers(obj):
            mounted = {m["name"] for m in c.get("volumeMounts") or []}
            assert mounted <= {v["name"] for v in spec.get("volumes") or []} | \
                {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates") or []}, where
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {})
                if "secretKeyRef" in ref:
                    data = secret_data(find(objs, "Secret", ref["secretKeyRef"]["name"]))
                    assert ref["secretKeyRef"]["key"] in data, f"{where}: {e['name']}"
                if "configMapKeyRef" in ref:
                    cm = find(objs, "ConfigMap", ref["configMapKeyRef"]["name"])
                    assert ref["configMapKeyRef"]["key"] in cm["data"], f"{where}: {e['name']}"
            for e in c.get("envFrom") or []:
                if "secretRef" in e:
                    find(objs, "Secret", e["secretRef"]["name"])
                if "configMapRef" in e:
                    find(objs, "ConfigMap", e["configMapRef"]["name"])


def test_queues_configmap_is_a_valid_config(renders):
    from common.config import load_config

    for overlay in OVERLAYS:
        cm = find(renders[overlay], "ConfigMap", "korral-queues")
        config = load_config(cm["data"]["queues.yaml"])
        assert config.partition("default") is not None and not config.warnings


def test_check_config_cli_accepts_the_configmap(renders, korral, tmp_path):
    path = tmp_path / "queues.yaml"
    path.write_text(find(renders["production"], "ConfigMap", "korral-queues")["data"]["queues.yaml"])
    result = korral("check-config", "--strict", str(path), timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
