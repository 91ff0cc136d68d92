"""deploy/kubernetes, checked offline (continued from test_kubernetes.py): the pods as they run.

- probes use real REST routes and real ``korral`` commands (parsed by the real parsers);
- workload shapes: one broker replaced, workers rolled one at a time and budgeted, an RM kept on
  one rmproxy, selectors that select their pods, network policies that admit exactly the peers;
- images, uid and ports agree with deploy/Dockerfile and pyproject.toml; pods meet the restricted
  pod security standard; labels, memory limits; the ServiceMonitor scrapes /ws/v1/metrics on the
  REST port; the example RM reaches the gRPC Service; production secrets stay out of git.
"""

from __future__ import annotations

import shlex
import subprocess
import tomllib

import pytest
import yaml

from tests.deploy.compose import DOCKERFILE, REPO, dockerfile_instructions, env_var_is_read, host_port, parse_korral
from tests.deploy.kube import (KUBE, OVERLAYS, containers, find, is_korral, korral_argv, korral_container,
                               korral_containers, labels_match, load_example, mount_for, mounted_file, overlay_params,
                               parsed, pod_template, service_target, workloads)

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


# --- probes ------------------------------------------------------------------------------------------

def _rest_routes() -> set[str]:
    from unittest import mock

    from rmproxy.webapi import build_app

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
            mounted_file(objs, spec, c, ns.curve_server)
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
    obj, cport = service_target(objs, "korral-grpc", port["port"])
    rmproxy = next(x for x in korral_containers(objs) if x[3] == "rmproxy")
    assert obj["metadata"]["name"] == "korral-rmproxy"
    assert cport["containerPort"] == host_port(parsed(objs, rmproxy[0], rmproxy[2]).si_address)[1]
    rest = find(objs, "Service", "korral-rest")
    assert service_target(objs, "korral-rest", 9080)[1]["containerPort"] == \
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
    obj, cport = service_target(objs, "korral-rest", next(p["port"] for p in with_port[0]["spec"]["ports"]
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
    obj, cport = service_target(renders["dev"], host, port)
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
