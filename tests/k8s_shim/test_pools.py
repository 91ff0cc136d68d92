"""Partitions per node pool (``k8s_shim.pools``) on the shim of ``test_shim``'s ``World``:
the partition every message names, nodes and applications whose partition the configuration
lacks (held, told why, taken when a reload adds it), a node whose label moves it, and a pod of
another partition bound directly to a node."""

from __future__ import annotations

from common import si_v18_pb2 as si
from common.constants import NODE_PARTITION
from k8s_shim.translate.namespaces import read_namespace
from k8s_shim.pools import config_partitions
from si_client.callback import rebuilds_partitions
from tests.k8s_shim.test_shim import OTHERS, World, raw_node, raw_pod, run, sent, turn

LABEL = "korral.io/pool"
PARTITION = "yunikorn.apache.org/partition"


class PoolWorld(World):
    """``World`` with the informers feeding the pools, as ``korral k8s-shim --partition-label`` does."""

    def __init__(self, partitions=("default", "gpu")) -> None:
        super().__init__(partition_label=LABEL)
        self.pools = self.informed = self.shim.pools
        self.pools.set_partitions(partitions)


def pool_node(name, pool=None, **kw):
    raw = raw_node(name, **kw)
    if pool is not None:
        raw["metadata"]["labels"][LABEL] = pool
    return raw


def gpu_pod(name, node="", app="app-1", **kw):
    raw = raw_pod(name, node=node, app=app, **kw)
    raw["metadata"]["annotations"] = {PARTITION: "gpu"}
    return raw


def partitions_of_nodes(items):
    return [(n.nodeID, n.action, n.attributes.get(NODE_PARTITION, "")) for n in sent(items, "nodes")]


def test_nodes_and_applications_name_their_partition_in_every_message():
    async def main():
        w = PoolWorld()
        w.node(pool_node("g1", "gpu"))
        w.node(pool_node("d1"))
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("g1", si.NodeInfo.CREATE_DRAIN, "gpu"),
                                                     ("d1", si.NodeInfo.CREATE_DRAIN, "")]
        await w.accept_nodes("g1", "d1")
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("g1", si.NodeInfo.DRAIN_TO_SCHEDULABLE, "gpu"),
                                                     ("d1", si.NodeInfo.DRAIN_TO_SCHEDULABLE, "")]
        w.pod(gpu_pod("p1"))
        w.pod(raw_pod("p2", app="app-2"))
        await turn()
        assert [(a.applicationID, a.partitionName) for a in sent(w.api.take(), "apps")] == \
            [("app-1", "gpu"), ("app-2", "default")]
        await w.accept_apps("app-1", "app-2")
        await turn()
        assert [(a.allocationKey, a.partitionName) for a in sent(w.api.take(), "allocations")] == \
            [("uid-p1", "gpu"), ("uid-p2", "default")]
        w.pod_gone("uid-p1")
        await turn()
        assert [(r.allocationKey, r.partitionName) for r in sent(w.api.take(), "releases")] == [("uid-p1", "gpu")]
        # a pod of another scheduler is counted in its node's partition, and released there
        foreign = OTHERS(raw_pod("f1", node="g1", scheduler="other", phase="Running"), None)
        w.shim.foreign_changed(None, foreign)
        await turn()
        assert [(a.allocationKey, a.partitionName) for a in sent(w.api.take(), "allocations")] == [("uid-f1", "gpu")]
        w.shim.foreign_changed(foreign, None)
        await turn()
        assert [(r.allocationKey, r.partitionName) for r in sent(w.api.take(), "releases")] == [("uid-f1", "gpu")]
        # the replay after a lost connection names them too
        snapshot = await w.shim.recoverable_state()
        assert sorted((n.nodeID, n.attributes.get(NODE_PARTITION, "")) for n in snapshot.nodes) == \
            [("d1", ""), ("g1", "gpu")]
        assert [(a.applicationID, a.partitionName) for a in snapshot.applications] == [("app-2", "default")]
        assert [(a.allocationKey, a.partitionName) for a in snapshot.allocations] == [("uid-p2", "default")]
    run(main())


def test_a_namespace_annotation_names_the_partition_of_its_applications_and_a_pod_annotation_wins():
    async def main():
        w = PoolWorld()
        w.shim.namespace_changed(None, read_namespace({"metadata": {"name": "ns", "annotations": {PARTITION: "gpu"}}}))
        w.pod(raw_pod("p1"))
        p2 = raw_pod("p2", app="app-2")
        p2["metadata"]["annotations"] = {PARTITION: "default"}
        w.pod(p2)
        await turn()
        assert [(a.applicationID, a.partitionName) for a in sent(w.api.take(), "apps")] == \
            [("app-1", "gpu"), ("app-2", "default")]
        # a later pod naming another partition joins its application's, and is told
        w.pod(raw_pod("p3", app="app-2"))
        assert [n for n in w.notes("Scheduling") if n[0] == "p3"] == [
            ("p3", "Scheduling", f"pod ns/p3: namespace ns metadata.annotations[{PARTITION}]=gpu differs from the "
             "partition of its application app-2 (default): scheduled in the application's partition")]
    run(main())


def test_a_partition_the_configuration_lacks_holds_its_nodes_and_pods_until_a_reload_adds_it():
    async def main():
        w = PoolWorld(partitions=("default",))
        w.node(pool_node("g1", "gpu"))
        w.pod(gpu_pod("p1"))
        w.pod(gpu_pod("p2"))
        await turn()
        assert not w.api.take()  # neither the node nor the application
        notes = w.notes()
        assert ("g1", "NodeRejected", f"node g1 is not registered: metadata.labels[{LABEL}]=gpu names a partition the "
                "configuration lacks (it has default); it is registered when a configuration adds the partition") \
            in notes
        told = sorted(n[0] for n in notes if n[1] == "FailedScheduling")
        assert told == ["p1", "p2"]
        dump = w.shim.dump()["pools"]
        assert dump["partitions"] == ["default"] and list(dump["heldNodes"]) == ["g1"]
        assert dump["waitingApplications"] == {"app-1": "gpu"}
        assert f"metadata.annotations[{PARTITION}]=gpu names a partition the configuration lacks" in \
            next(n[2] for n in notes if n[0] == "p1" and n[1] == "FailedScheduling")
        w.node(pool_node("g1", "gpu", cpu="8"))  # an update of a held node: still held, not told again
        await turn()
        assert not w.api.take() and not w.notes("NodeRejected")
        w.pools.set_partitions(config_partitions(
            "partitions:\n  - name: default\n    queues: [{name: root}]\n  - name: gpu\n    queues: [{name: root}]\n"))
        await turn()
        out = w.api.take()
        assert partitions_of_nodes(out) == [("g1", si.NodeInfo.CREATE_DRAIN, "gpu")]
        assert [(a.applicationID, a.partitionName) for a in sent(out, "apps")] == [("app-1", "gpu")]
        await w.accept_apps("app-1")
        await turn()
        assert sorted(a.allocationKey for a in sent(w.api.take(), "allocations")) == ["uid-p1", "uid-p2"]
    run(main())


def test_a_node_moved_by_its_label_leaves_its_partition_and_joins_the_new_one_once_its_old_pods_end():
    async def main():
        w = PoolWorld()
        w.node(pool_node("n1"))
        await turn()
        await w.accept_nodes("n1")
        w.pod(raw_pod("old", node="n1", phase="Running"))
        w.pod(gpu_pod("new", node="n1", app="app-g", phase="Running"))  # bound there directly: holds it out
        await turn()
        assert partitions_of_nodes(w.api.take())[-1] == ("n1", si.NodeInfo.DECOMISSION, "")
        assert "1 pod(s) of other partitions run on it: ns/new (gpu)" in w.notes("NodePartitionPending")[0][2]
        w.pod_gone("uid-new")
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("n1", si.NodeInfo.CREATE_DRAIN, "")]
        await w.accept_nodes("n1")
        await turn()
        w.api.take()
        # the label moves it to gpu: out of default at once, into gpu once the default pod has ended
        w.node(pool_node("n1", "gpu"))
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("n1", si.NodeInfo.DECOMISSION, "")]
        notes = w.notes()
        assert ("n1", "NodePartitionChanged", f"node n1 moves from partition default to gpu "
                f"(metadata.labels[{LABEL}]): removed from default, its running pods not touched; 1 pod(s) of other "
                "partitions run on it: ns/old (default); it is registered in partition gpu once they have ended") \
            in notes
        assert not w.kube.deletes and not w.kube.patches  # nothing bound is touched
        w.pod_gone("uid-old")
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("n1", si.NodeInfo.CREATE_DRAIN, "gpu")]
        w.node_gone("n1")
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("n1", si.NodeInfo.DECOMISSION, "gpu")]
    run(main())


def test_without_a_label_key_every_message_stays_in_default():
    async def main():
        w = World()
        w.node(pool_node("g1", "gpu"))
        w.pod(gpu_pod("p1"))
        await turn()
        out = w.api.take()
        assert partitions_of_nodes(out) == [("g1", si.NodeInfo.CREATE_DRAIN, "")]
        assert [a.partitionName for a in sent(out, "apps")] == [""]
    run(main())


def test_config_partitions():
    assert config_partitions("") == {"default"}
    assert config_partitions("partitions: [{name: a, queues: [{name: root}]}]") == {"a"}
    assert config_partitions("partitions: [this is: not valid") is None


def test_a_partition_removed_by_a_reload_holds_its_nodes_and_applications_and_a_fixed_pod_is_taken():
    async def main():
        w = PoolWorld()
        w.node(pool_node("g1", "gpu"))
        await turn()
        await w.accept_nodes("g1")
        w.pod(gpu_pod("run", node="g1", phase="Running"))
        w.pod(gpu_pod("wait"))
        await turn()
        await w.accept_apps("app-1")
        await turn()
        w.api.take()
        w.notes()
        w.pools.set_partitions({"default"})
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("g1", si.NodeInfo.DECOMISSION, "gpu")]
        notes = w.notes()
        assert [n[0] for n in notes if n[1] == "FailedScheduling"] == ["wait"]  # the running pod is not told
        assert any(n[0] == "g1" and n[1] == "NodeRejected" for n in notes)
        assert not w.kube.deletes and not w.kube.patches  # nothing bound is touched
        # an application whose first pod went is decided again by the pod that joins it
        w.pod_gone("uid-run")
        w.pod_gone("uid-wait")
        w.pod(raw_pod("fixed"))
        await turn()
        assert [(a.applicationID, a.partitionName) for a in sent(w.api.take(), "apps")] == [("app-1", "default")]
    run(main())


def test_a_pod_whose_namespace_is_not_read_yet_holds_no_node_until_its_partition_is_decided():
    async def main():
        w = PoolWorld()
        w.kube.namespace_annotations = {PARTITION: "gpu"}  # what the namespace's read answers
        w.node(pool_node("d1"))
        w.pod(raw_pod("p1", node="d1", phase="Running"))  # a gpu pod (by its namespace) on a default node
        assert "d1" in w.pools.node_partition and not w.notes("NodePartitionPending")
        await turn()  # the namespace is read: the application is in gpu, so d1 leaves default
        assert w.pools.app_partition["app-1"] == "gpu"
        assert "d1" in w.pools.held and "ns/p1 (gpu)" in w.notes("NodePartitionPending")[0][2]
    run(main())


def test_one_partitions_replay_holds_its_own_nodes_applications_and_pods_and_leaves_the_others_alone():
    """``recoverable_partition_state`` (its worker died): gpu's nodes drained, its application,
    its placed pod, its pending pod and the foreign pod on its node; its queued messages are
    covered and dropped. default's node stays open, its placed pod stays placed and its queued
    message still goes out."""
    async def main():
        w = PoolWorld()
        w.node(pool_node("g1", "gpu"))
        w.node(pool_node("d1"))
        await turn()
        await w.accept_nodes("g1", "d1")
        w.pod(gpu_pod("p1", node="g1", phase="Running"))
        w.pod(raw_pod("p2", app="app-2"))
        w.shim.foreign_changed(None, OTHERS(raw_pod("f1", node="g1", scheduler="other", phase="Running"), None))
        w.shim.foreign_changed(None, OTHERS(raw_pod("f2", node="d1", scheduler="other", phase="Running"), None))
        await turn()
        await w.accept_apps("app-1", "app-2")
        await turn()
        await w.allocate("uid-p2", "d1", app="app-2")  # default's pod placed, its binding under way
        w.api.take()
        w.pod(gpu_pod("p3"))  # queued, not flushed yet: the replay covers it
        w.pod(raw_pod("p4", app="app-2"))  # queued for default: still goes out
        snapshot = await w.shim.recoverable_partition_state("gpu")
        assert [(n.nodeID, n.action, n.attributes.get(NODE_PARTITION, "")) for n in snapshot.nodes] == \
            [("g1", si.NodeInfo.CREATE_DRAIN, "gpu")]
        assert [(a.applicationID, a.partitionName) for a in snapshot.applications] == [("app-1", "gpu")]
        assert sorted((a.allocationKey, a.nodeID, a.partitionName) for a in snapshot.allocations) == \
            [("uid-f1", "g1", "gpu"), ("uid-p1", "g1", "gpu"), ("uid-p3", "", "gpu")]
        d1, p2 = w.shim.nodes["d1"], w.shim.tasks["uid-p2"]
        assert d1.enabled and d1.phase.name == "REGISTERED" and p2.node == "d1" and p2.where.name == "PLACED"
        assert w.shim.foreign["uid-f2"].reported
        await turn()
        assert [a.allocationKey for a in sent(w.api.take(), "allocations")] == ["uid-p4"]
        assert w.shim.dump()["replays"] == {"registrations": 0, "partitions": {"gpu": 1}}
        # the replay's verdicts: g1 opens once the pods running there are confirmed, as after a registration
        await w.accept_apps("app-1")
        await w.accept_nodes("g1")
        await turn()
        assert not partitions_of_nodes(w.api.take())
        await w.shim.update_allocation(si.AllocationResponse(new=[
            si.Allocation(allocationKey="uid-p1", applicationID="app-1", nodeID="g1"),
            si.Allocation(allocationKey="uid-f1", nodeID="g1")]))
        await turn()
        assert partitions_of_nodes(w.api.take()) == [("g1", si.NodeInfo.DRAIN_TO_SCHEDULABLE, "gpu")]
        await w.allocate("uid-p3", "g1")
        await turn()
        assert ("p3", "g1") in w.kube.binds and ("p2", "d1") in w.kube.binds
    run(main())


def test_the_shim_declares_the_partition_resync_with_node_pools_only():
    assert rebuilds_partitions(PoolWorld().shim)
    assert not rebuilds_partitions(World().shim)
