"""SchedulerAPI against a real stack (`korral up`): recovery after rmproxy and worker restarts."""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from rmproxy.client import ClientState
from rmproxy.bench.cluster_rm import scheduler_view
from common import si_pb2
from tests.client.rms import StatefulRM, app, ask, fast_api, node, wait_until

CONFIG = """
partitions:
  - name: default
    placementrules: [{name: provided, create: true}]
    queues: [{name: root, submitacl: '*'}]
"""


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


def rm_view(rm: StatefulRM) -> dict[str, tuple[str, str]]:
    with rm.state_lock:
        return {k: (a.UUID, a.nodeID) for k, a in rm.running.items()}


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
    rm = StatefulRM()
    api = fast_api(stack.si_address)
    api.register_resource_manager(
        si_pb2.RegisterResourceManagerRequest(rmID="rm-client", policyGroup="queues", config=CONFIG), rm)
    try:
        rm.add_node(api, node("n1"))
        rm.add_node(api, node("n2"))
        rm.add_app(api, app("app-1"))
        assert wait_until(lambda: len(rm.accepted_nodes) == 2 and rm.accepted_apps, 20)
        for i in range(6):
            rm.add_ask(api, ask(f"k{i}", vcore=500, memory=512))
        assert wait_until(lambda: len(rm.running) == 6, 20)
        before = rm_view(rm)

        if victim == "worker":
            assert wait_until(lambda: owner_pid(stack), 10)
            pid = owner_pid(stack)
        else:
            pid = stack.pids["rmproxy"]
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: api.reconnects >= 1 and api.state is ClientState.RUNNING, 60)
        assert rm.lost and rm.restored >= 1

        # the replayed allocations are held by the scheduler exactly as the RM holds them
        assert wait_until(lambda: view_or_none(stack.rest_address) == before, 20), \
            (view_or_none(stack.rest_address), before)
        # and scheduling goes on; no replayed key was allocated again
        rm.add_ask(api, ask("k-after", vcore=500, memory=512))
        assert wait_until(lambda: "k-after" in rm.running, 20)
        assert sum(1 for a in rm.allocations if a.allocationKey == "k0") == 1
        assert wait_until(lambda: view_or_none(stack.rest_address) == rm_view(rm), 20)
    finally:
        api.close()


def test_korral_v1_extras_work_on_a_real_stack(stack_factory):
    """UpdateConfiguration (good and bad) and Shutdown through rmproxy's korral.v1 service.

    The RM's own state dump is checked against the fake scheduler only: rmproxy's REST side
    reads the answers from ``proxy.state_dumps`` while its gRPC service stores them on itself.
    """
    from rmproxy.client import SchedulerError

    stack = stack_factory(workers=1)
    rm = StatefulRM()
    api = fast_api(stack.si_address)
    api.register_resource_manager(
        si_pb2.RegisterResourceManagerRequest(rmID="rm-extras", policyGroup="queues", config=CONFIG), rm)
    try:
        rm.add_node(api, node("n1"))
        assert wait_until(lambda: rm.accepted_nodes == ["n1"], 20)
        api.update_configuration(si_pb2.UpdateConfigurationRequest(
            policyGroup="queues", config=CONFIG.replace("submitacl: '*'", "submitacl: 'alice'")))
        with pytest.raises(SchedulerError) as err:
            api.update_configuration(si_pb2.UpdateConfigurationRequest(
                policyGroup="queues", config="partitions: [{name: default, queues: [{name: root, bogus: 1}]}]"))
        assert "bogus" in err.value.details
        assert wait_until(lambda: "rm-extras" in registered_rms(stack), 10)
    finally:
        api.close()
    assert api.state is ClientState.CLOSED
    # Shutdown: the RM is Stopped at once and its registration is gone
    assert wait_until(lambda: registered_rms(stack) == set(), 10), registered_rms(stack)
