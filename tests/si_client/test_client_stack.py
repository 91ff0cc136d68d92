"""SchedulerAPI against a real stack (`korral up`): recovery after rmproxy and worker restarts."""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from si_client import ClientState
from benchmarks.cluster_rm import ClusterRM, scheduler_view
from benchmarks.recovery import provided_partitions
from common import si_pb2
from tests.si_client.rms import fast_api
from tests.conftest import wait_until
from tests.si_builders import app, ask, node

CONFIG = provided_partitions("default")


def view_or_none(rest_address):
    """The scheduler's allocations, or None while its REST side is restarting or resyncing (503)."""
    try:
        return scheduler_view(rest_address)
    except OSError:
        return None


def registered_rms(stack) -> set[str] | None:
    try:
        with urllib.request.urlopen(f"http://{stack.rest_address}/ws/v1/korral/stack", timeout=5) as r:
            return {rm["rmID"] for rm in json.load(r)["rms"]}
    except OSError:
        return None


def owner_pid(stack) -> int | None:
    """Pid of the worker owning partition default of rm-client (None until the broker reports it)."""
    try:
        with urllib.request.urlopen(f"http://{stack.rest_address}/ws/v1/korral/stack", timeout=5) as r:
            workers = json.load(r)["cluster"].get("workers", [])
    except OSError:
        return None
    return next((w["pid"] for w in workers if w["partition"] == "rm-client/default"), None)


@pytest.mark.parametrize("victim", ["rmproxy", "worker"])
def test_after_a_restart_the_client_replays_and_the_scheduler_holds_exactly_its_allocations(
        stack_factory, victim):
    stack = stack_factory(workers=2)
    rm = ClusterRM("rm-client")
    api = fast_api(stack.si_address)
    rm.register(api, CONFIG)
    try:
        rm.report_nodes(node("n1", vcore=4000, memory=4096), node("n2", vcore=4000, memory=4096))
        rm.report_apps(app("app-1", queue="root.a"))
        wait_until(lambda: len(rm.accepted_nodes) == 2 and rm.accepted_apps, 20, "two nodes and the app accepted")
        rm.report_asks(*[ask(f"k{i}", vcore=500, memory=512) for i in range(6)])
        wait_until(lambda: len(rm.running) == 6, 20, "six allocations")
        before = rm.rm_view()

        if victim == "worker":
            pid = wait_until(lambda: owner_pid(stack), 10, "the owner of the partition")
        else:
            pid = stack.pids["rmproxy"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: api.reconnects >= 1 and api.state is ClientState.RUNNING, 60, "the client recovered")
        assert rm.lost and rm.restored >= 1

        # the replayed allocations are held by the scheduler exactly as the RM holds them
        wait_until(lambda: view_or_none(stack.rest_address) == before, 20, f"the scheduler holding {before}")
        # and scheduling goes on; no replayed key was allocated again
        rm.report_asks(ask("k-after", vcore=500, memory=512))
        wait_until(lambda: "k-after" in rm.running, 20, "k-after running")
        assert rm.violations == []
        wait_until(lambda: view_or_none(stack.rest_address) == rm.rm_view(), 20, "the scheduler holding the RM's view")
    finally:
        api.close()


def test_korral_v1_extras_work_on_a_real_stack(stack_factory):
    """UpdateConfiguration (good and bad) and Shutdown through rmproxy's korral.v1 service.

    The RM's own state dump is checked against the fake scheduler only: rmproxy's REST side
    reads the answers from ``proxy.state_dumps`` while its gRPC service stores them on itself.
    """
    from si_client import SchedulerError

    stack = stack_factory(workers=1)
    rm = ClusterRM("rm-extras")
    api = fast_api(stack.si_address)
    rm.register(api, CONFIG)
    try:
        rm.report_nodes(node("n1"))
        wait_until(lambda: rm.accepted_nodes == {"n1"}, 20, "n1 accepted")
        api.update_configuration(si_pb2.UpdateConfigurationRequest(
            policyGroup="queues", config=CONFIG.replace("submitacl: '*'", "submitacl: 'alice'")))
        with pytest.raises(SchedulerError) as err:
            api.update_configuration(si_pb2.UpdateConfigurationRequest(
                policyGroup="queues", config="partitions: [{name: default, queues: [{name: root, bogus: 1}]}]"))
        assert "bogus" in err.value.details
        wait_until(lambda: "rm-extras" in (registered_rms(stack) or ()), 10, "rm-extras registered")
    finally:
        api.close()
    assert api.state is ClientState.CLOSED
    # Shutdown: the RM is Stopped at once and its registration is gone
    wait_until(lambda: registered_rms(stack) == set(), 10, "no RM registered")
