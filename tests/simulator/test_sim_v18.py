"""``korral sim --si-revision v1.8``: the simulated RM speaking SI v1.8, by hand (responses built
in the test) and on a real stack (placement, gang replacement, preemption, recovery)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from rich.console import Console

from common import si_v18_pb2 as si18
from simulator.checks import Validator
from simulator.cluster import SimCluster
from simulator.presets import PRESETS
from simulator.runner import SimOptions, simulate
from simulator.stats import Stats
from simulator.wire import wire_for
from simulator.workload import parse_workload, plan
from tests.si_builders import v18
from tests.simulator.doubles import Clock, Sender
from tests.simulator.test_sim_gang_preemption import WORKLOAD, alloc as gang_alloc
from tests.simulator.test_sim_run import RESTART, small_plan

QUIET = Console(file=open("/dev/null", "w"))


def make():
    p = plan(parse_workload(WORKLOAD))
    clock, sender = Clock(), Sender()
    cluster = SimCluster(p, sender, clock, Validator({n.node_id: dict(n.resources) for n in p.nodes}),
                         Stats({"default": {"vcore": 4000}}), wire_for("v1.8"))
    cluster.start()
    clock.now += 1
    cluster.tick()
    return cluster, clock, sender


def alloc(key, node, app="g-0000", placeholder=False):
    return gang_alloc(key, node, app=app, placeholder=placeholder, builders=v18)


def sent_allocations(sender) -> list:
    return [a for k, r in sender.sent if k == "allocation" for a in r.allocations]


def accept(cluster, *apps):
    cluster.update_application(si18.ApplicationResponse(accepted=[si18.AcceptedApplication(applicationID=a)
                                                                  for a in apps]))


def test_asks_go_out_as_allocations_without_node_and_releases_name_the_key():
    cluster, clock, sender = make()
    assert all(type(r).__module__ == "common.si_v18_pb2" for _, r in sender.sent)
    accept(cluster, "g-0000")
    assert [(a.allocationKey, a.nodeID, a.placeholder) for a in sent_allocations(sender)] == [
        ("g-0000-ph0000", "", True), ("g-0000-ph0001", "", True)]
    cluster.update_allocation(si18.AllocationResponse(new=[alloc("g-0000-ph0000", "n-0000", placeholder=True),
                                                           alloc("g-0000-ph0001", "n-0001", placeholder=True)]))
    cluster.update_allocation(si18.AllocationResponse(
        new=[alloc("g-0000-t0000", "n-0000")],
        released=[si18.AllocationRelease(applicationID="g-0000", allocationKey="g-0000-ph0000",
                                         terminationType=si18.PLACEHOLDER_REPLACED,
                                         message="replacing allocationKey: g-0000-t0000")]))
    assert cluster.validator.violations == []
    confirm = [x for k, r in sender.sent if k == "allocation" for x in r.releases.allocationsToRelease][-1]
    assert (confirm.allocationKey, confirm.terminationType) == ("g-0000-ph0000", si18.PLACEHOLDER_REPLACED)
    assert cluster.tasks["g-0000-t0000"].state == "running"


def test_the_replay_reports_running_work_with_its_node_and_pending_work_without():
    cluster, clock, sender = make()
    accept(cluster, "g-0000")
    cluster.update_allocation(si18.AllocationResponse(new=[alloc("g-0000-ph0000", "n-0000", placeholder=True)]))
    snap = cluster.recoverable_state()
    assert not snap.asks and [n.nodeID for n in snap.nodes] == ["n-0000", "n-0001"]
    assert sorted((a.allocationKey, a.nodeID, a.placeholder) for a in snap.allocations) == [
        ("g-0000-ph0000", "n-0000", True), ("g-0000-ph0001", "", True)]
    # the scheduler confirms what was recovered: not a second allocation
    cluster.update_allocation(si18.AllocationResponse(new=[alloc("g-0000-ph0000", "n-0000", placeholder=True)]))
    assert cluster.validator.violations == []


def test_a_recovered_allocation_confirmed_after_its_task_finished_is_not_a_second_allocation():
    """The replay reports a running task; it ends before the scheduler's confirmation arrives.
    The confirmation is still the recovered allocation, not a new one (seen in CI under load)."""
    cluster, clock, sender = make()
    accept(cluster, "r-0000")
    cluster.update_allocation(si18.AllocationResponse(new=[alloc("r-0000-t0000", "n-0000", app="r-0000")]))
    snap = cluster.recoverable_state()
    assert ("r-0000-t0000", "n-0000") in [(a.allocationKey, a.nodeID) for a in snap.allocations]
    clock.now += 10
    cluster.tick()
    assert cluster.tasks["r-0000-t0000"].state == "done"
    cluster.update_allocation(si18.AllocationResponse(new=[alloc("r-0000-t0000", "n-0000", app="r-0000")]))
    assert cluster.validator.violations == []
    # only once: the same allocation again is a scheduler's second decision
    cluster.update_allocation(si18.AllocationResponse(new=[alloc("r-0000-t0000", "n-0000", app="r-0000")]))
    assert [v.kind for v in cluster.validator.violations] == ["beyond-max-allocations"]


def test_a_given_up_ask_is_a_release_of_its_key_and_a_rejection_is_a_rejected_allocation():
    cluster, clock, sender = make()
    accept(cluster, "g-0000")
    cluster.update_allocation(si18.AllocationResponse(
        released=[si18.AllocationRelease(applicationID="g-0000", allocationKey="g-0000-ph0000",
                                         terminationType=si18.TIMEOUT)],
        rejectedAllocations=[si18.RejectedAllocation(applicationID="g-0000", allocationKey="g-0000-ph0001",
                                                     reason="no")]))
    assert cluster.placeholders["g-0000-ph0000"].state == "timedout"
    assert cluster.placeholders["g-0000-ph0001"].state == "rejected"
    assert cluster.stats.placeholders["timedout"] == 1


def test_the_small_preset_on_a_real_stack_as_a_v18_rm(stack_factory):
    stack = stack_factory(workers=1)
    s = simulate(small_plan(), SimOptions(si_address=stack.si_address, progress=False, si_revision="v1.8"),
                 QUIET).summary
    assert s["violations"] == [] and s["apps"] == {"Completed": 6}


@pytest.mark.parametrize("preset, check", [
    ("gang", lambda s: s["placeholders"] == {"allocated": 50, "replaced": 50, "timedout": 0, "released": 0}),
    ("preemption", lambda s: s["preempted"] == 30 and s["tasks"]["done"] == 130),
])
def test_gang_and_preemption_presets_as_a_v18_rm(stack_factory, preset, check):
    stack = stack_factory(workers=1)
    s = simulate(plan(parse_workload(PRESETS[preset][0])),
                 SimOptions(si_address=stack.si_address, progress=False, si_revision="v1.8"), QUIET).summary
    assert s["violations"] == [] and set(s["apps"]) == {"Completed"}
    assert check(s), s


def test_killing_rmproxy_mid_run_a_v18_rm_recovers_by_its_allocations(stack_factory):
    stack = stack_factory(workers=2)
    killer = threading.Timer(1.2, lambda: os.kill(stack.pids["rmproxy"], signal.SIGKILL))
    killer.start()
    result = simulate(small_plan(RESTART), SimOptions(si_address=stack.si_address, progress=False,
                                                      si_revision="v1.8"), QUIET)
    killer.join()
    assert result.reconnects >= 1
    assert result.summary["violations"] == []
    assert result.summary["apps"] == {"Completed": 10}
