"""The shim's rules (``k8s_shim.shim``) with the scheduler and the API server at the edge
replaced: a recording ``SchedulerAPI`` stand-in and an API client that answers binds as told.
What goes to the core and to Kubernetes, and when: asks after the application's verdict, binding
and its failures, nodes drained until their pods are confirmed, cordon, adoption, foreign pods,
rejections, constraints, scheduling states, and the replay after a lost connection."""

from __future__ import annotations

import asyncio
import json

import pytest

from common import si_pb2, si_v18_pb2 as si
from common.constants import (APP_TAG_CREATE_FORCE, APP_TAG_NAMESPACE_RESOURCE_QUOTA, TAG_FOREIGN, TAG_NODE_AFFINITY,
                              TAG_NODE_REQUIREMENTS, TAG_UNSUPPORTED_CONSTRAINTS)
from si_client import ClientState
from k8s_shim.writes.events import EventRecorder
from k8s_shim.kube.kubeclient import ApiError
from k8s_shim.translate.namespaces import read_namespace
from k8s_shim.translate.nodes import read_node
from k8s_shim.translate.pods import PodRules, decoder
from k8s_shim.shim import Shim, ShimSettings
from k8s_shim.translate.volumes import NO_PROVISIONER, Claim, StorageClass
from tests.conftest import wait_until_async

RULES = PodRules()
OURS = decoder(RULES, keep=lambda node, phase, ours: ours and phase not in ("Succeeded", "Failed"))
OTHERS = decoder(RULES, keep=lambda node, phase, ours: bool(node) and not ours)


class FakeAPI:
    """What the shim sends, as the SchedulerAPI would take it."""

    def __init__(self) -> None:
        self.state = ClientState.RUNNING
        self.sent: list[tuple[str, object]] = []

    def update_allocation(self, req): self.sent.append(("allocation", req))
    def update_application(self, req): self.sent.append(("application", req))
    def update_node(self, req): self.sent.append(("node", req))

    def take(self) -> list[tuple[str, object]]:
        out, self.sent = self.sent, []
        return out


class FakeKube:
    """The API server's answers to the shim's writes: binds succeed unless ``refuse`` says otherwise."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str]] = []
        self.patches: list[tuple[str, dict]] = []
        self.deletes: list[str] = []
        self.refuse: dict[str, ApiError] = {}  # node -> the error binding there answers
        self.namespace_reads: list[str] = []
        self.selected: list[tuple[str, str]] = []
        self.prebound: list[tuple[str, str | None]] = []
        self.namespace_annotations: dict[str, str] = {}

    def submit_bind(self, namespace, name, uid, node, done):
        self.binds.append((name, node))
        self._answer(done, self.refuse.get(node))

    @staticmethod
    def _answer(done, error=None):
        asyncio.get_running_loop().call_soon(done, error)  # on a later turn, as a server answers

    async def get(self, path):
        assert path.startswith("/api/v1/namespaces/"), path
        name = path.rsplit("/", 1)[1]
        self.namespace_reads.append(name)
        return {"metadata": {"name": name, "annotations": self.namespace_annotations}}

    async def patch_status(self, namespace, name, patch):
        self.patches.append((name, patch))

    async def patch_claim(self, namespace, name, patch):
        node = patch["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
        self.selected.append((name, node))

    async def patch_volume(self, name, patch):
        self.prebound.append((name, patch["spec"]["claimRef"] and patch["spec"]["claimRef"]["name"]))

    async def delete(self, path, body=None):
        self.deletes.append(path)

    def submit_event(self, namespace, event, done):
        self._answer(done)

    def counters(self):
        return {}


def raw_pod(name, node="", app="app-1", scheduler="yunikorn", cpu="100m", phase="Pending", uid=None, **spec):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "labels": {"applicationId": app},
                         "creationTimestamp": "2026-11-27T08:00:00Z"},
            "spec": {"schedulerName": scheduler, "nodeName": node,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}], **spec},
            "status": {"phase": phase}}


def raw_node(name, cpu="4", unschedulable=False):
    return {"metadata": {"name": name, "uid": f"node-{name}", "labels": {"kubernetes.io/hostname": name}},
            "spec": {"unschedulable": unschedulable, "taints": []},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


class World:
    def __init__(self, kube=None, **settings) -> None:
        self.api, self.kube = FakeAPI(), kube if kube is not None else FakeKube()
        self.events = EventRecorder(self.kube, "yunikorn", "test", capacity=10_000)
        self.shim = Shim(self.kube, ShimSettings(retry_cap=0.05, avoid_seconds=60, **settings), "c1", self.events)
        self.shim.out.interval = 0.0  # every turn's messages flushed at its end, as turn() expects
        self.shim.api = self.api
        self.informed = self.shim  # what the informers call: the shim (or its pools, test_pools)
        self.pods: dict[str, object] = {}
        self.nodes: dict[str, object] = {}

    # the informers' side
    def pod(self, raw):
        old = self.pods.get(raw["metadata"]["uid"])
        new = OURS(raw, old)
        self.pods[raw["metadata"]["uid"]] = new
        self.informed.pod_changed(old, new)

    def pod_gone(self, uid):
        self.informed.pod_changed(self.pods.pop(uid), None)

    def node(self, raw):
        name = raw["metadata"]["name"]
        new = read_node(raw)
        self.informed.node_changed(self.nodes.get(name), new)
        self.nodes[name] = new

    def node_gone(self, name):
        self.informed.node_changed(self.nodes.pop(name), None)

    # the scheduler's side
    async def accept_apps(self, *ids):
        await self.shim.update_application(si.ApplicationResponse(accepted=[si.AcceptedApplication(applicationID=i)
                                                                            for i in ids]))

    async def accept_nodes(self, *ids):
        await self.shim.update_node(si.NodeResponse(accepted=[si.AcceptedNode(nodeID=i) for i in ids]))

    async def allocate(self, key, node, app="app-1"):
        await self.shim.update_allocation(si.AllocationResponse(
            new=[si.Allocation(allocationKey=key, applicationID=app, nodeID=node)]))

    def notes(self, reason=None):
        out = []
        while self.events.queue:
            _, event = self.events.queue.popleft()
            out.append((event["regarding"]["name"], event["reason"], event["note"]))
        return [n for n in out if reason is None or n[1] == reason]


def sent(items, kind):
    """The messages of one kind: apps (AddApplicationRequest), nodes (NodeInfo), asks/placed (Allocation),
    releases (AllocationRelease)."""
    out = []
    for stream, req in items:
        if kind == "apps" and stream == "application":
            out += list(req.new)
        elif kind == "nodes" and stream == "node":
            out += list(req.nodes)
        elif kind == "allocations" and stream == "allocation":
            out += list(req.allocations)
        elif kind == "releases" and stream == "allocation" and req.HasField("releases"):
            out += list(req.releases.allocationsToRelease)
    return out


async def turn():
    for _ in range(4):  # a namespace read, then the flush
        await asyncio.sleep(0)


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 20))


async def registered_node(w: World, name="n1", **kw):
    w.node(raw_node(name, **kw))
    await turn()
    await w.accept_nodes(name)
    await turn()
    w.api.take()


def test_asks_wait_for_the_applications_verdict_and_carry_the_pod_and_namespace():
    async def main():
        w = World()
        w.shim.namespace_changed(None, read_namespace({"metadata": {"name": "ns", "annotations": {
            "yunikorn.apache.org/namespace.quota": '{"cpu": "2"}'}}}))
        w.pod(raw_pod("p1"))
        await turn()
        out = w.api.take()
        [app] = sent(out, "apps")
        assert app.applicationID == "app-1" and app.tags["namespace"] == "ns" and app.ugi.user == "nobody"
        assert json.loads(app.tags[APP_TAG_NAMESPACE_RESOURCE_QUOTA]) == {"resources": {"vcore": {"value": 2000}}}
        assert app.tags[APP_TAG_CREATE_FORCE] == "false" and not sent(out, "allocations")
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert ask.allocationKey == "uid-p1" and not ask.nodeID and ask.resourcePerAlloc.resources["vcore"].value == 100
        assert ask.resourcePerAlloc.resources["pods"].value == 1 and ask.originator
        assert ask.preemptionPolicy.allowPreemptSelf and ask.preemptionPolicy.allowPreemptOther
        assert ("p1", "Scheduling", "ns/p1 is queued and waiting for allocation") in w.notes()
    run(main())


def test_an_application_whose_namespace_the_informer_has_not_shown_reads_it_first():
    async def main():
        w = World()
        w.kube.namespace_annotations = {"yunikorn.apache.org/namespace.maxApps": "2"}
        w.pod(raw_pod("p1"))
        w.pod(raw_pod("p2", app="app-2"))
        await turn()
        apps = sent(w.api.take(), "apps")
        assert w.kube.namespace_reads == ["ns"]  # once for the namespace
        assert [(a.applicationID, a.tags["namespace.resourcemaxapps"]) for a in apps] == [("app-1", "2"), ("app-2", "2")]
    run(main())


def test_an_allocation_is_bound_and_announced():
    async def main():
        w = World()
        await registered_node(w)
        w.pod(raw_pod("p1"))
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        await w.allocate("uid-p1", "n1")
        await wait_until_async(lambda: w.kube.binds == [("p1", "n1")], 5, "the bind")
        await wait_until_async(lambda: w.shim.tasks["uid-p1"].bound, 5, "the bind outcome")
        notes = w.notes()
        assert ("p1", "Scheduled", "Successfully assigned ns/p1 to node n1") in notes
        assert ("p1", "PodBindSuccessful", "Pod ns/p1 is successfully bound to node n1") in notes
        w.pod(raw_pod("p1", node="n1", phase="Running"))  # the informer shows the binding
        dump = json.loads(await w.shim.get_state_dump())
        assert dump["nodes"]["n1"]["assumed"] == {"vcore": 100, "memory": 64 << 20, "pods": 1}
        assert dump["tasks"] == {"placed": 1} and dump["applications"]["app-1"]["state"] == "Accepted"
        w.pod_gone("uid-p1")  # the pod ends
        await turn()
        [rel] = sent(w.api.take(), "releases")
        assert rel.allocationKey == "uid-p1" and rel.terminationType == si.STOPPED_BY_RM
        assert ("p1", "TaskCompleted", "Task ns/p1 is completed") in w.notes()
    run(main())


def test_a_refused_bind_releases_and_asks_again_without_that_node():
    async def main():
        w = World()
        await registered_node(w)
        w.kube.refuse["n1"] = ApiError("POST", "/binding", 403, "Forbidden", "admission webhook denied the binding")
        w.pod(raw_pod("p1"))
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        await w.allocate("uid-p1", "n1")
        await wait_until_async(lambda: len(sent(w.api.sent, "allocations")) == 1, 5, "the ask again")
        out = w.api.take()
        [rel] = sent(out, "releases")
        assert rel.allocationKey == "uid-p1" and "admission webhook denied" in rel.message
        [again] = sent(out, "allocations")
        assert not again.nodeID
        affinity = json.loads(again.allocationTags[TAG_NODE_AFFINITY])
        assert affinity == {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                                                     "values": ["n1"]}]}]}
        assert [n for n in w.notes("PodBindFailure")][0][2].startswith("bind pod to node failed, name: ns/p1")
        # a stale outcome of the refused attempt changes nothing; the next allocation binds
        del w.kube.refuse["n1"]
        await w.allocate("uid-p1", "n2")
        await wait_until_async(lambda: w.shim.tasks["uid-p1"].bound, 5, "the second bind")
        assert w.kube.binds == [("p1", "n1"), ("p1", "n2")]
    run(main())


def test_the_pods_own_affinity_keeps_its_terms_when_a_node_is_excluded():
    from k8s_shim.translate.model import exclude_nodes
    required = json.dumps({"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}]})
    terms = json.loads(exclude_nodes(required, ["n2"]))["nodeSelectorTerms"]
    not_n2 = {"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}
    assert terms[0] == {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}], "matchFields": [not_n2]}
    assert terms[1]["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}, not_n2]


def test_a_node_opens_only_after_the_pods_already_on_it_are_confirmed():
    async def main():
        w = World()
        w.pod(raw_pod("running", node="n1", phase="Running"))
        await turn()
        [app] = sent(w.api.take(), "apps")
        assert app.tags[APP_TAG_CREATE_FORCE] == "true"
        await w.accept_apps("app-1")
        await turn()
        assert not sent(w.api.take(), "allocations")  # its node is not known yet: the pod waits for it
        w.node(raw_node("n1"))
        await turn()
        [create] = sent(w.api.take(), "nodes")
        assert create.action == si.NodeInfo.CREATE_DRAIN and create.schedulableResource.resources["vcore"].value == 4000
        assert json.loads(create.attributes["si.io/nodelabels"]) == {"kubernetes.io/hostname": "n1"}
        assert create.attributes["ready"] == "true"
        await w.accept_nodes("n1")
        await turn()
        out = w.api.take()
        [placed] = sent(out, "allocations")
        assert placed.nodeID == "n1" and placed.allocationKey == "uid-running"
        assert not sent(out, "nodes")  # not opened before the core confirms the pod
        await w.allocate("uid-running", "n1")  # the confirmation
        await turn()
        [undrain] = sent(w.api.take(), "nodes")
        assert undrain.action == si.NodeInfo.DRAIN_TO_SCHEDULABLE and not w.kube.binds
    run(main())


def test_cordon_drains_uncordon_opens_capacity_updates_and_deletion_decommissions():
    async def main():
        w = World()
        w.node(raw_node("n1"))
        await turn()
        await w.accept_nodes("n1")
        await turn()
        assert [n.action for n in sent(w.api.take(), "nodes")] == [si.NodeInfo.CREATE_DRAIN,
                                                                    si.NodeInfo.DRAIN_TO_SCHEDULABLE]
        w.node(raw_node("n1", unschedulable=True))
        w.node(raw_node("n1", unschedulable=False, cpu="8"))
        w.node_gone("n1")
        await turn()
        actions = [(n.action, n.schedulableResource.resources["vcore"].value if n.HasField("schedulableResource")
                    else None) for n in sent(w.api.take(), "nodes")]
        assert actions == [(si.NodeInfo.DRAIN_NODE, None), (si.NodeInfo.UPDATE, 8000),
                           (si.NodeInfo.DRAIN_TO_SCHEDULABLE, None), (si.NodeInfo.DECOMISSION, None)]
    run(main())


def test_foreign_pods_occupy_their_node_once_it_is_registered_and_leave_with_it():
    async def main():
        w = World()
        raw = raw_pod("kube-proxy", node="n1", scheduler="default-scheduler", phase="Running")
        raw["metadata"]["ownerReferences"] = [{"kind": "Node", "name": "n1", "uid": "x"}]
        foreign = OTHERS(raw, None)
        w.shim.foreign_changed(None, foreign)
        w.node(raw_node("n1"))
        await turn()
        assert not sent(w.api.take(), "allocations")  # not before its node is registered
        await w.accept_nodes("n1")
        await turn()
        [fa] = sent(w.api.take(), "allocations")
        assert fa.allocationTags[TAG_FOREIGN] == "static" and fa.nodeID == "n1" and not fa.applicationID
        w.shim.foreign_changed(foreign, None)
        await turn()
        [rel] = sent(w.api.take(), "releases")
        assert rel.allocationKey == "uid-kube-proxy" and not rel.applicationID
    run(main())


def test_a_rejected_application_fails_its_pending_pods_but_not_the_running_ones():
    async def main():
        w = World()
        await registered_node(w)
        w.pod(raw_pod("waiting", app="bad"))
        w.pod(raw_pod("running", app="bad", node="n1", phase="Running"))
        await turn()
        await w.shim.update_application(si.ApplicationResponse(rejected=[si.RejectedApplication(
            applicationID="bad", reason="failed to find queue root.nope")]))
        await wait_until_async(lambda: w.kube.patches, 5, "the status patch")
        assert w.kube.patches == [("waiting", {"status": {"phase": "Failed", "reason": "ApplicationRejected",
                                                          "message": "failed to find queue root.nope"}})]
        assert ("waiting", "ApplicationFailed",
                "Application bad scheduling failed, reason: ApplicationRejected: failed to find queue root.nope") \
            in w.notes()
    run(main())


def test_a_pod_with_a_bad_field_is_not_asked_for_and_the_event_names_the_field():
    async def main():
        w = World()
        w.pod(raw_pod("bad", cpu="lots"))
        await w.accept_apps("app-1")
        await turn()
        assert not sent(w.api.take(), "allocations")
        [(_, _, note)] = w.notes("FailedScheduling")
        assert "spec.containers[0].resources.requests.cpu" in note and "'lots' is not a quantity" in note
    run(main())


def test_a_pod_waiting_for_a_missing_resource_claim_is_asked_for_naming_it():
    async def main():
        w = World()
        w.pod(raw_pod("p", resourceClaims=[{"name": "gpu", "resourceClaimName": "missing"}]))
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert "missing" in ask.allocationTags[TAG_UNSUPPORTED_CONSTRAINTS]
        [(_, _, note)] = w.notes("FailedScheduling")
        assert "missing" in note and "--best-effort-constraints" not in note
    run(main())


def test_a_claim_that_appears_bound_lets_the_pod_be_asked_for_plainly():
    async def main():
        w = World()
        w.pod(raw_pod("p", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]))
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert ask.allocationTags[TAG_UNSUPPORTED_CONSTRAINTS] == "persistentvolumeclaim data not found"
        w.shim.storage_class_changed(None, ("local", StorageClass("local", "WaitForFirstConsumer", NO_PROVISIONER)))
        w.shim.claim_changed(None, ("ns/data", Claim(bound=False, storage_class="local", deleting=False)))
        await turn()
        [ask] = sent(w.api.take(), "allocations")  # no volume to bind, none provisioned: no node yet
        assert TAG_UNSUPPORTED_CONSTRAINTS not in ask.allocationTags
        [need] = json.loads(ask.allocationTags[TAG_NODE_REQUIREMENTS])
        assert need["reason"] == "node(s) didn't find available persistent volumes to bind" and need["retry"]
        w.shim.claim_changed(None, ("ns/data", Claim(bound=True, storage_class="local", deleting=False)))
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert TAG_UNSUPPORTED_CONSTRAINTS not in ask.allocationTags and TAG_NODE_REQUIREMENTS not in ask.allocationTags
    run(main())


def test_a_wait_for_first_consumer_claim_gets_the_pods_node_and_the_pod_is_bound_once_the_claim_is():
    async def main():
        w = World()
        await registered_node(w)
        w.shim.storage_class_changed(None, ("local", StorageClass("local", "WaitForFirstConsumer", "csi.example.com")))
        w.shim.claim_changed(None, ("ns/data", Claim(bound=False, storage_class="local", deleting=False)))
        w.pod(raw_pod("p", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]))
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert TAG_UNSUPPORTED_CONSTRAINTS not in ask.allocationTags and TAG_NODE_REQUIREMENTS not in ask.allocationTags
        await w.allocate("uid-p", "n1")
        await wait_until_async(lambda: w.kube.selected == [("data", "n1")], 5, "the selected node")
        await turn()
        assert not w.kube.binds  # not before the claim is bound
        w.shim.claim_changed(None, ("ns/data", Claim(bound=True, storage_class="local", deleting=False,
                                                     volume="pvc-1")))
        await wait_until_async(lambda: w.shim.tasks["uid-p"].bound, 5, "the bind")
        assert w.kube.binds == [("p", "n1")]
    run(main())


def test_a_failed_scheduling_state_writes_the_pods_condition_once():
    async def main():
        w = World()
        w.pod(raw_pod("p"))
        await w.accept_apps("app-1")
        await turn()
        state = si_pb2.UpdateContainerSchedulingStateRequest(
            applicartionID="app-1", allocationKey="uid-p", state=si_pb2.UpdateContainerSchedulingStateRequest.FAILED,
            reason="request is waiting for cluster resources become available")
        await w.shim.update_container_scheduling_state(state)
        await w.shim.update_container_scheduling_state(state)
        await wait_until_async(lambda: w.kube.patches, 5, "the condition")
        await turn()
        [(name, patch)] = w.kube.patches
        [cond] = patch["status"]["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
        assert cond["message"] == "request is waiting for cluster resources become available"
        assert len(w.notes("PodUnschedulable")) == 1
    run(main())


def test_a_pod_deleted_while_being_bound_releases_and_the_late_outcome_is_ignored():
    async def main():
        w = World()
        await registered_node(w)
        w.pod(raw_pod("p"))
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        w.kube.refuse["n1"] = ApiError("POST", "/binding", 404, "NotFound", 'pods "p" not found')
        await w.allocate("uid-p", "n1")
        w.pod_gone("uid-p")
        await turn()
        [rel] = sent(w.api.take(), "releases")
        assert rel.allocationKey == "uid-p"
        await wait_until_async(lambda: w.kube.binds, 5, "the bind attempt")
        await turn()
        assert not w.api.take() and "uid-p" not in w.shim.tasks
    run(main())


def test_a_node_with_only_foreign_pods_opens_once_korral_confirms_them_also_after_a_replay():
    """The foreign allocation and the opening go on different streams: sending one before the
    other does not make the core count the pod before it places a new one on the node."""
    async def main():
        w = World()
        foreign = OTHERS(raw_pod("kube-proxy", node="n1", scheduler="default-scheduler", phase="Running"), None)
        w.shim.foreign_changed(None, foreign)
        w.node(raw_node("n1"))
        await turn()
        w.api.take()
        await w.accept_nodes("n1")
        await turn()
        out = w.api.take()
        assert [fa.allocationKey for fa in sent(out, "allocations")] == ["uid-kube-proxy"]
        assert not sent(out, "nodes")  # not opened before the foreign pod is counted
        await w.allocate("uid-kube-proxy", "n1", app="")  # Korral's confirmation
        await turn()
        out = w.api.take()
        assert [n.action for n in sent(out, "nodes")] == [si.NodeInfo.DRAIN_TO_SCHEDULABLE]
        assert not sent(out, "releases")  # a confirmation is not an allocation to give back
        w.api.state = ClientState.RECOVERING
        snap = await w.shim.recoverable_state()
        assert [(a.allocationKey, a.nodeID) for a in snap.allocations] == [("uid-kube-proxy", "n1")]
        await w.accept_nodes("n1")
        await turn()
        assert not sent(w.api.take(), "nodes")
        await w.allocate("uid-kube-proxy", "n1", app="")
        await turn()
        assert [n.action for n in sent(w.api.take(), "nodes")] == [si.NodeInfo.DRAIN_TO_SCHEDULABLE]
    run(main())


def test_a_foreign_pod_that_goes_or_is_rejected_while_its_node_waits_lets_the_node_open():
    async def main():
        w = World()
        gone = OTHERS(raw_pod("gone", node="n1", scheduler="default-scheduler", phase="Running"), None)
        refused = OTHERS(raw_pod("refused", node="n1", scheduler="default-scheduler", phase="Running"), None)
        w.shim.foreign_changed(None, gone)
        w.shim.foreign_changed(None, refused)
        w.node(raw_node("n1"))
        await turn()
        await w.accept_nodes("n1")
        await turn()
        w.api.take()
        w.shim.foreign_changed(gone, None)
        await turn()
        assert not sent(w.api.take(), "nodes")
        await w.shim.update_allocation(si.AllocationResponse(rejectedAllocations=[si.RejectedAllocation(
            allocationKey="uid-refused", reason="foreign allocation uid-refused on node n1: invalid resource")]))
        await turn()
        assert [n.action for n in sent(w.api.take(), "nodes")] == [si.NodeInfo.DRAIN_TO_SCHEDULABLE]
    run(main())


def test_the_replay_reports_everything_and_nodes_open_after_their_pods_are_confirmed():
    async def main():
        w = World()
        await registered_node(w)
        w.pod(raw_pod("running", node="n1", phase="Running"))
        w.pod(raw_pod("waiting"))
        await w.accept_apps("app-1")
        await turn()
        await w.allocate("uid-running", "n1")
        await turn()
        w.api.take()
        w.api.state = ClientState.RECOVERING
        snap = await w.shim.recoverable_state()
        assert [a.applicationID for a in snap.applications] == ["app-1"]
        assert snap.applications[0].tags[APP_TAG_CREATE_FORCE] == "true"
        assert [(n.nodeID, n.action) for n in snap.nodes] == [("n1", si.NodeInfo.CREATE_DRAIN)]
        assert sorted((a.allocationKey, a.nodeID) for a in snap.allocations) == [("uid-running", "n1"), ("uid-waiting", "")]
        await w.accept_apps("app-1")  # the replay's verdicts: nothing is sent twice
        await w.accept_nodes("n1")
        await turn()
        assert not w.api.take()
        await w.allocate("uid-running", "n1")  # the core confirms the replayed allocation
        await turn()
        [undrain] = sent(w.api.take(), "nodes")
        assert undrain.action == si.NodeInfo.DRAIN_TO_SCHEDULABLE and not w.kube.binds
    run(main())


def test_an_allocation_for_a_pod_that_went_is_released():
    async def main():
        w = World()
        await w.allocate("uid-ghost", "n1", app="app-9")
        await turn()
        [rel] = sent(w.api.take(), "releases")
        assert (rel.allocationKey, rel.applicationID) == ("uid-ghost", "app-9")
    run(main())


def test_a_preempted_pod_is_deleted_with_an_event():
    async def main():
        w = World()
        await registered_node(w)
        w.pod(raw_pod("victim", node="n1", phase="Running"))
        await w.accept_apps("app-1")
        await turn()
        await w.shim.update_allocation(si.AllocationResponse(released=[si.AllocationRelease(
            allocationKey="uid-victim", applicationID="app-1", terminationType=si.PREEMPTED_BY_SCHEDULER,
            message="preempting allocations to free up resources to run daemon set ask: x")]))
        await wait_until_async(lambda: w.kube.deletes, 5, "the deletion")
        assert w.kube.deletes == ["/api/v1/namespaces/ns/pods/victim"]
        assert "PREEMPTED_BY_SCHEDULER" in w.notes("Preempted")[0][2]
    run(main())
