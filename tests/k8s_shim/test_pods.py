"""YuniKorn's pod contract as the shim reads it (``k8s_shim.translate.pods``, ``k8s_shim.translate.namespaces``,
``k8s_shim.translate.quantity``): the precedence of app ID, queue and user; sizes with init containers,
native sidecars, overhead and pod-level resources; tags; unsupported constraints; and every bad
input named by its field."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from common.constants import (APP_TAG_NAMESPACE_RESOURCE_GUARANTEED, APP_TAG_NAMESPACE_RESOURCE_MAX_APPS,
                              APP_TAG_NAMESPACE_RESOURCE_QUOTA, CREATION_TIME, TAG_HOST_PORTS, TAG_NAMESPACE,
                              TAG_NODE_AFFINITY, TAG_NODE_SELECTOR_PREFIX, TAG_POD_NAME, TAG_REQUIRED_NODE,
                              TAG_TOLERATIONS)
from k8s_shim.translate import quantity
from k8s_shim.translate.namespaces import read_namespace, read_priority_class
from k8s_shim.translate.pods import PodRules, app_identity, decoder, pod_size, read_pod

RULES = PodRules()


def raw_pod(name="p", ns="ns", uid="u-1", labels=None, annotations=None, scheduler="yunikorn", containers=None,
            **spec) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "labels": labels or {},
                         "annotations": annotations or {}, "creationTimestamp": "2026-11-27T08:15:35Z"},
            "spec": {"schedulerName": scheduler,
                     "containers": containers if containers is not None else [c("100m", "64Mi")], **spec},
            "status": {"phase": "Pending"}}


def c(cpu=None, memory=None, name="main", **extra) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "image": "alpine", "resources": {"requests": requests}, **extra}


# ------------------------------------------------------------------ quantities
@pytest.mark.parametrize("text, exact", [
    ("1", 1), ("500m", Fraction(1, 2)), ("1.5", Fraction(3, 2)), ("2Ki", 2048), ("1Gi", 2**30),
    ("1k", 1000), ("1M", 10**6), ("3e3", 3000), ("1E2", 100), ("100n", Fraction(1, 10**7)), (".5", Fraction(1, 2)),
    ("+2", 2), ("-1", -1), ("1.", 1), ("1E", 10**18),
], ids=lambda v: str(v))
def test_quantities_parse_exactly(text, exact):
    assert quantity.parse(text) == exact


@pytest.mark.parametrize("text", ["", "abc", "1Kb", "1 Gi", "1e", "m", "1.2.3", "1ki", "1e99"])
def test_what_is_not_a_quantity_says_so(text):
    with pytest.raises(ValueError, match="quantity"):
        quantity.parse(text)


@pytest.mark.parametrize("name, text, expected", [
    ("cpu", "500m", ("vcore", 500)), ("cpu", "1", ("vcore", 1000)), ("cpu", "0.0001", ("vcore", 1)),
    ("memory", "1.5Ki", ("memory", 1536)), ("memory", "100m", ("memory", 1)), ("nvidia.com/gpu", "2", ("nvidia.com/gpu", 2)),
])
def test_sizes_round_up_as_kubernetes_does(name, text, expected):
    assert quantity.si_value(name, text) == expected


# ------------------------------------------------------------------ identity
@pytest.mark.parametrize("labels, annotations, expected", [
    ({"yunikorn.apache.org/app-id": "canon", "applicationId": "l", "spark-app-selector": "s"},
     {"yunikorn.apache.org/app-id": "ann"}, "canon"),
    ({"applicationId": "l", "spark-app-selector": "s"}, {"yunikorn.apache.org/app-id": "ann"}, "ann"),
    ({"applicationId": "l", "spark-app-selector": "s"}, {}, "l"),
    ({"spark-app-selector": "s"}, {}, "s"),
    ({}, {}, "yunikorn-ns-autogen"),
    ({"applicationId": "batch-uniqueautogen"}, {}, "batch-u-1"),
], ids=["canonical label first", "then the annotation", "then applicationId", "then spark-app-selector",
        "none: per-namespace autogen", "uniqueautogen suffix takes the pod uid"])
def test_app_id_precedence(labels, annotations, expected):
    assert app_identity(labels, annotations, "ns", "u-1", RULES)[0] == expected


def test_unique_app_ids_per_pod_cut_the_namespace_at_26_characters():
    ns = "n" * 40
    app = app_identity({}, {}, ns, "uid-1", PodRules(unique_app_ids=True))[0]
    assert app == f"{'n' * 26}-uid-1"
    assert len(app_identity({}, {}, "x" * 70, "u", RULES)[0]) == 63


@pytest.mark.parametrize("labels, annotations, expected", [
    ({"yunikorn.apache.org/queue": "root.a", "queue": "root.c"}, {"yunikorn.apache.org/queue": "root.b"}, "root.a"),
    ({"queue": "root.c"}, {"yunikorn.apache.org/queue": "root.b"}, "root.b"),
    ({"queue": "root.c"}, {}, "root.c"),
    ({}, {}, ""),
], ids=["canonical label first", "then the annotation", "then the queue label", "none: placement decides"])
def test_queue_precedence(labels, annotations, expected):
    assert app_identity(labels, annotations, "ns", "u", RULES)[1] == expected


@pytest.mark.parametrize("labels, annotations, user, groups, problem", [
    ({}, {"yunikorn.apache.org/user.info": '{"user": "alice", "groups": ["dev", "ops"]}'}, "alice", ("dev", "ops"), None),
    ({"yunikorn.apache.org/username": "bob"}, {"yunikorn.apache.org/user.info": '{"user": "alice"}'}, "alice", (), None),
    ({"yunikorn.apache.org/username": "bob"}, {}, "bob", (), None),
    ({}, {}, "nobody", (), None),
    ({}, {"yunikorn.apache.org/user.info": "{not json"}, "nobody", (), "not valid user info JSON"),
    ({}, {"yunikorn.apache.org/user.info": '{"user": 3}'}, "nobody", (), "not valid user info JSON"),
    ({}, {"yunikorn.apache.org/user.info": '{"user": ""}'}, "nobody", (), "empty user"),
], ids=["user info annotation", "annotation beats the username label", "username label", "default nobody",
        "malformed JSON: nobody", "wrong types: nobody", "empty user: nobody"])
def test_user_precedence_and_bad_user_info(labels, annotations, user, groups, problem):
    _, _, got_user, got_groups, problems = app_identity(labels, annotations, "ns", "u", RULES)
    assert (got_user, got_groups) == (user, groups)
    if problem:
        [p] = problems
        assert problem in p.message and p.field == "metadata.annotations[yunikorn.apache.org/user.info]"
        assert not p.blocking
    else:
        assert not problems


def test_conflicting_app_ids_are_reported_as_yunikorn_warns():
    *_, problems = app_identity({"applicationId": "a", "spark-app-selector": "b"}, {}, "ns", "u", RULES)
    assert "more than one app-id value: using 'a'" in problems[0].message
    assert "metadata.labels[spark-app-selector]" in problems[0].field


# ------------------------------------------------------------------ sizes
@pytest.mark.parametrize("spec, expected", [
    ({"containers": [c("100m", "64Mi"), c("200m", "64Mi", name="b")]}, {"vcore": 300, "memory": 128 << 20}),
    ({"containers": [c("100m")], "initContainers": [c("500m", name="i1"), c("200m", name="i2")]}, {"vcore": 500}),
    ({"containers": [c("100m")], "initContainers": [c("50m", name="i1")]}, {"vcore": 100}),
    # a native sidecar keeps running: added to the pod, and counted under the init containers after it
    ({"containers": [c("100m")], "initContainers": [c("200m", name="side", restartPolicy="Always"),
                                                    c("250m", name="after")]}, {"vcore": 450}),
    ({"containers": [c("1")], "initContainers": [c("200m", name="side", restartPolicy="Always")]}, {"vcore": 1200}),
    ({"containers": [c("100m", "64Mi")], "overhead": {"cpu": "250m", "memory": "120Mi"}},
     {"vcore": 350, "memory": 184 << 20}),
    ({"containers": [c("100m", "64Mi")], "resources": {"requests": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "1"}}},
     {"vcore": 2000, "memory": 1 << 30}),
    ({"containers": [{"name": "x", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}, {"nvidia.com/gpu": 2}),
    ({"containers": [{"name": "limits-only", "resources": {"limits": {"cpu": "1"}}}]}, {}),
], ids=["containers add up", "largest init container wins", "containers beat a small init container",
        "sidecar counted before the later init container", "sidecar added to the containers", "overhead added",
        "pod-level requests replace cpu and memory", "extended resources", "limits alone request nothing"])
def test_pod_size_as_kubernetes_computes_it(spec, expected):
    problems = []
    assert pod_size(spec, {}, problems) == {**expected, "pods": 1} and not problems


def test_an_in_place_resize_takes_the_larger_and_an_infeasible_one_the_status():
    spec = {"containers": [c("100m")]}
    status = {"containerStatuses": [{"name": "main", "allocatedResources": {"cpu": "300m"}}]}
    assert pod_size(spec, status, [])["vcore"] == 300
    status = {"resize": "Infeasible", "containerStatuses": [{"name": "main", "resources": {"requests": {"cpu": "50m"}}}]}
    assert pod_size(spec, status, [])["vcore"] == 50


@pytest.mark.parametrize("spec, field, words", [
    ({"containers": []}, "spec.containers", "no containers"),
    ({"containers": [c("lots")]}, "spec.containers[0].resources.requests.cpu", "not a quantity"),
    ({"containers": [c("100m"), c(memory="-1", name="b")]}, "spec.containers[1].resources.requests.memory", "negative"),
    ({"containers": [c("1")], "initContainers": [c("x", name="i")]}, "spec.initContainers[0].resources.requests.cpu",
     "not a quantity"),
    ({"containers": [c("1")], "overhead": {"memory": "1 Gi"}}, "spec.overhead.memory", "not a quantity"),
    ({"containers": [{"name": "m", "resources": {"requests": ["cpu"]}}]}, "spec.containers[0].resources.requests",
     "not a map"),
], ids=["no containers", "cpu not a quantity", "negative memory", "bad init container", "bad overhead",
        "requests not a map"])
def test_a_pod_that_cannot_be_sized_is_blocked_naming_the_field(spec, field, words):
    pod = read_pod(raw_pod(**{k: v for k, v in spec.items() if k != "containers"}, containers=spec["containers"]),
                   RULES)
    assert pod.blocked is not None and pod.blocked.field == field and words in pod.blocked.message


# ------------------------------------------------------------------ tags and constraints
def test_tags_carry_yunikorns_names_and_the_node_checks():
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    pod = read_pod(raw_pod(labels={"app": "web", "applicationId": "a1"}, tolerations=tolerations,
                           nodeSelector={"disk": "ssd"}, affinity=affinity, priority=7,
                           containers=[c("1", ports=[{"containerPort": 80, "hostPort": 8080},
                                                     {"containerPort": 53, "hostPort": 53, "protocol": "UDP",
                                                      "hostIP": "10.0.0.1"}, {"containerPort": 9}])]), RULES)
    t = pod.tags
    assert t[TAG_NAMESPACE] == "ns" and t[TAG_POD_NAME] == "p" and t["kubernetes.io/label/app"] == "web"
    assert t[CREATION_TIME] == "1795767335"
    assert json.loads(t[TAG_TOLERATIONS]) == tolerations and t[TAG_NODE_SELECTOR_PREFIX + "disk"] == "ssd"
    assert json.loads(t[TAG_NODE_AFFINITY]) == affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert json.loads(t[TAG_HOST_PORTS]) == [{"hostIP": "0.0.0.0", "hostPort": 8080, "protocol": "TCP"},
                                             {"hostIP": "10.0.0.1", "hostPort": 53, "protocol": "UDP"}]
    assert pod.priority == 7 and pod.app_id == "a1" and not pod.problems


def test_a_daemonset_pod_requires_its_node_and_a_static_pod_is_marked():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}]}}}
    raw = raw_pod(affinity=affinity)
    raw["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "uid": "x"}]
    assert read_pod(raw, RULES).tags[TAG_REQUIRED_NODE] == "node-7"
    raw["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "x"}]
    assert TAG_REQUIRED_NODE not in read_pod(raw, RULES).tags
    static = raw_pod(scheduler="default-scheduler")
    static["metadata"]["ownerReferences"] = [{"kind": "Node", "name": "n1", "uid": "x"}]
    assert read_pod(static, RULES).static and not read_pod(static, RULES).ours


def test_a_foreign_pods_tags_are_yunikorns_and_its_host_ports_only():
    pod = read_pod(raw_pod(scheduler="default-scheduler", tolerations=[{"operator": "Exists"}],
                           containers=[c("1", ports=[{"containerPort": 80, "hostPort": 80}])]), RULES)
    assert not pod.ours and TAG_TOLERATIONS not in pod.tags and TAG_HOST_PORTS in pod.tags and not pod.app_id


def test_claims_of_persistent_and_ephemeral_volumes():
    pod = read_pod(raw_pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-1"}},
                                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                                    {"name": "cfg", "configMap": {"name": "x"}}]), RULES)
    assert pod.claims == ("pvc-1", "p-scratch")


def test_preemption_settings_and_a_bad_allow_preemption_annotation():
    pod = read_pod(raw_pod(annotations={"yunikorn.apache.org/allow-preemption": "false"},
                           preemptionPolicy="Never", priorityClassName="high"), RULES)
    assert pod.allow_preemption is False and not pod.preempt_others and pod.priority_class == "high"
    pod = read_pod(raw_pod(annotations={"yunikorn.apache.org/allow-preemption": "maybe"}), RULES)
    assert pod.allow_preemption is None and "neither true nor false" in pod.problems[0].message
    assert read_priority_class({"metadata": {"annotations": {"yunikorn.apache.org/allow-preemption": "false"}}}) is False
    assert read_priority_class({"metadata": {}}) is True


def test_the_decoder_reads_a_pod_once_and_drops_what_it_is_told_to():
    decode = decoder(RULES, keep=lambda node, phase, ours: phase not in ("Succeeded", "Failed"))
    raw = raw_pod()
    first = decode(raw, None)
    raw2 = raw_pod(labels={"changed": "yes"})
    raw2["spec"]["nodeName"] = "n1"
    raw2["spec"]["schedulingGates"] = [{"name": "wait"}]
    second = decode(raw2, first)
    assert second.spec is first.spec and second.node == "n1" and second.gates == ("wait",)
    raw2["status"]["phase"] = "Succeeded"
    assert decode(raw2, second) is None


# ------------------------------------------------------------------ namespaces
@pytest.mark.parametrize("annotations, tags", [
    ({"yunikorn.apache.org/namespace.quota": '{"cpu": "2", "memory": "1Gi"}'},
     {APP_TAG_NAMESPACE_RESOURCE_QUOTA: {"vcore": 2000, "memory": 1 << 30}}),
    ({"yunikorn.apache.org/namespace.max.cpu": "500m", "yunikorn.apache.org/namespace.max.memory": "1M"},
     {APP_TAG_NAMESPACE_RESOURCE_QUOTA: {"vcore": 500, "memory": 10**6}}),
    ({"yunikorn.apache.org/namespace.quota": '{"cpu": "1"}', "yunikorn.apache.org/namespace.max.cpu": "9"},
     {APP_TAG_NAMESPACE_RESOURCE_QUOTA: {"vcore": 1000}}),
    ({"yunikorn.apache.org/namespace.guaranteed": '{"memory": "2Gi"}'},
     {APP_TAG_NAMESPACE_RESOURCE_GUARANTEED: {"memory": 2 << 30}}),
    ({"yunikorn.apache.org/namespace.maxApps": "4"}, {APP_TAG_NAMESPACE_RESOURCE_MAX_APPS: "4"}),
    ({"yunikorn.apache.org/parentqueue": "root.tenants"}, {"namespace.parentqueue": "root.tenants"}),
    ({"yunikorn.apache.org/namespace.quota": '{"cpu": "0"}'}, {}),
], ids=["quota", "deprecated max.cpu and max.memory", "quota beats the deprecated ones", "guaranteed", "max apps",
        "parent queue", "a zero quota is no quota"])
def test_namespace_annotations_become_app_tags(annotations, tags):
    ns = read_namespace({"metadata": {"name": "ns", "annotations": annotations}})
    assert not ns.problems
    decoded = {k: ({r: q["value"] for r, q in json.loads(v)["resources"].items()} if v.startswith("{") else v)
               for k, v in ns.tags.items()}
    assert decoded == tags


@pytest.mark.parametrize("annotations, field, words", [
    ({"yunikorn.apache.org/namespace.quota": "{cpu: 2"}, "metadata.annotations[yunikorn.apache.org/namespace.quota]",
     "not JSON"),
    ({"yunikorn.apache.org/namespace.quota": '{"cpu": "two"}'},
     "metadata.annotations[yunikorn.apache.org/namespace.quota].cpu", "not a quantity"),
    ({"yunikorn.apache.org/namespace.quota": '["cpu"]'}, "metadata.annotations[yunikorn.apache.org/namespace.quota]",
     "expected a JSON map"),
    ({"yunikorn.apache.org/namespace.guaranteed": '{"memory": "-1"}'},
     "metadata.annotations[yunikorn.apache.org/namespace.guaranteed].memory", "negative"),
    ({"yunikorn.apache.org/namespace.maxApps": "-2"}, "metadata.annotations[yunikorn.apache.org/namespace.maxApps]",
     "not an integer >= 0"),
    ({"yunikorn.apache.org/namespace.max.cpu": "x"}, "metadata.annotations[yunikorn.apache.org/namespace.max.cpu]",
     "not a quantity"),
], ids=["quota not JSON", "quota not a quantity", "quota not a map", "negative guaranteed", "negative max apps",
        "deprecated cpu not a quantity"])
def test_a_bad_namespace_annotation_is_left_out_naming_the_field(annotations, field, words):
    ns = read_namespace({"metadata": {"name": "ns", "annotations": annotations}})
    [problem] = ns.problems
    assert problem.field == field and words in problem.message and not ns.tags
