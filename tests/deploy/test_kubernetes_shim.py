"""deploy/kubernetes/k8s-shim, checked offline as the rest of deploy/kubernetes is: rendered (and
compared with ``kubectl kustomize`` where kubectl is installed), validated strictly against the
Kubernetes schemas, its command line and variables parsed by the real ``korral k8s-shim``, its
Services reached in the stack's render, its pod within the restricted Pod Security Standard,
its configmaps read by the shim's own config loader, and its RBAC exactly what the shim uses:
list and watch on what its informers watch, and the verbs of the API calls it makes."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from k8s_shim import leader
from k8s_shim.config import load
from k8s_shim.kube.kubeclient import KubeClient
from k8s_shim.main import watched
from tests.deploy.compose import env_var_is_read, host_port, parse_korral
from tests.deploy.kube import KUBE, containers, find, pod_template, service_target
from tests.deploy.kustomize import build

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is a test dependency (pip install -e '.[test]')")

SHIM = KUBE / "k8s-shim"
NAMESPACE = "korral"
# the API calls of k8s_shim.kube.kubeclient.KubeClient the shim makes, as RBAC names them
# (api group, resource, verb); test_every_client_call_is_in_this_table keeps it complete
CALLS = {
    "submit_bind": ("", "pods/binding", "create"),
    "patch_status": ("", "pods/status", "patch"),
    "delete": ("", "pods", "delete"),  # preemption victims, a gang's placeholders
    "create_pod": ("", "pods", "create"),  # a gang's placeholders
    "submit_event": ("events.k8s.io", "events", "create"),
    "patch_event_series": ("events.k8s.io", "events", "patch"),  # a series' count (repeated events)
    "get": ("", "namespaces", "get"),  # a namespace read before its watch shows it
    "patch_claim": ("", "persistentvolumeclaims", "patch"),  # a WaitForFirstConsumer claim's node
    "patch_volume": ("", "persistentvolumes", "patch"),  # a static volume's pre-bind (claimRef)
    "get_claim": ("resource.k8s.io", "resourceclaims", "get"),  # DRA: read before it is written
    "get_pod": ("", "pods", "get"),  # DRA: a reservation's pod the informers do not show (start-up)
    "update_claim": ("resource.k8s.io", "resourceclaims", "update"),  # DRA: the finalizer
    "update_claim_status": ("resource.k8s.io", "resourceclaims/status", "update"),  # DRA: allocation, reservedFor
    "patch_pod_group_status": ("scheduling.k8s.io", "podgroups/status", "patch"),  # PodGroupScheduled
}


@pytest.fixture(scope="module")
def objs() -> list[dict]:
    return build(SHIM)


def _resource(path: str) -> tuple[str, str, bool]:
    """(api group, resource, namespaced) of a collection path."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[0] == "namespaces" and len(rest) > 2:
        return group, rest[2], True
    return group, rest[0], False


def _rules(objs: list[dict], kind: str) -> set[tuple[str, str, str]]:
    role = next(o for o in objs if o["kind"] == kind)
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def test_it_renders_the_shim_and_its_configmaps(objs):
    assert {(o["kind"], o["metadata"]["name"]) for o in objs} == {
        ("ServiceAccount", "korral-k8s-shim"), ("ClusterRole", "korral-k8s-shim"),
        ("ClusterRoleBinding", "korral-k8s-shim"), ("Role", "korral-k8s-shim"), ("RoleBinding", "korral-k8s-shim"),
        ("Deployment", "korral-k8s-shim"), ("ConfigMap", "yunikorn-defaults"), ("ConfigMap", "yunikorn-configs"),
        ("PodDisruptionBudget", "korral-k8s-shim")}
    for o in objs:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_renders_the_same(objs):
    out = subprocess.run(["kubectl", "kustomize", str(SHIM)], capture_output=True, text=True, timeout=60, check=True)
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    theirs = sorted((d for d in yaml.safe_load_all(out.stdout) if d), key=key)
    assert theirs == sorted(objs, key=key)


@pytest.mark.parametrize("version", ("1.30", kubernetes_validate.latest_version()))
def test_every_object_is_valid_kubernetes(objs, version):
    for o in objs:
        kubernetes_validate.validate(o, version, strict=True)


def test_the_command_line_and_environment_are_the_shims(objs):
    dep = find(objs, "Deployment", "korral-k8s-shim")
    [c] = containers(dep)
    assert "command" not in c and c["args"] == ["k8s-shim"]
    env = {}
    for item in c["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            env[item["name"]] = {"metadata.namespace": NAMESPACE, "metadata.name": "korral-k8s-shim-0"}[path]
    for var in env:
        if var.startswith("KORRAL_"):
            assert env_var_is_read(["k8s-shim"], var), f"korral k8s-shim does not read {var}"
    args = parse_korral(["k8s-shim"], env)
    assert args.namespace == NAMESPACE and args.instance == "korral-k8s-shim-0"
    # leader election on; its Lease in the shim's namespace, which the Role covers
    lease = leader.settings_from(args, args.namespace, args.instance, "x")
    assert args.leader_elect and (lease.namespace, lease.name) == (NAMESPACE, "yunikorn")
    # the Role lets it read and write that Lease, by name
    role = find(objs, "Role", "korral-k8s-shim")
    named = [r for r in role["rules"] if r["resources"] == ["leases"] and r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease.name],
                      "verbs": ["get", "update"]}]
    # they lead to rmproxy's ports in the stack's render
    stack = build(KUBE / "overlays" / "dev")
    for address, port_name in ((args.si_address, "si"), (args.rest_address, "rest")):
        host, port = host_port(address)
        target, container_port = service_target(stack, host, port)
        assert target["metadata"]["name"] == "korral-rmproxy" and container_port["name"] == port_name


def test_two_replicas_rolled_one_at_a_time_on_two_nodes_as_restricted_pods(objs):
    dep = find(objs, "Deployment", "korral-k8s-shim")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    spec = pod_template(dep)["spec"]
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    pdb = find(objs, "PodDisruptionBudget", "korral-k8s-shim")
    assert pdb["spec"] == {"minAvailable": 1, "selector": dep["spec"]["selector"]}
    assert spec["serviceAccountName"] == "korral-k8s-shim"
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    [c] = containers(dep)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"] and sc["readOnlyRootFilesystem"]
    labels = pod_template(dep)["metadata"]["labels"]
    # not selected by the stack's NetworkPolicy that admits Korral's own processes to Redis
    assert labels["app.kubernetes.io/name"] != "korral"


def test_the_configmaps_are_what_the_shim_reads(objs):
    defaults, configs = find(objs, "ConfigMap", "yunikorn-defaults"), find(objs, "ConfigMap", "yunikorn-configs")
    loaded, warnings = load([defaults, configs])
    assert not warnings and loaded.conf.cluster_id == "mycluster" and loaded.queues.startswith("# YuniKorn's default")
    from common.config import loader  # the queues config is one Korral accepts

    loader.load_config(loaded.queues)


def test_rbac_grants_exactly_what_the_shim_uses(objs):
    cluster_rules, namespace_rules = _rules(objs, "ClusterRole"), _rules(objs, "Role")
    wanted_cluster, wanted_namespace = set(CALLS.values()), set()
    for path in watched(NAMESPACE).values():
        group, resource, namespaced = _resource(path)
        target = wanted_namespace if namespaced else wanted_cluster
        target |= {(group, resource, "list"), (group, resource, "watch")}
    assert cluster_rules == wanted_cluster
    wanted_namespace |= leader.RBAC  # the Lease of leader election, in the shim's namespace
    assert namespace_rules == wanted_namespace == {("", "configmaps", "list"), ("", "configmaps", "watch"),
                                                   *leader.RBAC}
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        b = find(objs, binding, "korral-k8s-shim")
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": "korral-k8s-shim"}
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "korral-k8s-shim", "namespace": NAMESPACE}]


def test_every_client_call_is_in_this_table():
    public = {n for n in vars(KubeClient) if not n.startswith("_") and callable(getattr(KubeClient, n))}
    plumbing = {"start", "close", "request", "send", "submit", "watch", "watch_batches", "set_rate", "counters"}  # generic: the informers' list/watch,
    # or used by the calls
    assert public - plumbing == set(CALLS), "a new KubeClient call needs its RBAC verb in CALLS and in rbac.yaml"
