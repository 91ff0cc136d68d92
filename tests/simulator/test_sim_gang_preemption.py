"""The sim's gang and preemption handling, driven by hand: scheduler responses built in the test."""

from __future__ import annotations

import json

import pytest

from common import si_pb2
from simulator.checks import Validator
from simulator.cluster import SimCluster
from simulator.stats import Stats
from simulator.workload import WorkloadError, parse_workload, plan
from tests.si_builders import seed
from tests.simulator.doubles import Clock, Sender

WORKLOAD = """
nodes:
  - {name: n, count: 2, resources: {vcore: 2, memory: 2Gi}}
apps:
  - {name: g, count: 1, queue: root.t, tasks: 2, resources: {vcore: 1, memory: 1Gi}, duration: 5,
     gang: {style: Hard, timeout: 30}}
  - {name: v, count: 1, queue: root.low, tasks: 2, resources: {vcore: 1, memory: 1Gi}, duration: 5,
     preemption: {self: false, other: true}, arrival: {start: 1}}
  - {name: r, count: 1, queue: root.low, tasks: 1, resources: {vcore: 1, memory: 1Gi}, duration: 5,
     arrival: {start: 1}}
"""
GB = 2**30


def make(text=WORKLOAD):
    p = plan(parse_workload(text))
    clock, sender = Clock(), Sender()
    cluster = SimCluster(p, sender, clock, Validator({n.node_id: dict(n.resources) for n in p.nodes}),
                         Stats({"default": {"vcore": 4000}}))
    cluster.start()
    clock.now += 1
    cluster.tick()
    return cluster, clock, sender


def alloc(key, node, uuid=None, app="g-0000", placeholder=False, builders=seed):
    """A task (or placeholder) of ``app`` (gang g-0000's tasks are in task group g) on ``node``."""
    return builders.allocation(key, node, app, uuid=uuid, placeholder=placeholder,
                               task_group="g" if app == "g-0000" else "", vcore=1000, memory=GB)


def accept(cluster, *apps):
    cluster.update_application(si_pb2.ApplicationResponse(
        accepted=[si_pb2.AcceptedApplication(applicationID=a) for a in apps]))


def replaced(ph, ph_uuid, real_uuid):
    return si_pb2.AllocationRelease(applicationID="g-0000", UUID=ph_uuid, allocationKey=ph,
                                    terminationType=si_pb2.PLACEHOLDER_REPLACED,
                                    message=f"replacing uuid: {real_uuid}")


def placed_gang(cluster, sender):
    accept(cluster, "g-0000")
    cluster.update_allocation(si_pb2.AllocationResponse(new=[
        alloc("g-0000-ph0000", "n-0000", "p0", placeholder=True),
        alloc("g-0000-ph0001", "n-0001", "p1", placeholder=True)]))


def test_a_gang_app_is_submitted_as_the_shim_does_and_its_placeholders_go_first():
    cluster, clock, sender = make()
    app = [r for k, r in sender.sent if k == "application"][0].new[0]
    assert app.gangSchedulingStyle == "Hard" and app.executionTimeoutMilliSeconds == 30_000
    assert {k: q.value for k, q in app.placeholderAsk.resources.items()} == {"vcore": 2000, "memory": 2 * GB}
    assert json.loads(app.tags["yunikorn.apache.org/task-groups"]) == [
        {"name": "g", "minMember": 2, "minResource": {"vcore": 1000, "memory": GB}}]
    assert abs(int(app.tags["yunikorn.apache.org/creationTime"]) - __import__("time").time()) < 5
    accept(cluster, "g-0000")
    asks = [a for k, r in sender.sent if k == "allocation" for a in r.asks]
    assert [(a.allocationKey, a.placeholder, a.taskGroupName) for a in asks] == [
        ("g-0000-ph0000", True, "g"), ("g-0000-ph0001", True, "g")]
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("g-0000-ph0000", "n-0000", "p0", placeholder=True)]))
    assert len(sender.asks()) == 2  # not the whole gang yet: the real tasks wait
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("g-0000-ph0001", "n-0001", "p1", placeholder=True)]))
    reals = [a for k, r in sender.sent if k == "allocation" for a in r.asks][2:]
    assert [(a.allocationKey, a.placeholder, a.taskGroupName) for a in reals] == [
        ("g-0000-t0000", False, "g"), ("g-0000-t0001", False, "g")]
    assert cluster.stats.placeholders["allocated"] == 2 and cluster.stats.latencies == []


def test_an_atomic_in_place_replacement_is_confirmed_and_clean():
    cluster, clock, sender = make()
    placed_gang(cluster, sender)
    cluster.update_allocation(si_pb2.AllocationResponse(
        new=[alloc("g-0000-t0000", "n-0000", "r0")], released=[replaced("g-0000-ph0000", "p0", "r0")]))
    assert cluster.validator.violations == []
    confirm = sender.releases()[-1]
    assert (confirm.UUID, confirm.terminationType) == ("p0", si_pb2.PLACEHOLDER_REPLACED)
    assert cluster.placeholders["g-0000-ph0000"].state == "replaced"
    assert cluster.tasks["g-0000-t0000"].state == "running"
    assert cluster.validator.node_used["n-0000"] == {"vcore": 1000, "memory": GB}  # never twice


def test_a_replacement_split_over_two_responses_or_on_another_node_is_a_violation():
    cluster, clock, sender = make()
    placed_gang(cluster, sender)
    cluster.update_allocation(si_pb2.AllocationResponse(released=[replaced("g-0000-ph0000", "p0", "r0")]))
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("g-0000-t0000", "n-0000", "r0")]))
    cluster.update_allocation(si_pb2.AllocationResponse(
        new=[alloc("g-0000-t0001", "n-0000", "r1")], released=[replaced("g-0000-ph0001", "p1", "r1")]))
    kinds = [v.kind for v in cluster.validator.violations]
    assert kinds == ["replacement-not-atomic", "replacement-elsewhere"]
    assert "g-0000-t0001 replaced placeholder g-0000-ph0001 of node n-0001 on node n-0000" in \
        cluster.validator.violations[1].message


def test_soft_fallback_sends_the_real_asks_and_a_hard_failure_fails_the_app():
    text = WORKLOAD.replace("style: Hard", "style: Soft")
    cluster, clock, sender = make(text)
    accept(cluster, "g-0000")
    cluster.update_allocation(si_pb2.AllocationResponse(releasedAsks=[si_pb2.AllocationAskRelease(
        applicationID="g-0000", allocationKey=k, terminationType=si_pb2.TIMEOUT)
        for k in ("g-0000-ph0000", "g-0000-ph0001")]))
    cluster.update_application(si_pb2.ApplicationResponse(updated=[si_pb2.UpdatedApplication(
        applicationID="g-0000", state="Resuming", message="ResourceReservationTimeout")]))
    assert sender.asks()[-2:] == ["g-0000-t0000", "g-0000-t0001"]
    assert cluster.stats.placeholders["timedout"] == 2

    cluster, clock, sender = make()
    accept(cluster, "g-0000")
    for state in ("Failing", "Failed"):
        cluster.update_application(si_pb2.ApplicationResponse(updated=[si_pb2.UpdatedApplication(
            applicationID="g-0000", state=state, message="ResourceReservationTimeout")]))
    cluster.tick()
    assert "g-0000-t0000" not in sender.asks()
    assert cluster.counts()["failed"] == 2
    removed = [r for k, r in sender.sent if k == "application" and r.remove]
    assert removed[0].remove[0].applicationID == "g-0000"
    assert cluster.app_outcomes()["Failed"] == 1


def preempt(key, uuid, app, by):
    return si_pb2.AllocationRelease(applicationID=app, UUID=uuid, allocationKey=key,
                                    terminationType=si_pb2.PREEMPTED_BY_SCHEDULER,
                                    message=f"preempted by scheduler to free up resources for ask {by} "
                                            f"of application x")


def test_a_victim_is_resubmitted_under_a_new_key_and_opt_outs_and_loops_are_caught():
    cluster, clock, sender = make()
    accept(cluster, "v-0000", "r-0000")
    cluster.update_allocation(si_pb2.AllocationResponse(new=[
        alloc("v-0000-t0000", "n-0000", "v0", app="v-0000"), alloc("r-0000-t0000", "n-0001", "q0", app="r-0000")]))
    asks = [a for k, r in sender.sent if k == "allocation" for a in r.asks]
    v_ask = next(a for a in asks if a.allocationKey == "v-0000-t0000")
    assert (v_ask.preemptionPolicy.allowPreemptSelf, v_ask.preemptionPolicy.allowPreemptOther) == (False, True)
    assert not next(a for a in asks if a.allocationKey == "r-0000-t0000").HasField("preemptionPolicy")
    # r's task is preempted for v's pending task: fine, and r's task comes back as r-0000-t0000-r1
    cluster.update_allocation(si_pb2.AllocationResponse(released=[preempt("r-0000-t0000", "q0", "r-0000", "v-0000-t0001")]))
    assert cluster.validator.violations == []
    assert sender.asks()[-1] == "r-0000-t0000-r1"
    assert cluster.stats.per_queue_preempted == {"default:root.low": 1}
    assert cluster.tasks["r-0000-t0000"].state == "preempted" and cluster.counts()["asked"] == 2
    # v's task opted out (allowPreemptSelf false), and r's re-submission preempting its preemptor is a loop
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("v-0000-t0001", "n-0001", "v1", app="v-0000")]))
    cluster.update_allocation(si_pb2.AllocationResponse(released=[preempt("v-0000-t0001", "v1", "v-0000", "r-0000-t0000-r1")]))
    kinds = sorted(v.kind for v in cluster.validator.violations)
    assert kinds == ["preempted-opted-out", "preemption-loop"]
    # the app completes once the re-submission is done too
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("r-0000-t0000-r1", "n-0001", "q1", app="r-0000")]))
    clock.now += 6
    cluster.tick()
    assert cluster.apps["r-0000"].outcome == "Completed"


def test_on_preempted_fail_fails_the_app():
    cluster, clock, sender = make(WORKLOAD.replace("tasks: 1,", "tasks: 1, on_preempted: fail,"))
    accept(cluster, "r-0000")
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("r-0000-t0000", "n-0001", "q0", app="r-0000")]))
    cluster.update_allocation(si_pb2.AllocationResponse(released=[preempt("r-0000-t0000", "q0", "r-0000", "x")]))
    cluster.tick()
    assert "r-0000-t0000-r1" not in sender.asks()
    assert cluster.apps["r-0000"].outcome == "Failed"


def test_the_replay_snapshot_reports_placeholders_as_placeholders():
    cluster, clock, sender = make()
    accept(cluster, "g-0000")
    cluster.update_allocation(si_pb2.AllocationResponse(new=[alloc("g-0000-ph0000", "n-0000", "p0", placeholder=True)]))
    snap = cluster.recoverable_state()
    existing = [a for n in snap.nodes for a in n.existingAllocations]
    assert [(a.allocationKey, a.UUID, a.placeholder, a.taskGroupName) for a in existing] == [
        ("g-0000-ph0000", "p0", True, "g")]
    assert [(a.allocationKey, a.placeholder) for a in snap.asks] == [("g-0000-ph0001", True)]
    app = next(a for a in snap.applications if a.applicationID == "g-0000")
    assert app.gangSchedulingStyle == "Hard" and "yunikorn.apache.org/creationTime" in app.tags


@pytest.mark.parametrize("fragment, message", [
    ("gang: {style: hard}", "gang.style must be Hard or Soft, got 'hard'"),
    ("gang: {members: 0}", "gang.members: must be an integer >= 1, got 0"),
    ("gang: {size: 3}", "gang: unknown key 'size'"),
    ("gang: 3", "gang must be a map"),
    ("preemption: {self: maybe}", "preemption.self must be true or false, got 'maybe'"),
    ("on_preempted: retry", "on_preempted must be resubmit or fail, got 'retry'"),
])
def test_bad_gang_and_preemption_keys_are_named(fragment, message):
    text = f"""
nodes: [{{name: n, resources: {{vcore: 1}}}}]
apps: [{{name: a, resources: {{vcore: 1}}, {fragment}}}]
"""
    with pytest.raises(WorkloadError) as err:
        parse_workload(text)
    assert any(e.startswith("app template 'a': ") and message in e for e in err.value.errors), err.value.errors
