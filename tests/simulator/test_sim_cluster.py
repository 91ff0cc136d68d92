"""SimCluster driven by hand: a fake clock, a recording sender, scheduler responses built in the test."""

from __future__ import annotations

import json

from common import si_pb2
from simulator.checks import Validator
from simulator.cluster import SimCluster
from simulator.stats import Stats
from simulator.workload import parse_workload, plan
from tests.si_builders import allocation
from tests.simulator.doubles import Clock, Sender

WORKLOAD = """
nodes:
  - {name: n, count: 2, resources: {vcore: 2, memory: 2Gi}}
  - {name: e, count: 1, partition: edge, resources: {vcore: 2, memory: 2Gi}}
apps:
  - {name: a, count: 1, queue: root.a, user: alice, groups: [dev], namespace: ns1, tasks: 2,
     resources: {vcore: 1, memory: 1Gi}, duration: 5, priority: 4, arrival: {start: 1}}
"""


def make():
    p = plan(parse_workload(WORKLOAD))
    clock, sender = Clock(), Sender()
    cluster = SimCluster(p, sender, clock, Validator({n.node_id: dict(n.resources) for n in p.nodes}),
                         Stats({"default": {"vcore": 4000}, "edge": {"vcore": 2000}}))
    return cluster, clock, sender


def task(key, node_id, uuid):
    """A task of app a-0000 (its size in WORKLOAD) allocated on ``node_id``."""
    return allocation(key, node_id, "a-0000", uuid=uuid, vcore=1000, memory=2**30)


def test_a_task_is_asked_after_accept_runs_its_duration_and_is_released_then_the_app_removed():
    cluster, clock, sender = make()
    cluster.start()
    kind, nodes = sender.sent[0]
    assert kind == "node" and [n.nodeID for n in nodes.nodes] == ["n-0000", "n-0001", "e-0000"]
    assert nodes.nodes[2].attributes["si/node-partition"] == "edge"
    cluster.tick()
    assert len(sender.sent) == 1  # the app arrives at t=1
    clock.now += 1
    cluster.tick()
    kind, apps = sender.sent[-1]
    new = apps.new[0]
    assert (new.applicationID, new.queueName, new.ugi.user, list(new.ugi.groups), new.tags["namespace"]) == \
        ("a-0000", "root.a", "alice", ["dev"], "ns1")
    cluster.update_application(si_pb2.ApplicationResponse(accepted=[si_pb2.AcceptedApplication(applicationID="a-0000")]))
    kind, asks = sender.sent[-1]
    assert kind == "allocation" and [a.allocationKey for a in asks.asks] == ["a-0000-t0000", "a-0000-t0001"]
    assert asks.asks[0].priority == 4 and asks.asks[0].maxAllocations == 1
    clock.now += 0.25
    cluster.update_allocation(si_pb2.AllocationResponse(new=[task("a-0000-t0000", "n-0000", "u1"),
                                                              task("a-0000-t0001", "n-0001", "u2")]))
    assert cluster.stats.latencies == [0.25, 0.25]
    clock.now += 4.9
    cluster.tick()
    assert sender.sent[-1][0] == "allocation"  # nothing new: the tasks still run
    clock.now += 0.2
    cluster.tick()
    releases = [r for k, r in sender.sent if k == "allocation" and r.HasField("releases")][0]
    assert sorted(r.UUID for r in releases.releases.allocationsToRelease) == ["u1", "u2"]
    assert all(r.terminationType == si_pb2.STOPPED_BY_RM for r in releases.releases.allocationsToRelease)
    kind, remove = sender.sent[-1]
    assert kind == "application" and remove.remove[0].applicationID == "a-0000"
    assert cluster.finished and cluster.app_outcomes() == {"Completed": 1}
    assert cluster.validator.violations == []


def test_the_replay_snapshot_has_the_app_nodes_with_running_tasks_and_pending_asks():
    cluster, clock, sender = make()
    assert cluster.recoverable_state().nodes == []  # nothing reported yet: nothing to replay
    cluster.start()
    clock.now += 1
    cluster.tick()
    cluster.update_application(si_pb2.ApplicationResponse(accepted=[si_pb2.AcceptedApplication(applicationID="a-0000")]))
    cluster.update_allocation(si_pb2.AllocationResponse(new=[task("a-0000-t0000", "n-0001", "u1")]))
    snap = cluster.recoverable_state()
    assert [a.applicationID for a in snap.applications] == ["a-0000"]
    existing = {n.nodeID: [a.allocationKey for a in n.existingAllocations] for n in snap.nodes}
    assert existing == {"n-0000": [], "n-0001": ["a-0000-t0000"], "e-0000": []}
    assert [a.allocationKey for a in snap.asks] == ["a-0000-t0001"]
    # accepted again after the replay: the asks are not sent a second time
    before = len(sender.sent)
    cluster.update_application(si_pb2.ApplicationResponse(accepted=[si_pb2.AcceptedApplication(applicationID="a-0000")]))
    assert len(sender.sent) == before
    assert json.loads(cluster.get_state_dump())["tasks"] == {"asked": 1, "running": 1}


def test_a_rejected_app_is_not_removed_and_counts_as_rejected():
    cluster, clock, sender = make()
    cluster.start()
    clock.now += 1
    cluster.tick()
    cluster.update_application(si_pb2.ApplicationResponse(rejected=[si_pb2.RejectedApplication(
        applicationID="a-0000", reason="failed to place application a-0000")]))
    cluster.tick()
    assert not any(k == "application" and r.remove for k, r in sender.sent)
    assert cluster.finished and cluster.app_outcomes() == {"Rejected": 1}


def test_a_second_allocation_of_the_same_key_is_a_violation_and_does_not_start_the_task_twice():
    cluster, clock, sender = make()
    cluster.start()
    clock.now += 1
    cluster.tick()
    cluster.update_application(si_pb2.ApplicationResponse(accepted=[si_pb2.AcceptedApplication(applicationID="a-0000")]))
    cluster.update_allocation(si_pb2.AllocationResponse(new=[task("a-0000-t0000", "n-0000", "u1")]))
    cluster.update_allocation(si_pb2.AllocationResponse(new=[task("a-0000-t0000", "n-0001", "u9")]))
    assert [v.kind for v in cluster.validator.violations] == ["beyond-max-allocations"]
    assert cluster.tasks["a-0000-t0000"].alloc.UUID == "u1"
