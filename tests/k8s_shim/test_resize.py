"""In-place pod resize (KEP-1287) in the shim: a pod's size as YuniKorn computes it from its spec
and its container statuses (``k8s_shim.translate.pods.pod_size``), followed on every update of a known
pod (``decoder``/``resized``), and sent to the core by the shim (``Shim._resized``): a placed
pod's allocation again with its node and the new size, a pending pod's ask replaced, a foreign
pod's allocation replaced; a refused resize keeps the core's size in the shim's books and its
event is a warning on the pod."""

from __future__ import annotations

import copy
import pytest

from common import si_pb2, si_v18_pb2 as si
from k8s_shim.translate.pods import pod_size
from tests.k8s_shim.test_shim import OTHERS, OURS, World, raw_node, raw_pod, registered_node, run, sent, turn


def status_of(name="c", allocated=None, current=None) -> dict:
    out = {"name": name, "state": {"running": {}}, "ready": True, "restartCount": 0}
    if allocated is not None:
        out["allocatedResources"] = allocated
    if current is not None:
        out["resources"] = {"requests": current, "limits": {"cpu": "4"}}
    return out


SPEC = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}}},
                       {"name": "d", "resources": {"requests": {"cpu": "100m"}}}],
        "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}}]}


@pytest.mark.parametrize("status, vcore", [
    ({}, 350),
    # the spec grew (resize written, not actuated): the spec's larger requests count
    ({"containerStatuses": [status_of("c", {"cpu": "100m"}, {"cpu": "100m"})]}, 350),
    # the spec shrank, the kubelet has not actuated it: the status' larger sizes count
    ({"containerStatuses": [status_of("c", {"cpu": "500m"}, {"cpu": "200m"})]}, 650),
    ({"containerStatuses": [status_of("c", {"cpu": "200m"}, {"cpu": "700m"})]}, 850),
    # a native sidecar's status counts as its init container's
    ({"initContainerStatuses": [status_of("side", {"cpu": "300m"})]}, 600),
    # infeasible (1.33's condition, or the older status.resize): what the containers run with, even smaller
    ({"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
      "containerStatuses": [status_of("c", {"cpu": "900m"}, {"cpu": "20m"})]}, 170),
    ({"resize": "Infeasible", "containerStatuses": [status_of("c", {"cpu": "900m"}, {"cpu": "20m"})]}, 170),
    # a deferred resize is not infeasible: the larger still counts
    ({"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
      "containerStatuses": [status_of("c", {"cpu": "900m"}, {"cpu": "20m"})]}, 1050),
    # infeasible without the status' resources: the rule's max holds (nothing says what it runs with)
    ({"resize": "Infeasible", "containerStatuses": [status_of("c", {"cpu": "900m"})]}, 1050),
], ids=["spec only", "spec grew", "status allocated larger", "status current larger", "sidecar status",
        "infeasible condition", "infeasible status.resize", "deferred", "infeasible without resources"])
def test_the_size_is_the_larger_of_spec_and_status_unless_the_resize_is_infeasible(status, vcore):
    problems = []
    assert pod_size(SPEC, status, problems)["vcore"] == vcore and not problems


def resized(raw: dict, cpu: str, actuated: bool = False, infeasible: bool = False) -> dict:
    """``raw`` after its container was resized to ``cpu`` (the spec, generation bumped), actuated by
    the kubelet (the status follows) or found infeasible (the status keeps what it ran with)."""
    raw = copy.deepcopy(raw)
    meta, container = raw["metadata"], raw["spec"]["containers"][0]
    ran = container["resources"]["requests"]
    meta["generation"] = meta.get("generation", 1) + 1
    container["resources"]["requests"] = {**ran, "cpu": cpu}
    now = container["resources"]["requests"] if actuated else ran
    raw["status"]["containerStatuses"] = [status_of("c", now, now)]
    if infeasible:
        raw["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                                        "message": "Node didn't have enough capacity"}]
    return raw


def refusal(to: str, grow: str, keeps: str = "100") -> str:
    """The core's rejection of a resize of uid-p1 (its text: partition_worker.core.partition)."""
    return (f"resize of allocation uid-p1 of application app-1 on node n1 to Resource({{memory:67108864, pods:1, "
            f"vcore:{to}}}) refused: node n1 has no room to grow it by Resource({{vcore:{grow}}}) (free: "
            f"Resource({{memory:1, vcore:1}})); it keeps Resource({{memory:67108864, pods:1, vcore:{keeps}}})")


async def placed_pod(w: World, name="p1") -> dict:
    await registered_node(w)
    raw = raw_pod(name, node="n1", phase="Running")
    raw["status"]["containerStatuses"] = [status_of("c", {"cpu": "100m", "memory": "64Mi"},
                                                    {"cpu": "100m", "memory": "64Mi"})]
    w.pod(raw)
    await w.accept_apps("app-1")
    await turn()
    [alloc] = sent(w.api.take(), "allocations")
    assert alloc.nodeID == "n1" and alloc.resourcePerAlloc.resources["vcore"].value == 100
    await w.allocate(f"uid-{name}", "n1")  # the core confirms it
    return raw


def test_a_placed_pods_resize_sends_its_allocation_again_with_its_node_and_the_new_size():
    async def main():
        w = World()
        raw = await placed_pod(w)
        spec_before = w.shim.tasks["uid-p1"].spec
        w.pod(resized(raw, "500m"))  # the spec grew: the larger counts at once
        await turn()
        [alloc] = sent(w.api.take(), "allocations")
        assert alloc.allocationKey == "uid-p1" and alloc.nodeID == "n1" and alloc.applicationID == "app-1"
        assert alloc.resourcePerAlloc.resources["vcore"].value == 500
        assert w.shim.tasks["uid-p1"].spec.app_id == spec_before.app_id  # only the size was read again
        w.pod(resized(raw, "500m", actuated=True))  # the kubelet actuated it: the same size, nothing sent
        await turn()
        assert not sent(w.api.take(), "allocations")
        dump = w.shim.dump()
        assert dump["nodes"]["n1"]["assumed"]["vcore"] == 500 and dump["tasks"] == {"placed": 1}
    run(main())


def test_a_refused_resize_keeps_the_pod_placed_at_the_cores_size_and_warns_on_the_pod():
    async def main():
        w = World()
        raw = await placed_pod(w)
        w.pod(resized(raw, "8"))
        await turn()
        [alloc] = sent(w.api.take(), "allocations")
        assert alloc.resourcePerAlloc.resources["vcore"].value == 8000
        why = refusal("8000", "7900")
        await w.shim.update_allocation(si.AllocationResponse(rejectedAllocations=[
            si.RejectedAllocation(allocationKey="uid-p1", applicationID="app-1", reason=why)]))
        await w.shim.send_event([si_pb2.EventRecord(type=si_pb2.EventRecord.REQUEST, objectID="uid-p1",
                                                    reason="AllocationResizeRefused", message=why)])
        task = w.shim.tasks["uid-p1"]
        assert task.where.value == "placed" and task.node == "n1"
        assert w.shim.dump()["nodes"]["n1"]["assumed"]["vcore"] == 100  # the core's size, not the pod's
        assert ("p1", "AllocationResizeRefused", why) in w.notes()
        assert not w.notes("TaskRejected")
        # the kubelet finds it infeasible too: the pod's size is back to the core's, nothing is sent
        w.pod(resized(raw, "8", infeasible=True))
        await turn()
        assert not sent(w.api.take(), "allocations") and task.booked is None
        assert w.shim.dump()["nodes"]["n1"]["assumed"]["vcore"] == 100
        # a later resize the core takes is sent from the size it keeps
        later = resized(raw, "300m", actuated=True)
        later["metadata"]["generation"] = 5
        w.pod(later)
        await turn()
        [alloc] = sent(w.api.take(), "allocations")
        assert alloc.nodeID == "n1" and alloc.resourcePerAlloc.resources["vcore"].value == 300
    run(main())


def test_a_pending_pods_resize_replaces_its_ask():
    async def main():
        w = World()
        w.pod(raw_pod("p1"))
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert ask.resourcePerAlloc.resources["vcore"].value == 100
        w.pod(resized(raw_pod("p1"), "250m"))
        await turn()
        [again] = sent(w.api.take(), "allocations")
        assert again.allocationKey == "uid-p1" and not again.nodeID
        assert again.resourcePerAlloc.resources["vcore"].value == 250
        assert w.shim.dump()["tasks"] == {"asked": 1}
        w.pod(resized(raw_pod("p1"), "250m"))  # another update of the same size: nothing
        await turn()
        assert not sent(w.api.take(), "allocations")
    run(main())


def test_a_held_pods_resize_is_sent_when_it_is_asked_for():
    async def main():
        w = World()
        w.pod(raw_pod("p1"))  # its application has no verdict yet: nothing asked
        await turn()
        w.api.take()
        w.pod(resized(raw_pod("p1"), "250m"))
        await turn()
        assert not sent(w.api.take(), "allocations")
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert ask.resourcePerAlloc.resources["vcore"].value == 250
    run(main())


def test_a_foreign_pods_resize_replaces_its_allocation_on_its_node():
    async def main():
        w = World()
        await registered_node(w)
        raw = raw_pod("f1", node="n1", scheduler="default-scheduler", phase="Running")
        old = OTHERS(raw, None)
        w.shim.foreign_changed(None, old)
        await turn()
        [first] = sent(w.api.take(), "allocations")
        assert first.resourcePerAlloc.resources["vcore"].value == 100
        new = OTHERS(resized(raw, "2", actuated=True), old)
        w.shim.foreign_changed(old, new)
        await turn()
        [again] = sent(w.api.take(), "allocations")
        assert again.allocationKey == "uid-f1" and again.nodeID == "n1" and again.resourcePerAlloc.resources["vcore"].value == 2000
        assert w.shim.dump()["nodes"]["n1"]["assumed"]["vcore"] == 2000
    run(main())


def test_a_whole_decode_reuses_the_spec_unless_the_size_changed():
    raw = raw_pod("p1", node="n1", phase="Running")
    state = OURS(raw, None)
    ready = copy.deepcopy(raw)
    ready["status"]["containerStatuses"] = [status_of("c", {"cpu": "100m", "memory": "64Mi"},
                                                      {"cpu": "100m", "memory": "64Mi"})]
    again = OURS(ready, state)  # a kubelet's status repeating the spec: the same spec object, the same mark
    assert again.spec is state.spec and again.mark == state.mark
    now = OURS(resized(ready, "1", actuated=True), again)
    assert now.spec is not state.spec and now.spec.resource["vcore"] == 1000 and now.spec.tags == state.spec.tags
    assert state.spec.resource["vcore"] == 100 and now.mark != again.mark


def test_a_refused_resize_the_kubelet_actuates_later_is_sent_again():
    async def main():
        w = World()
        raw = await placed_pod(w)
        w.pod(resized(raw, "2"))  # deferred by the kubelet: the spec's size counts
        await turn()
        [alloc] = sent(w.api.take(), "allocations")
        assert alloc.resourcePerAlloc.resources["vcore"].value == 2000
        await w.shim.update_allocation(si.AllocationResponse(rejectedAllocations=[si.RejectedAllocation(
            allocationKey="uid-p1", applicationID="app-1", reason=refusal("2000", "1900"))]))
        assert w.shim.dump()["nodes"]["n1"]["assumed"]["vcore"] == 100
        w.pod(resized(raw, "2", actuated=True))  # room freed on the node: the kubelet actuated it
        await turn()
        [again] = sent(w.api.take(), "allocations")
        assert again.nodeID == "n1" and again.resourcePerAlloc.resources["vcore"].value == 2000
        assert w.shim.dump()["nodes"]["n1"]["assumed"]["vcore"] == 2000  # until the core says otherwise
    run(main())


def test_the_refusal_of_a_resize_sent_before_the_last_one_leaves_the_books_to_the_last():
    async def main():
        w = World()
        raw = await placed_pod(w)
        w.pod(resized(raw, "8"))  # refused by the core...
        await turn()
        w.pod(resized(raw, "8", infeasible=True))  # ...and by the kubelet, before the core's answer came
        await turn()
        [first, back] = sent(w.api.take(), "allocations")
        assert [first.resourcePerAlloc.resources["vcore"].value, back.resourcePerAlloc.resources["vcore"].value] == \
            [8000, 100]
        await w.shim.update_allocation(si.AllocationResponse(rejectedAllocations=[si.RejectedAllocation(
            allocationKey="uid-p1", applicationID="app-1", reason=refusal("8000", "7900"))]))
        assert w.shim.tasks["uid-p1"].booked is None  # the later resize (back to 100) decides
        assert w.shim.dump()["nodes"]["n1"]["assumed"]["vcore"] == 100
    run(main())


def test_the_shim_reads_the_sizes_in_the_cores_own_refusal():
    """The shim takes the size the core keeps from its rejection's text: pinned to the core's words."""
    from common.resources import Resource
    from partition_worker.core.commands import ResizeAllocation
    from k8s_shim.shim import _RESIZE_REFUSED, _RESOURCE_TEXT, _size_of
    from tests.core.test_yunikorn_19 import _resize_h

    h = _resize_h()
    uuid = h.allocs_of("k1")[0].uuid
    h.do(ResizeAllocation("app1", uuid, Resource({"memory": 400, "vcore": 1})))  # the node has 300
    reason = h.rejected_ask_reasons()["k1"]
    sizes = [_size_of(found) for found in _RESOURCE_TEXT.findall(reason)]
    assert reason.startswith(_RESIZE_REFUSED)
    assert sizes[0] == {"memory": 400, "vcore": 1} and sizes[-1] == {"memory": 100, "vcore": 1}
    assert _size_of("memory:x") is None
