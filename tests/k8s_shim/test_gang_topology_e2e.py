"""A gang's topology through Kubernetes, end to end (``korral up`` + ``korral k8s-fake`` +
``korral k8s-shim``, real processes): the partition's topology levels in the shim's configmap, the
nodes labelled by rack, and a gang asking for one rack, either through YuniKorn's task-group
annotation (a ``topology`` key) or through a 1.36 PodGroup's ``schedulingConstraints.topology``.

- a gang that fits one rack only where the other rack is partly used lands in that rack;
- a required gang that fits only across racks waits (its placeholders too), and its pods say why;
- a preferred one that fits no rack is placed over the fewest racks, its level named by the label key.
"""

from __future__ import annotations

import json

import pytest

from k8s_shim.demo import QUEUES as DEMO_QUEUES, namespace, node, pod
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, placement_problems, pod_events
from tests.k8s_shim.test_gang_e2e import GROUP, GROUP_NAME, pods_of, start

pytestmark = pytest.mark.timeout(240)

RACK = "example.com/rack"
# the demo's queues, and the partition's topology levels (a key of the partition)
QUEUES = DEMO_QUEUES + f"""    topology:
      levels:
        - {{name: rack, label: {RACK}}}
"""
RUNTIME = ("--runtime-config", "scheduling.k8s.io/v1alpha2=true")
GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"
NS = "ml"


@pytest.fixture
def cluster(stack_factory, tmp_path):
    c = ShimCluster(stack_factory(workers=1), tmp_path)
    try:
        kube = c.start_fake_with_configs(*RUNTIME, queues=QUEUES)
        kube.create("/api/v1/namespaces", namespace(NS))
        yield c
    finally:
        c.stop()


def racks(c: ShimCluster) -> None:
    """Two racks of three 4-cpu nodes, r1's first two nodes taken by a 3-cpu pod each: for members
    of 2 cpus r1 has room for two (on its third node), r2 for six."""
    nodes = [node(f"{r}-n{i}", "4", "16Gi", labels={RACK: r}) for r in ("r1", "r2") for i in range(3)]
    start(c, *nodes)
    for i in range(2):
        c.kube.create(f"/api/v1/namespaces/{NS}/pods",
                      pod(f"filler-{i}", NS, "3", "128Mi", labels={"applicationId": "filler"},
                          nodeSelector={"kubernetes.io/hostname": f"r1-n{i}"}))
    wait_until(lambda: all(pods_of(c.kube, NS)[f"filler-{i}"]["spec"].get("nodeName") for i in range(2)), 60,
               "the fillers bound in r1", c.logs)


def members_by_annotation(app: str, count: int, topology: dict) -> list[dict]:
    groups = [{"name": "workers", "minMember": count, "minResource": {"cpu": "2", "memory": "128Mi"},
               "topology": topology}]
    annotations = {GROUP: json.dumps(groups), GROUP_NAME: "workers"}
    return [pod(f"{app}-{i}", NS, "2", "128Mi", labels={"applicationId": app}, annotations=annotations)
            for i in range(count)]


def bound_racks(c: ShimCluster, names: list[str]) -> set[str] | None:
    pods = pods_of(c.kube, NS)
    where = [pods.get(n, {}).get("spec", {}).get("nodeName") for n in names]
    return {w.split('-')[0] for w in where} if all(where) else None


def test_a_gang_asking_for_one_rack_by_annotation_lands_in_the_rack_it_fits(cluster):
    c = cluster
    racks(c)
    # 4 members of 2 cpus: only r2 holds them all
    gang = members_by_annotation("train", 4, {"level": "rack", "mode": "required"})
    for p in gang:
        c.kube.create(f"/api/v1/namespaces/{NS}/pods", p)
    names = [p["metadata"]["name"] for p in gang]
    wait_until(lambda: bound_racks(c, names) is not None, 90, "the gang bound",
               lambda: f"{json.dumps(c.korral_app('train'))[:3000]}\n{c.logs()}")
    assert bound_racks(c, names) == {"r2"}
    app = c.korral_app("train")
    assert app["korralTopology"]["domain"] == {"rack": "r2"}, app["korralTopology"]
    assert placement_problems(c.kube, terminating=False) == []


def test_a_podgroup_asking_for_one_rack_waits_when_no_rack_fits_and_says_why(cluster):
    c = cluster
    racks(c)
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "big"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 7}},
                      "schedulingConstraints": {"topology": [{"key": RACK}]}}}
    c.kube.create(GROUPS.format(ns=NS), group)
    names = [f"big-{i}" for i in range(7)]  # 14 cpus: more than any rack's room (r2: 12)
    for n in names:
        c.kube.create(f"/api/v1/namespaces/{NS}/pods",
                      pod(n, NS, "2", "128Mi", labels={"job-name": "big"}, schedulingGroup={"podGroupName": "big"}))
    wait_until(lambda: any("GangScheduling" in pod_events(c.kube).get(f"{NS}/{n}", ()) for n in names)
               and "rack" in (c.korral_app(f"{NS}.big").get("korralTopology") or {}).get("reason", ""), 60,
               "the gang waiting, saying why", c.logs)
    topology = c.korral_app(f"{NS}.big")["korralTopology"]
    assert topology["domain"] is None and topology["mode"] == "required", topology
    assert not [p for p in pods_of(c.kube, NS).values()
                if p["spec"].get("nodeName") and not p["metadata"]["name"].startswith("filler")]


def test_a_gang_preferring_one_rack_that_fits_none_spreads_over_the_fewest_racks(cluster):
    c = cluster
    racks(c)
    gang = members_by_annotation("wide", 7, {"level": RACK, "mode": "preferred"})  # 14 cpus: no rack holds them
    for p in gang:
        c.kube.create(f"/api/v1/namespaces/{NS}/pods", p)
    names = [p["metadata"]["name"] for p in gang]
    wait_until(lambda: bound_racks(c, names) is not None, 90, "the gang bound",
               lambda: f"{c.korral_app('wide').get('korralTopology')}\n{c.logs()}")
    assert bound_racks(c, names) == {"r1", "r2"}  # both racks: the fewest that hold it
    topology = c.korral_app("wide")["korralTopology"]
    assert topology["mode"] == "preferred" and topology["domain"] is None and "rack" in topology["reason"], topology
    assert placement_problems(c.kube, terminating=False) == []
