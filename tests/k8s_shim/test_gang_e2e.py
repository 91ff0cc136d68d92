"""Gang scheduling end to end: ``korral up`` + ``korral k8s-fake`` + ``korral k8s-shim``, real
processes. A gang of real pods gets its placeholder pods, they are placed, the real pods take their
places and the placeholders go (their deletion failing at first); a gang that cannot fit times
out (Soft: the real pods then run as ordinary pods; Hard: they fail with
``ResourceReservationTimeout``); malformed gang annotations get events naming the pod and field; a
shim restarted mid-gang re-attaches the placeholders it made instead of making a second set."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from k8s_shim.demo import namespace, node, pod
from k8s_shim.fake.server import FAULTS_PATH
from tests.conftest import wait_until
from tests.k8s_shim.cluster import ShimCluster, placement_problems, pod_events
from tests.k8s_shim.test_shim_e2e import shim_cluster  # noqa: F401 - the fixture gang_cluster builds on

GROUP = "yunikorn.apache.org/task-groups"
GROUP_NAME = "yunikorn.apache.org/task-group-name"
POLICY = "yunikorn.apache.org/schedulingPolicyParameters"
PLACEHOLDER = "internal.yunikorn.apache.org/placeholder"


IMAGE = "example.org/pause:9"


@pytest.fixture
def gang_cluster(shim_cluster):
    shim_cluster.kube.request("PATCH", "/api/v1/namespaces/yunikorn/configmaps/yunikorn-configs",
                              {"data": {"service.placeholderImage": IMAGE}}, "application/merge-patch+json")
    return shim_cluster


def start(c: ShimCluster, *nodes: dict) -> None:
    """The nodes created, the shim started, and every node open in Korral."""
    for n in nodes:
        c.kube.create("/api/v1/nodes", n)
    c.start_shim()
    wait_until(lambda: len([n for n in c.korral_nodes().values() if n["schedulable"]]) == len(nodes), 60,
               "the nodes registered and opened", c.logs)


def gang_done(kube, ns: str, real: set[str]):
    """Every member bound and no placeholder left."""
    return lambda: all(p["spec"].get("nodeName") for n, p in pods_of(kube, ns).items() if n in real) and \
        not placeholders(kube, ns)


def members(app: str, ns: str, count: int, cpu: str, *, min_member: int, min_cpu: str, policy: str = "",
            group: str = "workers") -> list[dict]:
    groups = [{"name": "workers", "minMember": min_member, "minResource": {"cpu": min_cpu, "memory": "128Mi"}}]
    annotations = {GROUP: json.dumps(groups), GROUP_NAME: group}
    if policy:
        annotations[POLICY] = policy
    return [pod(f"{app}-{i}", ns, cpu, "128Mi", labels={"applicationId": app}, annotations=annotations)
            for i in range(count)]


def pods_of(kube, ns: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in kube.pods(ns)}


def placeholders(kube, ns: str) -> dict[str, dict]:
    return {n: p for n, p in pods_of(kube, ns).items() if (p["metadata"].get("annotations") or {}).get(PLACEHOLDER)}


def gang_actions(kube, ns: str) -> list[str]:
    return [e["action"] for e in kube.events(ns) if e["reason"] == "GangScheduling"]


def scheduled_on(kube, ns: str) -> dict[str, list[str]]:
    """pod name -> the nodes its Scheduled events name (placeholders' too, after they are gone)."""
    out: dict[str, list[str]] = {}
    for e in kube.events(ns):
        if e["reason"] == "Scheduled":
            out.setdefault(e["regarding"]["name"], []).append(e["note"].rsplit(" ", 1)[1])
    return out


def state(c: ShimCluster, ns: str, app: str) -> str:
    """What a failed wait shows: the pods, Korral's view of the app, the logs."""
    pods = [(n, p["spec"].get("nodeName"), p["status"].get("phase")) for n, p in pods_of(c.kube, ns).items()]
    body = c.korral_app(app)
    allocs = [(a["allocationTags"].get("kubernetes.io/meta/podName"), a["nodeId"], a["placeholder"],
               a["placeholderUsed"]) for a in body.get("allocations") or []]
    asks = [(a["allocationTags"].get("kubernetes.io/meta/podName"), a.get("placeholder"))
            for a in body.get("requests") or []]
    return (f"pods: {pods}\nKorral's app {body.get('applicationState')}: allocations {allocs}, asks {asks}, "
            f"placeholders {body.get('placeholderData')}\n{c.logs()}")


def test_a_gang_gets_its_placeholders_and_its_pods_take_their_places(gang_cluster):
    c, kube = gang_cluster, gang_cluster.kube
    start(c, *(node(f"n{i}", "4", "8Gi") for i in range(3)))
    kube.create("/api/v1/namespaces", namespace("ml"))
    # the placeholders' first deletions fail: the shim retries until they are gone
    kube.request("POST", FAULTS_PATH, {"method": "DELETE", "pathPrefix": "/api/v1/namespaces/ml/pods/tg-",
                                       "status": 503, "count": 4})
    gang = members("train", "ml", 4, "900m", min_member=4, min_cpu="1")
    for p in gang:
        kube.create("/api/v1/namespaces/ml/pods", p)
    real = {p["metadata"]["name"] for p in gang}
    wait_until(gang_done(kube, "ml", real), 90, "every member bound and every placeholder gone",
               lambda: state(c, "ml", "train"))

    events = pod_events(kube)
    on = scheduled_on(kube, "ml")
    made = sorted(n for n in on if n.startswith("tg-"))
    assert len(made) == 4, on  # four placeholders, each placed once
    assert all(n.startswith("tg-train-workers-") and len(n) == len("tg-train-workers-") + 10 for n in made)
    # the members run where the placeholders were, each bound once
    assert Counter(on[n][0] for n in made) == Counter(pods_of(kube, "ml")[n]["spec"]["nodeName"] for n in real)
    for n in real:
        assert on[n] == [pods_of(kube, "ml")[n]["spec"]["nodeName"]], (n, on[n])
        assert "PodBindFailure" not in events[f"ml/{n}"]
    # events are posted by the shim's recorder after what they tell: waited for, not read at once
    wanted = {"CreatingPlaceholders", "PlaceholderAllocated", "GangReservationComplete", "TaskGroupMatch"}
    wait_until(lambda: wanted <= set(gang_actions(kube, "ml")), 30, f"the gang's events {sorted(wanted)}",
               lambda: gang_actions(kube, "ml"))
    assert not placement_problems(kube), placement_problems(kube)
    app = c.korral_app("train")
    assert [(d["taskGroupName"], d["count"], d["replaced"]) for d in app["placeholderData"]] == [("workers", 4, 4)]


def test_a_gang_that_cannot_fit_times_out_soft_runs_its_pods_hard_fails_them(gang_cluster):
    c, kube = gang_cluster, gang_cluster.kube
    start(c, node("n0", "4", "8Gi"), node("n1", "4", "8Gi"))
    for ns in ("soft", "hard"):
        kube.create("/api/v1/namespaces", namespace(ns))
    # three placeholders of 3 cpu: only two fit on the two 4-cpu nodes
    for p in members("soft-gang", "soft", 2, "500m", min_member=3, min_cpu="3", policy="placeholderTimeoutInSeconds=3"):
        kube.create("/api/v1/namespaces/soft/pods", p)

    wait_until(gang_done(kube, "soft", {"soft-gang-0", "soft-gang-1"}), 90,
               "the soft gang's placeholders gone and its pods bound as ordinary pods", lambda: state(c, "soft", "soft-gang"))
    wait_until(lambda: {"GangSchedulingFailed", "PlaceholderTimeOut"} <= set(gang_actions(kube, "soft")), 30,
               "the soft gang's timeout events", lambda: gang_actions(kube, "soft"))
    assert len([n for n in scheduled_on(kube, "soft") if n.startswith("tg-")]) == 2

    # failing the members' pods: the first status patches fail, and are retried
    kube.request("POST", FAULTS_PATH, {"method": "PATCH", "pathPrefix": "/api/v1/namespaces/hard/pods/hard-gang-",
                                       "status": 500, "count": 3})
    for p in members("hard-gang", "hard", 2, "500m", min_member=3, min_cpu="3",
                     policy="placeholderTimeoutInSeconds=3 gangSchedulingStyle=Hard"):
        kube.create("/api/v1/namespaces/hard/pods", p)

    def hard_done():
        now = pods_of(kube, "hard")
        return not placeholders(kube, "hard") and len(now) == 2 and all(
            p["status"].get("phase") == "Failed" for p in now.values())
    wait_until(hard_done, 90, "the hard gang's placeholders gone and its pods failed", c.logs)
    for p in pods_of(kube, "hard").values():
        assert p["status"]["reason"] == "ResourceReservationTimeout" and not p["spec"].get("nodeName")
    hard_names = [f"hard/{n}" for n in pods_of(kube, "hard")]
    wait_until(lambda: all("ApplicationFailed" in pod_events(kube).get(n, ()) for n in hard_names), 30,
               "ApplicationFailed on each hard member", lambda: {n: pod_events(kube).get(n) for n in hard_names})
    assert not placement_problems(kube), placement_problems(kube)
    for n, nodes in scheduled_on(kube, "soft").items():
        assert len(nodes) == 1, (n, nodes)


def test_malformed_gang_annotations_get_events_naming_pod_and_field_and_the_pods_still_run(gang_cluster):
    c, kube = gang_cluster, gang_cluster.kube
    kube.create("/api/v1/nodes", node("n0", "8", "8Gi"))
    c.start_shim()
    kube.create("/api/v1/namespaces", namespace("odd"))
    bad = [{"name": "workers", "minMember": 0, "minResource": {"cpu": "1"}}]
    pods = [pod("zero", "odd", "100m", "64Mi", labels={"applicationId": "zero"},
                annotations={GROUP: json.dumps(bad), GROUP_NAME: "workers"}),
            pod("garbled", "odd", "100m", "64Mi", labels={"applicationId": "garbled"},
                annotations={GROUP: "[{not json", POLICY: "placeholderTimeoutInSeconds=ten"}),
            *members("known", "odd", 1, "100m", min_member=1, min_cpu="200m", group="nosuch")]
    for p in pods:
        kube.create("/api/v1/namespaces/odd/pods", p)
    wait_until(lambda: all(p["spec"].get("nodeName") for p in pods_of(kube, "odd").values()
                           if not p["metadata"]["name"].startswith("tg-")), 60,
               "the pods with malformed gang annotations bound as ordinary pods", c.logs)
    def warnings() -> dict[str, list[str]]:
        notes: dict[str, list[str]] = {}
        for e in kube.events("odd"):
            if e["type"] == "Warning":
                notes.setdefault(e["regarding"]["name"], []).append(e["note"])
        return notes

    def named(notes, pod_name, *words) -> bool:
        return any(all(w in n for w in words) for n in notes.get(pod_name, ()))

    wait_until(lambda: (notes := warnings()) and named(notes, "zero", GROUP, "minMember")
               and named(notes, "garbled", GROUP, "not valid JSON")
               and named(notes, "garbled", "placeholderTimeoutInSeconds", "'ten'")
               and named(notes, "known-0", GROUP_NAME, "nosuch"), 30,
               "a warning naming each pod's bad field", warnings)
    assert not [n for n in pods_of(kube, "odd") if n.startswith("tg-zero") or n.startswith("tg-garbled")]


def test_a_restarted_shim_reattaches_the_placeholders_and_makes_no_second_set(gang_cluster):
    c, kube = gang_cluster, gang_cluster.kube
    kube.create("/api/v1/nodes", node("n0", "4", "8Gi"))
    c.start_shim()
    kube.create("/api/v1/namespaces", namespace("ml"))
    gang = members("big", "ml", 3, "1", min_member=3, min_cpu="2", policy="placeholderTimeoutInSeconds=600")
    for p in gang:
        kube.create("/api/v1/namespaces/ml/pods", p)
    # two placeholders fit on n0; the third waits for room
    wait_until(lambda: len(placeholders(kube, "ml")) == 3 and
               len([p for p in placeholders(kube, "ml").values() if p["spec"].get("nodeName")]) == 2, 60,
               "three placeholders, two placed", c.logs)
    first = placeholders(kube, "ml")
    for ph in first.values():  # made as YuniKorn makes them, the image from the configmap
        (container,) = ph["spec"]["containers"]
        assert container["image"] == IMAGE and ph["spec"]["securityContext"]["runAsNonRoot"] is True
        assert [o["name"] for o in ph["metadata"]["ownerReferences"]] == ["big-0"]
        assert ph["metadata"]["labels"]["yunikorn.apache.org/app-id"] == "big"
    c.stop_shim(kill=True)
    c.start_shim()
    kube.create("/api/v1/nodes", node("n1", "4", "8Gi"))
    real = {p["metadata"]["name"] for p in gang}
    wait_until(gang_done(kube, "ml", real), 90, "the gang complete after the restart", lambda: state(c, "ml", "big"))
    on = scheduled_on(kube, "ml")
    assert {n for n in on if n.startswith("tg-")} == set(first)  # no second set
    for n in real:
        assert len(on[n]) == 1, (n, on[n])
    assert not placement_problems(kube), placement_problems(kube)
