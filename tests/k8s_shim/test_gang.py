"""Gang scheduling in the shim: the annotations read as YuniKorn's shim reads them
(``k8s_shim.translate.gang``), the placeholder pods it makes (``k8s_shim.writes.placeholders``), and the
shim's part with the scheduler and the API server at the edge replaced (``tests.k8s_shim.test_shim``'s
``World``): what goes to the core, which pods are made, bound, deleted and failed."""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest

from common import si_v18_pb2 as si
from common.constants import TAG_APP_TASK_GROUPS, TAG_SCHEDULING_POLICY_PARAMETERS
from k8s_shim.translate.gang import (ANNOTATION_PLACEHOLDER, ANNOTATION_POLICY, ANNOTATION_TASK_GROUP_NAME,
                              ANNOTATION_TASK_GROUPS, parse_task_groups, placeholder_ask, placeholder_name, read_gang)
from k8s_shim.kube.kubeclient import ApiError
from k8s_shim.translate.model import App
from k8s_shim.writes.placeholders import PlaceholderSettings, app_gang, placeholder_pod
from k8s_shim.translate.pods import PodRules, read_pod
from tests.k8s_shim.test_shim import FakeKube, World, raw_node, raw_pod, registered_node, run, sent, turn

GROUPS = [{"name": "workers", "minMember": 2, "minResource": {"cpu": "500m", "memory": "256Mi"},
           "nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
           "labels": {"team": "ml"}}]


def gang_pod(name, groups=GROUPS, group="workers", policy="", app="gang-1", **kw):
    raw = raw_pod(name, app=app, cpu="500m", **kw)
    annotations = {}
    if groups is not None:
        annotations[ANNOTATION_TASK_GROUPS] = groups if isinstance(groups, str) else json.dumps(groups)
    if group:
        annotations[ANNOTATION_TASK_GROUP_NAME] = group
    if policy:
        annotations[ANNOTATION_POLICY] = policy
    raw["metadata"]["annotations"] = annotations
    raw["spec"]["containers"][0]["resources"]["requests"]["memory"] = "256Mi"
    return raw


# ---------------------------------------------------------------------- reading the annotations
def test_task_groups_are_read_with_their_placement_terms_and_size():
    g = read_gang({ANNOTATION_TASK_GROUPS: json.dumps(GROUPS), ANNOTATION_TASK_GROUP_NAME: "workers",
                   ANNOTATION_POLICY: "placeholderTimeoutInSeconds=60 gangSchedulingStyle=Hard"})
    assert g.problems == ()
    (workers,) = g.groups
    assert (workers.name, workers.min_member, workers.node_selector) == ("workers", 2, {"pool": "gpu"})
    assert workers.size == {"vcore": 500, "memory": 256 * 2**20, "pods": 1}
    assert (g.group_name, g.timeout_seconds, g.style, g.placeholder) == ("workers", 60, "Hard", False)
    assert placeholder_ask(g.groups) == {"vcore": 1000, "memory": 512 * 2**20, "pods": 2}


def test_keys_match_without_regard_to_case_as_gos_json_decoder():
    (g,) = parse_task_groups('[{"Name": "a", "MINMEMBER": 1, "minresource": {"cpu": 1}}]')
    assert (g.name, g.min_member, g.size["vcore"]) == ("a", 1, 1000)


@pytest.mark.parametrize("groups, field", [
    ('[{"name": "a", "minMember": 0, "minResource": {"cpu": "1"}}]', "[0].minMember"),
    ('[{"name": "a", "minResource": {"cpu": "1"}}]', "[0].minMember"),
    ('[{"name": "a", "minMember": -1, "minResource": {"cpu": "1"}}]', "[0].minMember"),
    ('[{"name": "a", "minMember": 1}]', "[0].minResource"),
    ('[{"minMember": 1, "minResource": {"cpu": "1"}}]', "[0].name"),
    ('[{"name": "a", "minMember": 1, "minResource": {"cpu": "lots"}}]', "[0].minResource.cpu"),
    ('[{"name": "a", "minMember": 1.5, "minResource": {"cpu": "1"}}]', "[0].minMember"),
    ('[{"name": "a", "minMember": 1, "minResource": {}, "tolerations": {}}]', "[0].tolerations"),
    ('{"name": "a"}', "not a JSON list"),
    ('[{"name": ', "not valid JSON"),
])
def test_a_malformed_task_groups_annotation_is_ignored_and_the_problem_names_the_field(groups, field):
    g = read_gang({ANNOTATION_TASK_GROUPS: groups})
    assert g.groups == () and g.groups_raw == groups
    (where, message), = g.problems
    assert where == f"metadata.annotations[{ANNOTATION_TASK_GROUPS}]"
    assert field in message and "scheduled without a gang" in message


@pytest.mark.parametrize("policy, timeout, style, field", [
    ("placeholderTimeoutInSeconds=abc", 0, "Soft", "placeholderTimeoutInSeconds"),
    ("gangSchedulingStyle=hard", 0, "Soft", "gangSchedulingStyle"),
    ("placeholderTimeoutInSeconds=30 junk", 30, "Soft", ANNOTATION_POLICY),
    ("placeholderTimeoutInSeconds=30  gangSchedulingStyle=Hard", 30, "Hard", None),
])
def test_policy_parameters_fall_back_to_yunikorns_defaults_naming_the_field(policy, timeout, style, field):
    g = read_gang({ANNOTATION_POLICY: policy})
    assert (g.timeout_seconds, g.style) == (timeout, style)
    if field is None:
        assert g.problems == ()
    else:
        (where, _), = g.problems
        assert field in where


def test_gang_scheduling_disabled_reads_only_the_placeholder_flag():
    annotations = {ANNOTATION_TASK_GROUPS: json.dumps(GROUPS), ANNOTATION_TASK_GROUP_NAME: "workers"}
    assert read_gang(annotations, enabled=False) is None
    g = read_gang({**annotations, ANNOTATION_PLACEHOLDER: "true"}, enabled=False)
    assert g.placeholder and g.groups == () and g.group_name == ""
    pod = read_pod(gang_pod("p"), PodRules(gang_scheduling=False))
    assert pod.gang is None


def test_placeholder_names_are_upstreams_shortened_form():
    rng = random.Random(1)
    name = placeholder_name("a" * 40, "g" * 30, rng)
    assert re.fullmatch(r"tg-a{28}-g{20}-[a-z0-9]{10}", name) and len(name) == 63
    assert re.fullmatch(r"tg-spark-1-driver-[a-z0-9]{10}", placeholder_name("spark-1", "driver", rng))


def test_a_placeholder_pod_is_hardened_owned_by_the_originator_and_carries_its_groups_terms():
    spec = read_pod(gang_pod("driver", policy="gangSchedulingStyle=Hard", priorityClassName="high"), PodRules())
    app = App("gang-1", "ns", "root.ml", "u", (), {}, gang=app_gang(spec))
    settings = PlaceholderSettings(image="example/pause:1", run_as_user=1000, fs_group=2000)
    pod = placeholder_pod("tg-gang-1-workers-abc", app, app.gang.groups[0], settings, "yunikorn", ["regcred"])
    meta, body = pod["metadata"], pod["spec"]
    assert meta["labels"] == {"team": "ml", "yunikorn.apache.org/app-id": "gang-1",
                              "yunikorn.apache.org/queue": "root.ml"}
    assert meta["annotations"][ANNOTATION_PLACEHOLDER] == "true"
    assert meta["annotations"][ANNOTATION_TASK_GROUP_NAME] == "workers"
    assert meta["annotations"][ANNOTATION_POLICY] == "gangSchedulingStyle=Hard"
    assert json.loads(meta["annotations"][ANNOTATION_TASK_GROUPS]) == GROUPS
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": "uid-driver",
                                        "controller": False, "blockOwnerDeletion": True}]
    assert body["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                       "runAsUser": 1000, "fsGroup": 2000}
    (c,) = body["containers"]
    assert (c["name"], c["image"], c["imagePullPolicy"]) == ("pause", "example/pause:1", "IfNotPresent")
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi"}}
    assert c["securityContext"] == {"privileged": False, "capabilities": {"drop": ["ALL"]},
                                    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True}
    assert (body["restartPolicy"], body["schedulerName"], body["terminationGracePeriodSeconds"]) == \
        ("Never", "yunikorn", 0)
    assert body["nodeSelector"] == {"pool": "gpu"} and body["tolerations"] == GROUPS[0]["tolerations"]
    assert body["imagePullSecrets"] == [{"name": "regcred"}] and body["priorityClassName"] == "high"
    # the placeholder, read back, is a placeholder ask of its group, as big as the group's minResource
    back = read_pod({**pod, "metadata": {**meta, "uid": "ph-1"}}, PodRules())
    assert back.gang.placeholder and back.gang.group_name == "workers" and back.app_id == "gang-1"
    assert back.resource == app.gang.groups[0].size
    assert app_gang(back).owners == tuple(meta["ownerReferences"])


# ---------------------------------------------------------------------- the shim's part
class GangKube(FakeKube):
    """FakeKube that also takes pod creations (recorded; ``fail_creates`` errors answered first)
    and can fail deletions and status patches a number of times."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict] = []
        self.fail_creates: list[ApiError] = []
        self.fail_deletes = 0
        self.fail_patches = 0

    async def create_pod(self, namespace, body):
        if self.fail_creates:
            raise self.fail_creates.pop(0)
        self.created.append(body)
        return body

    async def delete(self, path, body=None):
        if self.fail_deletes:
            self.fail_deletes -= 1
            raise ApiError("DELETE", path, 503, "ServiceUnavailable")
        await super().delete(path, body)

    async def patch_status(self, namespace, name, patch):
        if self.fail_patches:
            self.fail_patches -= 1
            raise ApiError("PATCH", name, 500, "InternalError")
        await super().patch_status(namespace, name, patch)


def gang_world() -> World:
    return World(GangKube(), placeholders=PlaceholderSettings(retry_cap=0.01, create_deadline=1.0))


def show_created(w: World) -> list[str]:
    """The placeholders created so far appear through the informer (uids ph-<n>); their uids."""
    uids = []
    for i, body in enumerate(list(w.kube.created)):
        uid = f"ph-{body['metadata']['name']}"
        if uid in w.pods:
            continue
        w.pod({**body, "metadata": {**body["metadata"], "uid": uid, "creationTimestamp": "2026-11-27T08:00:00Z"},
               "status": {"phase": "Pending"}})
        uids.append(uid)
    return uids


def gang_notes(w: World) -> list[tuple[str, str, str]]:
    out = []
    while w.events.queue:
        _, e = w.events.queue.popleft()
        out.append((e["regarding"]["name"], e["reason"], e["action"], e["note"], e["type"]))
    return out


async def started_gang(w: World, members=2, policy="placeholderTimeoutInSeconds=30 gangSchedulingStyle=Hard"):
    await registered_node(w, "n1")
    for i in range(members):
        w.pod(gang_pod(f"m{i}", policy=policy))
    await turn()
    (app,) = sent(w.api.take(), "apps")
    await w.accept_apps("gang-1")
    await wait_for(lambda: len(w.kube.created) == 2)
    return app


async def wait_for(cond, timeout=5.0):
    async def poll():
        while not cond():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), timeout)


def test_the_app_carries_its_gang_and_the_members_wait_until_every_placeholder_is_asked_for():
    async def body():
        w = gang_world()
        app = await started_gang(w)
        assert app.placeholderAsk.resources["vcore"].value == 1000
        assert app.placeholderAsk.resources["pods"].value == 2
        assert (app.executionTimeoutMilliSeconds, app.gangSchedulingStyle) == (30_000, "Hard")
        assert app.tags[TAG_SCHEDULING_POLICY_PARAMETERS] == "placeholderTimeoutInSeconds=30 gangSchedulingStyle=Hard"
        assert json.loads(app.tags[TAG_APP_TASK_GROUPS]) == GROUPS
        await turn()
        assert sent(w.api.take(), "allocations") == []  # the real members wait for the placeholders
        assert all(re.fullmatch(r"tg-gang-1-workers-[a-z0-9]{10}", b["metadata"]["name"]) for b in w.kube.created)
        show_created(w)
        await turn()
        asks = sent(w.api.take(), "allocations")
        assert [(a.placeholder, a.taskGroupName) for a in asks[:2]] == [(True, "workers")] * 2
        assert [(a.placeholder, a.taskGroupName) for a in asks[2:]] == [(False, "workers")] * 2
        notes = gang_notes(w)
        assert ("m0", "GangScheduling", "CreatingPlaceholders", "Application gang-1 creating placeholders",
                "Normal") in notes
        assert [n for n in notes if n[2] == "TaskGroupMatch"] and not [n for n in notes if n[4] == "Warning"]
    run(body())


def test_a_member_replaces_a_placeholder_and_is_bound_once_the_placeholder_is_gone():
    async def body():
        w = gang_world()
        await started_gang(w)
        ph1, ph2 = show_created(w)
        await turn()
        w.api.take()
        for ph in (ph1, ph2):
            await w.allocate(ph, "n1", app="gang-1")
        await wait_for(lambda: len(w.kube.binds) == 2)
        assert sorted(n for n, _ in w.kube.binds) == sorted(w.pods[p].spec.name for p in (ph1, ph2))
        notes = gang_notes(w)
        assert [n[2] for n in notes if n[1] == "GangScheduling"].count("GangReservationComplete") == 1
        # the core swaps ph1 for m0 in one response: m0 waits for ph1's pod to go
        await w.shim.update_allocation(si.AllocationResponse(
            new=[si.Allocation(allocationKey="uid-m0", applicationID="gang-1", nodeID="n1", taskGroupName="workers")],
            released=[si.AllocationRelease(applicationID="gang-1", allocationKey=ph1,
                                           terminationType=si.PLACEHOLDER_REPLACED,
                                           message="replacing allocationKey: uid-m0")]))
        await turn()
        assert w.kube.deletes == [f"/api/v1/namespaces/ns/pods/{w.pods[ph1].spec.name}"]
        assert ("m0", "n1") not in w.kube.binds
        confirms = [r for r in sent(w.api.take(), "releases") if r.terminationType == si.PLACEHOLDER_REPLACED]
        assert [r.allocationKey for r in confirms] == [ph1]
        w.pod_gone(ph1)
        await wait_for(lambda: ("m0", "n1") in w.kube.binds)
        assert w.kube.binds.count(("m0", "n1")) == 1
        assert sent(w.api.take(), "releases") == []  # the placeholder's end is no release of its own
    run(body())


def test_a_timed_out_placeholder_is_deleted_retrying_until_done_and_the_originator_told():
    async def body():
        w = gang_world()
        await started_gang(w)
        ph1, ph2 = show_created(w)
        await w.allocate(ph1, "n1", app="gang-1")
        await turn()
        w.kube.fail_deletes = 3
        await w.shim.update_allocation(si.AllocationResponse(released=[
            si.AllocationRelease(applicationID="gang-1", allocationKey=k, terminationType=si.TIMEOUT,
                                 message="releasing allocated placeholders on placeholder timeout") for k in (ph1, ph2)]))
        await wait_for(lambda: len(w.kube.deletes) == 2)
        assert sorted(w.kube.deletes) == sorted(f"/api/v1/namespaces/ns/pods/{w.pods[p].spec.name}" for p in (ph1, ph2))
        timeouts = [n for n in gang_notes(w) if n[2] == "PlaceholderTimeOut"]
        assert timeouts and timeouts[0][0] == "m0"
    run(body())


def test_a_hard_timeout_fails_the_waiting_members_but_not_a_running_one():
    async def body():
        w = gang_world()
        await started_gang(w, members=3)
        show_created(w)
        await turn()
        w.pod(gang_pod("m2", policy="gangSchedulingStyle=Hard", node="n1", phase="Running"))  # running already
        w.kube.fail_patches = 2
        await w.shim.update_allocation(si.AllocationResponse(released=[
            si.AllocationRelease(applicationID="gang-1", allocationKey=f"uid-m{i}", terminationType=si.TIMEOUT,
                                 message="releasing placeholders asks on placeholder timeout") for i in range(2)]))
        for state in ("Failing", "Failed"):
            await w.shim.update_application(si.ApplicationResponse(updated=[si.UpdatedApplication(
                applicationID="gang-1", state=state, message="ResourceReservationTimeout")]))
        await wait_for(lambda: len(w.kube.patches) == 2)
        assert sorted(n for n, _ in w.kube.patches) == ["m0", "m1"]
        assert all(p["status"] == {"phase": "Failed", "reason": "ResourceReservationTimeout",
                                   "message": "Scheduling has timed out due to insufficient resources"}
                   for _, p in w.kube.patches)
        notes = gang_notes(w)
        assert sorted(n[0] for n in notes if n[1] == "ApplicationFailed") == ["m0", "m1"]
        assert not [n for n in notes if n[1] == "TaskRejected"]
        await wait_for(lambda: len(w.kube.deletes) == 2)  # both placeholders cleaned up
    run(body())


def test_a_soft_timeout_says_the_app_resumes_as_an_ordinary_one():
    async def body():
        w = gang_world()
        await started_gang(w, policy="")
        show_created(w)
        await w.shim.update_application(si.ApplicationResponse(updated=[si.UpdatedApplication(
            applicationID="gang-1", state="Resuming", message="ResourceReservationTimeout")]))
        notes = gang_notes(w)
        assert ("m0", "GangScheduling", "GangSchedulingFailed",
                "Application gang-1 resuming as non-gang application (SOFT)", "Warning") in notes
        assert w.kube.patches == []
    run(body())


def test_placeholders_found_after_a_restart_are_reattached_not_made_again():
    async def body():
        w = gang_world()
        await registered_node(w, "n1")
        app = App("gang-1", "ns", "", "u", (), {}, gang=app_gang(read_pod(gang_pod("m0"), PodRules())))
        for i in range(2):
            body = placeholder_pod(f"tg-gang-1-workers-old{i}", app, app.gang.groups[0], PlaceholderSettings(),
                                   "yunikorn", [])
            w.pod({**body, "metadata": {**body["metadata"], "uid": f"old-{i}"}, "status": {"phase": "Pending"}})
        w.pod(gang_pod("m0"))
        await turn()
        await w.accept_apps("gang-1")
        await turn()
        asks = sent(w.api.take(), "allocations")
        assert w.kube.created == []
        keys = [a.allocationKey for a in asks]
        assert sorted(keys[:2]) == ["old-0", "old-1"] and keys[2:] == ["uid-m0"]  # the gang's placeholders first
        assert [a.placeholder for a in asks] == [True, True, False]
        assert not [n for n in gang_notes(w) if n[2] == "CreatingPlaceholders"]
    run(body())


def test_a_placeholder_the_api_refuses_makes_the_app_fall_back_to_ordinary_scheduling():
    async def body():
        w = gang_world()
        await registered_node(w, "n1")
        w.kube.fail_creates = [ApiError("POST", "/pods", 422, "Invalid", "spec.tolerations: Invalid value")]
        w.pod(gang_pod("m0"))
        await turn()
        await w.accept_apps("gang-1")
        await wait_for(lambda: [n for n in gang_notes(w) if n[2] == "PlaceholderCreateFailed"])
        await turn()
        asks = sent(w.api.take(), "allocations")
        assert [a.allocationKey for a in asks] == ["uid-m0"]
    run(body())


def test_bad_gang_input_gets_an_event_naming_the_pod_and_field_and_bound_pods_are_untouched():
    async def body():
        w = gang_world()
        await registered_node(w, "n1")
        w.pod(gang_pod("bad", groups='[{"name": "a", "minMember": 0, "minResource": {"cpu": "1"}}]', group="a",
                       app="bad-app"))
        w.pod(gang_pod("stray", group="nosuch", policy="placeholderTimeoutInSeconds=soon", app="gang-1"))
        w.pod(gang_pod("running", group="nosuch", app="gang-1", node="n1", phase="Running"))
        await turn()
        await w.accept_apps("bad-app", "gang-1")
        await turn()
        notes = gang_notes(w)
        warnings = {(n[0], n[3]) for n in notes if n[1] == "GangScheduling" and n[4] == "Warning"}
        assert any(pod == "bad" and f"metadata.annotations[{ANNOTATION_TASK_GROUPS}]" in text and "minMember" in text
                   for pod, text in warnings)
        assert any(pod == "stray" and "placeholderTimeoutInSeconds" in text and "'soon'" in text
                   for pod, text in warnings)
        assert any(pod == "stray" and ANNOTATION_TASK_GROUP_NAME in text and "nosuch" in text for pod, text in warnings)
        asks = {a.allocationKey: a for a in sent(w.api.take(), "allocations")}
        assert asks["uid-bad"].taskGroupName == "" and asks["uid-stray"].taskGroupName == ""
        assert asks["uid-running"].nodeID == "n1"  # reported where it runs, nothing else done to it
        assert w.kube.patches == [] and w.kube.deletes == [] and w.kube.binds == []
        # the app of the malformed annotation has no gang: no placeholders, and it is asked for plainly
        assert all(b["metadata"]["labels"]["yunikorn.apache.org/app-id"] == "gang-1" for b in w.kube.created)
    run(body())


def test_members_wait_while_a_placeholder_waits_for_its_node_to_be_registered():
    """After a restart a placed placeholder is reported only once its node is registered: a member
    asked for before would be placed as an ordinary pod instead of taking the placeholder's place."""
    async def body():
        w = gang_world()
        app = App("gang-1", "ns", "", "u", (), {}, gang=app_gang(read_pod(gang_pod("m0"), PodRules())))
        ph = placeholder_pod("tg-gang-1-workers-old", app, app.gang.groups[0], PlaceholderSettings(), "yunikorn", [])
        w.pod({**ph, "metadata": {**ph["metadata"], "uid": "old-0"}, "spec": {**ph["spec"], "nodeName": "n1"},
               "status": {"phase": "Running"}})
        ph2 = placeholder_pod("tg-gang-1-workers-ol2", app, app.gang.groups[0], PlaceholderSettings(), "yunikorn", [])
        w.pod({**ph2, "metadata": {**ph2["metadata"], "uid": "old-1"}, "status": {"phase": "Pending"}})
        w.pod(gang_pod("m0"))
        await turn()
        await w.accept_apps("gang-1")
        await turn()
        assert [a.allocationKey for a in sent(w.api.take(), "allocations")] == ["old-1"]  # m0 held
        assert w.shim.tasks["uid-m0"].hold.name == "GANG"
        w.node(raw_node("n1"))
        await turn()
        await w.accept_nodes("n1")
        await turn()
        allocs = sent(w.api.take(), "allocations")
        assert [(a.allocationKey, a.nodeID, a.placeholder) for a in allocs] == \
            [("old-0", "n1", True), ("uid-m0", "", False)]
    run(body())


def test_the_replay_after_a_lost_connection_sends_the_placeholders_before_their_members():
    async def body():
        w = gang_world()
        await started_gang(w)
        phs = show_created(w)
        await turn()
        w.api.take()
        snapshot = await w.shim.recoverable_state()
        keys = [a.allocationKey for a in snapshot.allocations]
        assert sorted(keys[:2]) == sorted(phs) and sorted(keys[2:]) == ["uid-m0", "uid-m1"]
    run(body())
