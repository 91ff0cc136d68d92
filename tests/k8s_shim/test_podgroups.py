"""Kubernetes 1.36's PodGroups read as Korral's gangs (``k8s_shim.translate.podgroups``), the
gang-topology key of a task group (``k8s_shim.translate.gang``), and the shim's part
(``k8s_shim.writes.podgroups``) with the scheduler and API server replaced (``test_shim``'s ``World``)."""

from __future__ import annotations

import json

from common.constants import TAG_APP_TASK_GROUPS, TAG_GANG_TOPOLOGY
from k8s_shim.translate.gang import ANNOTATION_POLICY, ANNOTATION_TASK_GROUPS, read_gang
from k8s_shim.translate.model import App, add_application
from k8s_shim.translate.podgroups import app_id_of, join, read_pod_group
from k8s_shim.translate.pods import PodRules, read_pod
from k8s_shim.writes.placeholders import PlaceholderSettings, app_gang
from tests.k8s_shim.test_gang import GangKube, gang_notes, show_created, wait_for
from tests.k8s_shim.test_shim import World, raw_pod, registered_node, run, sent, turn

RACK = "topology.kubernetes.io/rack"


def group(name="train", policy=None, topology=None, conditions=None) -> dict:
    spec: dict = {"schedulingPolicy": policy if policy is not None else {"gang": {"minCount": 4}}}
    if topology is not None:
        spec["schedulingConstraints"] = {"topology": topology}
    raw = {"metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"}, "spec": spec}
    if conditions:
        raw["status"] = {"conditions": conditions}
    return raw


def member(name: str, pg: str = "train", annotations: dict | None = None, cpu: str = "500m") -> dict:
    raw = raw_pod(name, cpu=cpu, schedulingGroup={"podGroupName": pg})
    raw["metadata"]["annotations"] = annotations or {}
    return raw


# ---------------------------------------------------------------------- reading
def test_a_gang_podgroup_is_read_with_its_min_count_and_topology():
    g = read_pod_group(group(topology=[{"key": RACK}]))
    assert (g.key, g.min_count, g.problems) == ("ns/train", 4, ())
    assert json.loads(g.topology) == {"level": RACK, "mode": "required"}
    basic = read_pod_group(group(policy={"basic": {}}))
    assert (basic.min_count, basic.topology) == (0, "")


def test_a_podgroup_topology_that_cannot_be_used_is_a_problem_naming_the_field():
    g = read_pod_group(group(topology=[{"key": "not a key!"}]))
    assert g.topology == ""
    (field, message), = g.problems
    assert field == "spec.schedulingConstraints.topology[0].key" and "not a key!" in message


def test_a_pod_names_its_podgroup():
    assert read_pod(member("w0"), PodRules()).pod_group == "train"
    assert read_pod(raw_pod("p"), PodRules()).pod_group == ""


def test_a_member_joins_the_podgroups_gang_sized_by_its_own_requests():
    spec = read_pod(member("w0", annotations={ANNOTATION_POLICY: "placeholderTimeoutInSeconds=60 "
                                                                 "gangSchedulingStyle=Hard"}), PodRules())
    join(spec, read_pod_group(group(topology=[{"key": RACK}])))
    assert spec.app_id == app_id_of("ns", "train") == "ns.train"
    (tg,) = spec.gang.groups
    assert (tg.name, tg.min_member, tg.min_resource) == ("train", 4, {"cpu": "500m", "memory": str(64 * 2**20)})
    assert tg.size == {"vcore": 500, "memory": 64 * 2**20, "pods": 1}
    assert (spec.gang.group_name, spec.gang.timeout_seconds, spec.gang.style) == ("train", 60, "Hard")
    gang = app_gang(spec)
    request = add_application(App(spec.app_id, "ns", "root.ns", "nobody", (), {}, gang=gang), False)
    assert json.loads(request.tags[TAG_GANG_TOPOLOGY]) == {"level": RACK, "mode": "required"}
    assert json.loads(request.tags[TAG_APP_TASK_GROUPS])[0]["minMember"] == 4
    assert request.placeholderAsk.resources["vcore"].value == 2000


def test_a_basic_podgroup_leaves_the_pod_as_it_is():
    spec = read_pod(member("w0"), PodRules())
    before = (spec.app_id, spec.gang)
    join(spec, read_pod_group(group(policy={"basic": {}})))
    assert (spec.app_id, spec.gang) == before


# ---------------------------------------------------------------------- the task-group key
def tg(topology=None, name="workers") -> dict:
    out = {"name": name, "minMember": 2, "minResource": {"cpu": "1"}}
    if topology is not None:
        out["topology"] = topology
    return out


def test_a_task_group_names_its_topology_mode_required_unless_told():
    g = read_gang({ANNOTATION_TASK_GROUPS: json.dumps([tg({"level": "rack"})])})
    assert json.loads(g.topology) == {"level": "rack", "mode": "required"} and g.problems == ()
    g = read_gang({ANNOTATION_TASK_GROUPS: json.dumps([tg({"level": RACK, "mode": "preferred"})])})
    assert json.loads(g.topology) == {"level": RACK, "mode": "preferred"}
    assert read_gang({ANNOTATION_TASK_GROUPS: json.dumps([tg()])}).topology == ""


def test_a_bad_topology_is_not_sent_and_its_problem_names_the_field_the_groups_still_count():
    for value, field in (({"level": "rack", "mode": "always"}, "[0].topology.mode"),
                         ({"mode": "required"}, "[0].topology.level"),
                         ("rack", "[0].topology")):
        g = read_gang({ANNOTATION_TASK_GROUPS: json.dumps([tg(value)])})
        assert g.topology == "" and len(g.groups) == 1, value
        (where, _), = g.problems
        assert where == f"metadata.annotations[{ANNOTATION_TASK_GROUPS}]{field}"


def test_groups_naming_different_topologies_use_the_first_and_say_so():
    g = read_gang({ANNOTATION_TASK_GROUPS: json.dumps([tg({"level": "rack"}), tg({"level": "zone"}, "ps")])})
    assert json.loads(g.topology)["level"] == "rack"
    assert "workers" in g.topology_conflict and "ps" in g.topology_conflict and "zone" in g.topology_conflict


# ---------------------------------------------------------------------- the shim
class PgKube(GangKube):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str, dict]] = []

    async def patch_pod_group_status(self, namespace, name, patch):
        self.sent.append(("PATCH", f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups/{name}/status",
                          patch))


def pg_world() -> World:
    w = World(PgKube(), placeholders=PlaceholderSettings(retry_cap=0.01, create_deadline=1.0))
    w.shim.pg_served = True
    return w


def test_a_pod_waits_for_its_missing_podgroup_then_joins_its_gang():
    async def body():
        w = pg_world()
        await registered_node(w, "n1")
        w.pod(member("w0"))
        await turn()
        assert "uid-w0" not in w.shim.tasks and sent(w.api.take(), "apps") == []
        (name, patch), = w.kube.patches
        cond = patch["status"]["conditions"][0]
        assert (name, cond["reason"], cond["status"]) == ("w0", "SchedulingGated", "False")
        assert 'PodGroup "ns/train"' in cond["message"]
        w.pod(member("w0"))  # an update while it waits: told once
        await turn()
        assert len(w.kube.patches) == 1
        assert [n for n in gang_notes(w) if 'PodGroup "ns/train"' in n[3]]

        w.shim.pod_group_changed(None, read_pod_group(group(topology=[{"key": RACK}])))
        await turn()
        (app,) = sent(w.api.take(), "apps")
        assert app.applicationID == "ns.train" and json.loads(app.tags[TAG_GANG_TOPOLOGY])["level"] == RACK
        await w.accept_apps("ns.train")
        await wait_for(lambda: len(w.kube.created) == 4)  # the gang's placeholders
        await wait_for(lambda: any(p.endswith("/podgroups/train/status") for _, p, _ in w.kube.sent))
        (_, path, body_), = w.kube.sent
        (cond,) = body_["status"]["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodGroupScheduled", "False", "Unschedulable")
        assert path == "/apis/scheduling.k8s.io/v1alpha2/namespaces/ns/podgroups/train/status"
    run(body())


def test_a_pod_gone_while_it_waits_is_forgotten():
    async def body():
        w = pg_world()
        w.pod(member("w0"))
        await turn()
        w.pod_gone("uid-w0")
        assert w.shim.pg_waiting == {}
        w.shim.pod_group_changed(None, read_pod_group(group()))
        await turn()
        assert "uid-w0" not in w.shim.tasks
    run(body())


def test_without_the_api_group_the_pods_podgroup_is_not_read():
    async def body():
        w = pg_world()
        w.shim.pg_served = False
        w.pod(member("w0"))
        await turn()
        assert "uid-w0" in w.shim.tasks and w.shim.tasks["uid-w0"].spec.app_id == "app-1"
    run(body())


def test_the_podgroup_is_scheduled_once_its_placeholders_are_placed():
    async def body():
        w = pg_world()
        await registered_node(w, "n1")
        w.shim.pod_group_changed(None, read_pod_group(group(policy={"gang": {"minCount": 2}})))
        for i in range(2):
            w.pod(member(f"w{i}"))
        await turn()
        w.api.take()
        await w.accept_apps("ns.train")
        await wait_for(lambda: len(w.kube.created) == 2)
        uids = show_created(w)
        await turn()
        for uid in uids:
            await w.allocate(uid, "n1", app="ns.train")
        await wait_for(lambda: any(b["status"]["conditions"][0]["status"] == "True" for _, _, b in w.kube.sent))
        cond = w.kube.sent[-1][2]["status"]["conditions"][0]
        assert (cond["reason"], cond["status"]) == ("Scheduled", "True")
    run(body())


def test_a_task_groups_topology_reaches_the_application_and_bad_ones_are_told_on_the_pod():
    async def body():
        w = pg_world()
        good = raw_pod("a0", app="good")
        good["metadata"]["annotations"] = {ANNOTATION_TASK_GROUPS: json.dumps([tg({"level": "rack"}), tg(
            {"level": "zone"}, "ps")]), "yunikorn.apache.org/task-group-name": "workers"}
        bad = raw_pod("b0", app="bad")
        bad["metadata"]["annotations"] = {ANNOTATION_TASK_GROUPS: json.dumps([tg({"level": "rack", "mode": "always"})])}
        w.pod(good)
        w.pod(bad)
        await turn()
        apps = {a.applicationID: a for a in sent(w.api.take(), "apps")}
        assert json.loads(apps["good"].tags[TAG_GANG_TOPOLOGY]) == {"level": "rack", "mode": "required"}
        assert TAG_GANG_TOPOLOGY not in apps["bad"].tags
        notes = gang_notes(w)
        invalid = [n for n in notes if n[2] == "GangTopologyInvalid"]
        assert [(n[0], n[4]) for n in invalid] == [("b0", "Warning")]
        assert f"[{ANNOTATION_TASK_GROUPS}][0].topology.mode" in invalid[0][3]
        conflict = [n for n in notes if n[2] == "GangTopologyConflict"]
        assert [(n[0], n[4]) for n in conflict] == [("a0", "Warning")] and "zone" in conflict[0][3]
    run(body())


def test_where_the_core_placed_a_gang_is_told_on_its_pod():
    from common import si_pb2

    async def body():
        w = pg_world()
        w.shim.pod_group_changed(None, read_pod_group(group(topology=[{"key": RACK}])))
        w.pod(member("w0"))
        await turn()
        gang_notes(w)
        placed = "gang of application ns.train placed in rack r1 (required topology.kubernetes.io/rack)"
        await w.shim.send_event([si_pb2.EventRecord(type=si_pb2.EventRecord.APP, objectID="ns.train",
                                                    reason="GangTopologyPlaced", message=placed),
                                 si_pb2.EventRecord(type=si_pb2.EventRecord.APP, objectID="ns.train",
                                                    reason="AppAdded", message="not told")])
        await turn()
        assert [n for n in gang_notes(w) if n[1] == "GangScheduling"] == [
            ("w0", "GangScheduling", "GangTopologyPlaced", placed, "Normal")]
    run(body())
