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
- probes use real REST routes and real ``korral`` commands (parsed by the real parsers);
- every Secret, ConfigMap and ServiceAccount referenced is in the render, every selector
  selects the pods it should, the ServiceMonitor scrapes /ws/v1/metrics on the REST port;
- images, uid and ports agree with deploy/Dockerfile and pyproject.toml.
"""

from __future__ import annotations

import copy
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from common import addresses
from tests.deploy.compose import (DOCKERFILE, REPO, dockerfile_instructions, env_var_is_read, host_port,
                                  load_compose, parse_korral)
from tests.deploy.kube import (KUBE, OVERLAYS, containers, env_values, expand, find, is_korral, korral_argv,
                               labels_match, load_example, mount_for, pod_template, production_tree, render_all,
                               secret_data, var_refs, volume_files, workloads)
from tests.deploy.kustomize import Unsupported, build, obj_id, strategic_merge

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is a test dependency (pip install -e '.[test]')")

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
SCHEMA_VERSIONS = ("1.30", kubernetes_validate.latest_version())
CRD_KINDS = {"ServiceMonitor"}  # no schema bundled: checked field by field below
ADDRESS_VARS = {env: name for name, (env, _default) in addresses.DEFAULTS.items()}
DEFAULT_PORTS = {name: host_port(default)[1] for name, (_env, default) in addresses.DEFAULTS.items()}
SUBCOMMAND = {"broker": "broker", "rmproxy": "rmproxy", "worker": "worker"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is needed to make the production overlay's certificates")
    return production_tree(tmp_path_factory.mktemp("kube"))


@pytest.fixture(scope="module")
def renders(tree) -> dict[str, list[dict]]:
    return render_all(tree)


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


def _service_target(objs, host: str, port: int) -> tuple[dict, dict]:
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
        obj, cport = _service_target(objs, host, port)
        assert obj["metadata"]["name"] == "korral-broker" and cport["containerPort"] == host_port(bound)[1]
    for ns in (broker, rmproxy, worker):
        host, port = host_port(ns.redis_url)
        obj, cport = _service_target(objs, host, port)
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


def _mounted_file(objs, spec, c, path: str) -> bytes:
    hit = mount_for(c, spec, path)
    assert hit is not None, f"{c['name']}: {path} is not under any volume mount"
    mount, volume = hit
    files = volume_files(volume, objs)
    assert files is not None, f"{path}: mounted from a {sorted(volume)} volume, not a Secret"
    rel = path[len(mount["mountPath"].rstrip("/")) + 1:]
    assert rel in files, f"{path}: the volume {volume['name']} has {sorted(files)}"
    return files[rel]


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
        secret_file.write_bytes(_mounted_file(objs, spec, c, ns.curve_secret))
        public, secret = zmq.auth.load_certificate(str(secret_file))
        assert secret, f"{sub}: {ns.curve_secret} holds no secret key"
        publics[sub] = public
        if sub != "broker":
            server_file = tmp_path / f"{sub}-server.key"
            server_file.write_bytes(_mounted_file(objs, spec, c, ns.curve_server))
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
    cert = _mounted_file(objs, spec, c, ns.tls_cert)
    key = _mounted_file(objs, spec, c, ns.tls_key)
    ca = _mounted_file(objs, spec, c, ns.tls_client_ca)
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


# --- probes ------------------------------------------------------------------------------------------

def _rest_routes() -> set[str]:
    from unittest import mock

    from rmproxy.server.webapi import build_app

    app = build_app(mock.MagicMock(name="proxy"))  # only registers handlers; none is called
    return {r.resource.canonical for r in app.router.routes() if r.resource is not None}


def _korral_invocations(command: list[str]) -> list[list[str]]:
    """The `korral ...` argvs an exec probe runs: the command itself, or each one in a `sh -c` script."""
    if command[:2] == ["sh", "-c"]:
        out = []
        for part in command[2].split(";"):
            words = shlex.split(part.split(">")[0])
            if words and words[0] == "korral":
                out.append(words[1:])
        return out
    return [command[1:]] if command[0] == "korral" else []


@overlay_params()
def test_rmproxy_probes_use_real_routes_on_the_rest_port(renders, overlay):
    objs = renders[overlay]
    _obj, _spec, c, _env, rmproxy = korral_container(objs, "rmproxy")
    rest_port = host_port(rmproxy.rest_address)[1]
    routes = _rest_routes()
    ready, live = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
    assert ready["path"] == "/ws/v1/korral/ready"
    assert live["path"] != ready["path"], "liveness must not depend on the broker and Redis"
    for probe in (ready, live):
        assert probe["path"] in routes
        port = next(p for p in c["ports"] if probe["port"] in (p["name"], p["containerPort"]))
        assert port["containerPort"] == rest_port


@overlay_params()
def test_broker_probes_ask_the_broker_itself(renders, overlay):
    objs = renders[overlay]
    _obj, spec, c, env, broker = korral_container(objs, "broker")
    for kind in ("readinessProbe", "livenessProbe"):
        command = c[kind]["exec"]["command"]
        assert command[:2] == ["sh", "-c"] and command[2].rstrip().endswith("test $? -ne 1"), command
        [argv] = _korral_invocations(command)
        ns = parse_korral(argv, env)
        assert ns._name == "status" and host_port(ns.broker) == ("127.0.0.1", host_port(broker.broker_frontend)[1])
        assert c[kind]["timeoutSeconds"] > 3, "korral status waits up to 3 s for the broker"
        if broker.curve_secret:
            assert ns.curve_secret == broker.curve_secret, "the probe uses the broker's own key pair"
            _mounted_file(objs, spec, c, ns.curve_server)
        else:
            assert ns.curve_secret is None and ns.curve_server is None


@overlay_params()
def test_worker_probes_check_the_health_file_the_worker_writes(renders, overlay):
    objs = renders[overlay]
    _obj, spec, c, env, worker = korral_container(objs, "worker")
    assert worker.health_file, "the worker must write a health file for its probes"
    _mount, volume = mount_for(c, spec, worker.health_file)
    assert "emptyDir" in volume, "the health file needs a writable volume (the root filesystem is read-only)"
    kinds = {}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        [argv] = _korral_invocations(c[kind]["exec"]["command"])
        ns = parse_korral(argv, env)
        assert ns._name == "worker" and ns.health_file == worker.health_file
        assert ns.stall_seconds == worker.stall_seconds
        kinds[kind] = ns.probe
    assert kinds == {"startupProbe": "live", "readinessProbe": "ready", "livenessProbe": "live"}


def test_redis_probes_authenticate(renders):
    redis = find(renders["production"], "StatefulSet", "korral-redis")
    c = containers(redis)[0]
    assert {e["name"] for e in c["env"]} >= {"REDISCLI_AUTH"}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[kind]["exec"]["command"] == ["sh", "-c", "redis-cli ping | grep -q PONG"]


# --- workload shapes ------------------------------------------------------------------------------------

@overlay_params()
def test_one_broker_replaced_not_rolled(renders, overlay):
    broker = find(renders[overlay], "Deployment", "korral-broker")
    assert broker["spec"]["replicas"] == 1 and broker["spec"]["strategy"] == {"type": "Recreate"}
    assert not [o for o in renders[overlay] if o["kind"] in ("PodDisruptionBudget", "HorizontalPodAutoscaler")
                and labels_match(o["spec"].get("selector", {}).get("matchLabels", {}),
                                 pod_template(broker)["metadata"]["labels"])]
    svc = find(renders[overlay], "Service", "korral-broker")
    assert svc["spec"]["publishNotReadyAddresses"] is True


@overlay_params()
def test_workers_roll_one_at_a_time_and_are_budgeted(renders, overlay):
    objs = renders[overlay]
    worker = find(objs, "Deployment", "korral-worker")
    assert worker["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pdb = find(objs, "PodDisruptionBudget", "korral-worker")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}
    assert labels_match(pdb["spec"]["selector"]["matchLabels"], pod_template(worker)["metadata"]["labels"])
    assert worker["spec"]["replicas"] >= 2, "at least one spare"
    spec = pod_template(worker)["spec"]
    anti = spec["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    [term] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    [spread] = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    for selector in (term["podAffinityTerm"]["labelSelector"]["matchLabels"], spread["labelSelector"]["matchLabels"]):
        assert labels_match(selector, pod_template(worker)["metadata"]["labels"])
        assert not labels_match(selector, pod_template(find(objs, "Deployment", "korral-rmproxy"))["metadata"]["labels"])


@overlay_params()
def test_grpc_service_keeps_an_rm_on_one_rmproxy(renders, overlay):
    objs = renders[overlay]
    grpc = find(objs, "Service", "korral-grpc")
    assert grpc["spec"]["type"] == "ClusterIP" and grpc["spec"].get("clusterIP") != "None"
    assert grpc["spec"]["sessionAffinity"] == "ClientIP"
    [port] = grpc["spec"]["ports"]
    assert not port["name"].startswith(("grpc", "http")), "a mesh would balance it per request"
    assert port.get("appProtocol") == "tcp"
    obj, cport = _service_target(objs, "korral-grpc", port["port"])
    rmproxy = next(x for x in korral_containers(objs) if x[3] == "rmproxy")
    assert obj["metadata"]["name"] == "korral-rmproxy"
    assert cport["containerPort"] == host_port(parsed(objs, rmproxy[0], rmproxy[2]).si_address)[1]
    rest = find(objs, "Service", "korral-rest")
    assert _service_target(objs, "korral-rest", 9080)[1]["containerPort"] == \
        host_port(parsed(objs, rmproxy[0], rmproxy[2]).rest_address)[1]
    assert "sessionAffinity" not in rest["spec"] or rest["spec"]["sessionAffinity"] == "None"


@overlay_params()
def test_selectors_select_their_pods(renders, overlay):
    objs = renders[overlay]
    pods = {o["metadata"]["name"]: pod_template(o)["metadata"]["labels"] for o in workloads(objs)}
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet"):
            assert labels_match(o["spec"]["selector"]["matchLabels"], pods[o["metadata"]["name"]])
            assert "app.kubernetes.io/version" not in o["spec"]["selector"]["matchLabels"], "selectors are immutable"
        selector = None
        if o["kind"] == "Service":
            selector = o["spec"]["selector"]
        elif o["kind"] in ("PodDisruptionBudget",):
            selector = o["spec"]["selector"]["matchLabels"]
        elif o["kind"] == "NetworkPolicy":
            selector = o["spec"]["podSelector"]["matchLabels"]
            for rule in o["spec"].get("ingress") or []:
                for peer in rule.get("from") or []:
                    assert any(labels_match(peer["podSelector"]["matchLabels"], p) for p in pods.values())
        if selector is not None:
            hits = [n for n, labels in pods.items() if labels_match(selector, labels)]
            assert len(hits) == 1, f"{o['kind']}/{o['metadata']['name']} selects {hits}"


def test_network_policies_admit_exactly_the_peers(renders):
    objs = renders["production"]
    pods = {o["metadata"]["name"]: pod_template(o)["metadata"]["labels"] for o in workloads(objs)}

    def admitted(policy: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for rule in find(objs, "NetworkPolicy", policy)["spec"]["ingress"]:
            for peer in rule["from"]:
                for name, labels in pods.items():
                    if labels_match(peer["podSelector"]["matchLabels"], labels):
                        out.setdefault(name, set()).update(p["port"] for p in rule["ports"])
        return out

    assert admitted("korral-redis") == {n: {"redis"} for n in ("korral-broker", "korral-rmproxy", "korral-worker")}
    assert admitted("korral-broker") == {"korral-rmproxy": {"frontend"}, "korral-worker": {"backend"}}
    assert find(objs, "NetworkPolicy", "korral-worker")["spec"]["ingress"] == []


# --- image, user, security contexts, labels ---------------------------------------------------------

def test_image_and_tag_match_the_dockerfile_and_package(renders):
    assert f"-t korral:{VERSION}" in DOCKERFILE.read_text(), "the Dockerfile's build line names the tag the manifests use"
    expected = {"dev": f"korral:{VERSION}", "production": f"registry.example.com/korral:{VERSION}"}
    for overlay in OVERLAYS:
        images = {c["image"] for _o, _s, c, _sub in korral_containers(renders[overlay])}
        assert images == {expected[overlay]}
        for obj in workloads(renders[overlay]):
            labels = pod_template(obj)["metadata"]["labels"]
            if any(is_korral(c) for c in containers(obj)):
                assert labels["app.kubernetes.io/version"] == VERSION
    assert load_example("sim-job.yaml")["spec"]["template"]["spec"]["containers"][0]["image"] == f"korral:{VERSION}"


def test_ports_are_the_images_exposed_ones(renders):
    exposed = {int(p) for word, args in dockerfile_instructions(DOCKERFILE.read_text()) if word == "EXPOSE"
               for p in args.split()}
    ports = {p["containerPort"] for _o, _s, c, _sub in korral_containers(renders["production"])
             for p in c.get("ports") or []}
    assert ports == exposed


def _dockerfile_uid() -> int:
    for word, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if word == "RUN" and "useradd" in args:
            words = args.split()
            return int(words[words.index("--uid") + 1])
    raise AssertionError("no useradd --uid in the Dockerfile")


@pytest.mark.parametrize("name", [*OVERLAYS, "examples"])
def test_pods_meet_the_restricted_pod_security_standard(renders, name):
    objs = [load_example("sim-job.yaml")] if name == "examples" else list(workloads(renders[name]))
    uid = _dockerfile_uid()
    for obj in objs:
        spec = pod_template(obj)["spec"]
        where = obj["metadata"].get("name") or obj["metadata"]["generateName"]
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec["automountServiceAccountToken"] is False, where
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), where
        for v in spec.get("volumes") or []:
            assert "hostPath" not in v, where
        for c in containers(obj):
            sc = c["securityContext"]
            assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                          "capabilities": {"drop": ["ALL"]}}, f"{where}/{c['name']}"
            assert "limits" in c["resources"] and "requests" in c["resources"], f"{where}/{c['name']}"
            if is_korral(c):
                assert psc["runAsUser"] == uid, f"{where}: the image's user is uid {uid}"
                tmp = mount_for(c, spec, "/tmp")
                assert tmp is not None and "emptyDir" in tmp[1], f"{where}: /tmp must be writable"
    if name != "examples":
        ns = find(renders[name], "Namespace", "korral")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("name", [*OVERLAYS, "monitoring"])
def test_labels_follow_the_recommended_ones(renders, name):
    for o in renders[name]:
        labels = o["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/part-of") == "korral", f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "Service", "PodDisruptionBudget", "NetworkPolicy",
                         "ServiceMonitor"):
            for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
                        "app.kubernetes.io/managed-by"):
                assert key in labels, f"{o['kind']}/{o['metadata']['name']} lacks {key}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_memory_limits_cover_the_requests(renders, overlay):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}

    def mem(q: str) -> int:
        return int(q[:-2]) * units[q[-2:]]

    def cpu(q: str) -> float:
        return float(q[:-1]) / 1000 if q.endswith("m") else float(q)

    for obj in workloads(renders[overlay]):
        for c in containers(obj):
            r = c["resources"]
            assert mem(r["requests"]["memory"]) <= mem(r["limits"]["memory"]), obj["metadata"]["name"]
            assert cpu(r["requests"]["cpu"]) <= cpu(r["limits"]["cpu"]), obj["metadata"]["name"]
    worker = containers(find(renders[overlay], "Deployment", "korral-worker"))[0]
    assert mem(worker["resources"]["limits"]["memory"]) >= 2**30, "the 1 GiB capacity target (benchmarks.md)"


# --- monitoring ---------------------------------------------------------------------------------------

def test_servicemonitor_scrapes_the_metrics_path_on_the_rest_port(renders):
    [sm] = renders["monitoring"]
    assert (sm["apiVersion"], sm["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    assert set(sm["spec"]) == {"namespaceSelector", "selector", "endpoints"}
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["korral"]}
    [endpoint] = sm["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout"}
    assert endpoint["path"] == "/ws/v1/metrics" and endpoint["path"] in _rest_routes()
    objs = renders["production"]
    services = [o for o in objs if o["kind"] == "Service"
                and labels_match(sm["spec"]["selector"]["matchLabels"], o["metadata"]["labels"])]
    with_port = [s for s in services if any(p["name"] == endpoint["port"] for p in s["spec"]["ports"])]
    assert [s["metadata"]["name"] for s in with_port] == ["korral-rest"]
    obj, cport = _service_target(objs, "korral-rest", next(p["port"] for p in with_port[0]["spec"]["ports"]
                                                          if p["name"] == endpoint["port"]))
    assert obj["metadata"]["name"] == "korral-rmproxy" and cport["name"] == "rest"
    seconds = {k: int(endpoint[k].rstrip("s")) for k in ("interval", "scrapeTimeout")}
    assert seconds["scrapeTimeout"] <= seconds["interval"]


# --- the example RM ---------------------------------------------------------------------------------------

def test_sim_job_reaches_the_grpc_service(renders):
    job = load_example("sim-job.yaml")
    assert job["metadata"]["generateName"] and "name" not in job["metadata"]
    c = containers(job)[0]
    env = {e["name"]: e["value"] for e in c["env"]}
    ns = parse_korral(korral_argv(c), env)
    assert ns._name == "sim" and ns.preset == "small"
    host, port = host_port(ns.si_address)
    obj, cport = _service_target(renders["dev"], host, port)
    assert obj["metadata"]["name"] == "korral-rmproxy" and cport["name"] == "si"
    for var in env:
        assert env_var_is_read(["sim"], var), var


# --- repository hygiene -------------------------------------------------------------------------------------

def test_production_secrets_stay_out_of_git_and_the_image():
    from tests.deploy.test_compose import _dockerignore_patterns, _ignored

    secrets = "deploy/kubernetes/overlays/production/secrets"
    patterns = _dockerignore_patterns()
    for rel in ("redis.env", "curve/worker.key_secret", "tls/tls.key", "client-ca/ca.crt"):
        assert _ignored(f"{secrets}/{rel}", patterns), rel
        result = subprocess.run(["git", "check-ignore", "-q", f"{secrets}/{rel}"], cwd=REPO, timeout=30)
        if result.returncode == 128:
            pytest.skip("not a git checkout")
        assert result.returncode == 0, f"{secrets}/{rel} is not git-ignored"
    tracked = subprocess.run(["git", "ls-files", secrets], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert set(tracked.stdout.split()) <= {f"{secrets}/.gitignore", f"{secrets}/README.md"}


def test_kustomization_files_parse_and_name_existing_paths():
    for path in KUBE.rglob("kustomization.yaml"):
        k = yaml.safe_load(path.read_text())
        for entry in (k.get("resources") or []) + (k.get("components") or []):
            assert (path.parent / entry).exists(), f"{path}: {entry}"
        for patch in k.get("patches") or []:
            assert (path.parent / patch["path"]).is_file(), f"{path}: {patch}"


def test_docs_kubernetes_names_the_manifests_objects(renders):
    doc = (REPO / "docs" / "kubernetes.md").read_text()
    for name in ("korral-grpc", "korral-rest", "korral-broker", "korral-worker", "korral-redis", "korral-queues",
                 "/ws/v1/korral/ready", "/ws/v1/metrics", "korral-grpc.korral.svc"):
        assert name in doc, name
    for secret in (o["metadata"]["name"] for o in renders["production"] if o["kind"] == "Secret"):
        assert secret in doc, secret
    assert f"korral:{VERSION}" in doc
