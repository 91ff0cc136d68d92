"""SchedulerAPI against the fake scheduler: registration, streams, callbacks, recovery."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from common import korral_pb2, si_pb2
from benchmarks.cluster_rm import ClusterRM
from si_client import ClientState, NotConnectedError, ResourceManagerCallback, SchedulerAPI, SchedulerError
from tests.si_client.rms import Recorder, fast_api, is_attach, register, rm_with_node_and_app
from tests.conftest import wait_until
from tests.si_builders import allocation, app, ask, node


def test_register_then_updates_flow_through_the_three_streams_to_the_callbacks(fake):
    rec = Recorder()
    api = fast_api(fake.address)
    register(api, rec)
    assert api.state is ClientState.RUNNING
    api.update_node(si_pb2.NodeRequest(nodes=[node("n1")]))
    api.update_application(si_pb2.ApplicationRequest(new=[app("app-1")]))
    wait_until(lambda: rec.accepted_nodes == ["n1"] and rec.accepted_apps == ["app-1"], 10, "n1 and app-1 accepted")
    api.update_allocation(si_pb2.AllocationRequest(asks=[ask("k1"), ask("k2")]))
    wait_until(lambda: len(rec.allocations) == 2, 10, "two allocations")
    assert {a.allocationKey for a in rec.allocations} == {"k1", "k2"}
    assert all(a.nodeID == "n1" for a in rec.allocations)
    # rmID was filled in on every request, attach requests included
    assert all(r.rmID == "rm-test" for reqs in fake.received.values() for r in reqs)
    api.close()
    assert fake.shutdowns == ["rm-test"]
    assert api.state is ClientState.CLOSED


def test_register_refused_raises_with_the_servers_reason(fake):
    fake.refuse_register = "registration of RM failed: queue config is not set"
    api = fast_api(fake.address)
    with pytest.raises(SchedulerError) as err:
        register(api, Recorder())
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "queue config is not set" in str(err.value)
    assert api.state is ClientState.FAILED
    with pytest.raises(NotConnectedError, match="queue config is not set"):
        api.update_node(si_pb2.NodeRequest(nodes=[node("n1")]))
    api.close()


def test_empty_rm_id_is_refused_before_any_call(fake):
    with pytest.raises(SchedulerError, match="empty rmID"):
        register(fast_api(fake.address), Recorder(), rm_id="")
    assert fake.register_count == 0


def test_sending_before_registration_raises(fake):
    api = fast_api(fake.address)
    with pytest.raises(NotConnectedError, match="New"):
        api.update_allocation(si_pb2.AllocationRequest(asks=[ask("k1")]))
    api.close()


def test_unreachable_scheduler_fails_registration_with_unavailable():
    api = SchedulerAPI("127.0.0.1:1", rpc_timeout=1.0)
    with pytest.raises(SchedulerError) as err:
        register(api, Recorder())
    assert err.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    api.close()


def test_concurrent_senders_lose_nothing_and_callbacks_never_overlap(fake):
    rec = Recorder()
    api = fast_api(fake.address)
    register(api, rec)
    api.update_node(si_pb2.NodeRequest(nodes=[node(f"n{i}", vcore=100_000, memory=100_000) for i in range(4)]))
    api.update_application(si_pb2.ApplicationRequest(new=[app("app-1")]))
    wait_until(lambda: len(rec.accepted_apps) == 1 and len(rec.accepted_nodes) == 4, 10, "app and 4 nodes accepted")

    def sender(t):
        for i in range(50):
            api.update_allocation(si_pb2.AllocationRequest(asks=[ask(f"t{t}-{i}", vcore=10, memory=10)]))

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert api.flush(5.0)
    wait_until(lambda: len(rec.allocations) == 400, 10, "400 allocations")
    assert len({a.allocationKey for a in rec.allocations}) == 400
    assert rec.overlaps == 0
    api.close()


def test_server_restart_reconnects_reregisters_and_replays_in_shim_order(fake):
    api = fast_api(fake.address)
    rm = rm_with_node_and_app(api)
    rm.report_asks(ask("k1"))
    wait_until(lambda: len(rm.running) == 1, 10, "k1 running")

    before = len(fake.log)
    fake.restart()
    wait_until(lambda: api.state is ClientState.RECOVERING or api.reconnects == 1, 10, "the client recovering")
    # sent while the client is cut off: held, then delivered after the replay
    rm.report_asks(ask("k2"))
    wait_until(lambda: api.reconnects == 1 and api.state is ClientState.RUNNING, 10, "the client running again")
    assert rm.lost and rm.restored == 1
    assert fake.registered.keys() == {"rm-test"}
    wait_until(lambda: "k2" in rm.running, 10, "k2 running")
    # the running allocation came back as an existing allocation of its node, not reallocated
    assert fake.allocs[rm.running["k1"].UUID][3] == "k1"
    replayed = [(kind, req) for kind, req in fake.log[before:] if not is_attach(req)]
    kinds = [kind for kind, _ in replayed]
    assert kinds.index("application") < kinds.index("node") < kinds.index("allocation")
    node_req = next(r for k, r in replayed if k == "node")
    assert [a.allocationKey for a in node_req.nodes[0].existingAllocations] == ["k1"]
    assert rm.violations == []  # k2 (nor anything else) was not allocated twice
    api.close()


def test_reregister_notice_triggers_resync_and_replay(fake):
    api = fast_api(fake.address)
    rm = rm_with_node_and_app(api)
    fake.request_reregister("rm-test")
    wait_until(lambda: api.reconnects == 1 and api.state is ClientState.RUNNING, 10, "the client running again")
    assert fake.register_count == 2
    assert "re-register" in rm.lost[0]
    assert "n1" in fake.nodes and "app-1" in fake.apps
    rm.report_asks(ask("k1"))
    wait_until(lambda: "k1" in rm.running, 10, "k1 running")
    api.close()


def test_initial_registration_replays_an_existing_state(fake):
    rm = ClusterRM("rm-test")
    rm.apps["app-1"] = app("app-1")
    rm.nodes["n1"] = node("n1")
    rm.running["k0"] = allocation("k0", "n1")
    rm.pending["k1"] = ask("k1")
    api = fast_api(fake.address)
    rm.register(api)
    # register returned after the apps and nodes got their verdicts
    assert rm.accepted_apps == {"app-1"} and rm.accepted_nodes == {"n1"}
    assert "k0" in fake.allocs
    wait_until(lambda: "k1" in rm.running, 10, "k1 running")
    api.close()


def test_without_a_replay_hook_a_lost_connection_fails_the_client_loudly(fake):
    rec = Recorder()
    api = fast_api(fake.address)
    register(api, rec)
    fake.restart()
    wait_until(lambda: api.state is ClientState.FAILED, 10, "the client failed")
    with pytest.raises(NotConnectedError, match="no RecoverableState"):
        api.update_node(si_pb2.NodeRequest(nodes=[node("n1")]))
    assert rec.lost
    api.close()


def test_notices_reach_send_event_scheduling_states_and_the_state_dump_plugin(fake):
    rm = Recorder()
    api = fast_api(fake.address)
    register(api, rm)
    api.update_node(si_pb2.NodeRequest(nodes=[node("n1")]))
    wait_until(lambda: "rm-test" in fake._notices and rm.accepted_nodes, 10, "subscribed, n1 accepted")
    fake.push_notice("rm-test", korral_pb2.SchedulerNotice(events=korral_pb2.EventBatch(
        events=[si_pb2.EventRecord(type=si_pb2.EventRecord.APP, objectID="app-1", reason="r")])))
    fake.push_notice("rm-test", korral_pb2.SchedulerNotice(schedulingStates=korral_pb2.SchedulingStates(
        states=[si_pb2.UpdateContainerSchedulingStateRequest(
            allocationKey="k1", state=si_pb2.UpdateContainerSchedulingStateRequest.FAILED)])))
    fake.push_notice("rm-test", korral_pb2.SchedulerNotice(
        stateDumpRequest=korral_pb2.StateDumpRequest(requestID="d1")))
    wait_until(lambda: rm.events and rm.states and fake.dumps, 10, "an event, a state and a dump")
    assert rm.events[0].objectID == "app-1"
    assert rm.states[0].allocationKey == "k1"
    assert fake.dumps[0].requestID == "d1" and fake.dumps[0].json == '{"nodes": 1}'
    api.close()


def test_update_configuration_passes_through_and_errors_carry_the_reason(fake):
    api = fast_api(fake.address)
    register(api, Recorder())
    api.update_configuration(si_pb2.UpdateConfigurationRequest(config="partitions: []"))
    assert fake.config_updates[0].rmID == "rm-test"
    with pytest.raises(SchedulerError, match="update of configuration failed"):
        api.update_configuration(si_pb2.UpdateConfigurationRequest(config="invalid"))
    api.close()


def test_async_flavour_runs_async_callbacks_on_the_event_loop(fake):
    seen = []

    class AsyncRM(ResourceManagerCallback):
        async def update_node(self, response):
            seen.append((asyncio.get_running_loop(), [n.nodeID for n in response.accepted]))

    async def main():
        api = fast_api(fake.address)
        await api.register_resource_manager_async(
            si_pb2.RegisterResourceManagerRequest(rmID="rm-async"), AsyncRM())
        api.update_node(si_pb2.NodeRequest(nodes=[node("n1")]))
        # waited for off the loop: the callback runs on it
        await asyncio.to_thread(wait_until, lambda: seen, 5, "the async update_node callback")
        await api.close_async()
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert seen and seen[0][0] is loop and seen[0][1] == ["n1"]


def test_sends_made_during_recovery_are_neither_lost_nor_doubled(fake):
    import random

    from si_client import Backoff

    api = SchedulerAPI(fake.address, backoff=Backoff(base=0.4, cap=0.4, rng=random.Random(1)))
    rm = rm_with_node_and_app(api)
    fake.restart()
    wait_until(lambda: api.state is ClientState.RECOVERING, 10, "the client recovering")
    rm.report_apps(app("app-2"))  # during the backoff: held, and covered by the snapshot
    rm.report_asks(ask("k-held", "app-2"))
    wait_until(lambda: api.state is ClientState.RUNNING and api.reconnects == 1, 10, "the client running again")
    rm.report_asks(ask("k-after", "app-2"))  # after: straight through
    wait_until(lambda: {"k-held", "k-after"} <= set(rm.running), 10, "k-held and k-after running")
    assert rm.violations == []  # among them: no application rejected
    assert sorted(fake.apps) == ["app-1", "app-2"]
    new_app_requests = [a.applicationID for k, r in fake.log if k == "application" for a in r.new]
    assert new_app_requests.count("app-2") == 1  # in the replay only, not again from the held sends
    api.close()


def test_a_send_the_rm_makes_just_after_its_snapshot_is_delivered_after_the_replay(fake):
    """An async RM's loop runs on after its snapshot while the client's thread wakes up: a send
    made then is not covered by the snapshot and must not be taken for one it covers (a shim
    taking over as leader lost a new application so)."""
    from si_client import RecoverableState, RecoverySnapshot

    class LateSender(ResourceManagerCallback, RecoverableState):
        async def recoverable_state(self):
            # runs on the loop just after the snapshot, before the client's thread can read it
            asyncio.get_running_loop().call_soon(api.update_application,
                                                 si_pb2.ApplicationRequest(new=[app("app-late")]))
            return RecoverySnapshot(applications=[app("app-1")])

    async def main():
        await api.register_resource_manager_async(
            si_pb2.RegisterResourceManagerRequest(rmID="rm-late", policyGroup="queues"), LateSender())
        await asyncio.to_thread(wait_until, lambda: "app-late" in fake.apps, 10, "the late application")
        await api.close_async()

    api = fast_api(fake.address)
    asyncio.run(main())
    assert sorted(fake.apps) == ["app-1", "app-late"]


@pytest.mark.parametrize("method, request_", [
    ("update_node", si_pb2.AllocationRequest()),
    ("update_allocation", si_pb2.NodeRequest()),
    ("update_application", {"new": []}),
], ids=["ask on the node stream", "node on the allocation stream", "a dict"])
def test_a_request_of_the_wrong_type_is_refused_naming_what_was_expected(fake, method, request_):
    api = fast_api(fake.address)
    register(api, Recorder())
    with pytest.raises(TypeError, match=r"takes \w+Request of SI revision seed \(common.si_pb2\), got"):
        getattr(api, method)(request_)
    assert api.state is ClientState.RUNNING  # the streams are untouched
    api.close()


class _DeafPort:
    """Listens on a port and closes every connection at once, counting them: a server that is
    down for gRPC, where each of the channel's connection attempts can be seen."""

    def __init__(self, port: int) -> None:
        import socket

        self.attempts = 0
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:  # the accept timeout: look at the stop flag again
                continue
            self.attempts += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def test_a_long_outage_does_not_slow_the_channels_reconnects_beyond_the_clients_backoff(fake):
    """gRPC's own reconnect backoff (1 s, x1.6, up to 120 s) made a recovering RM wait ~7 s more
    after a 30 s rmproxy outage, and up to two minutes after a longer one (found by the chaos
    soak: RMs came back seconds after rmproxy). The channel now retries at the client's pace."""
    rm = ClusterRM("rm-test")
    api = fast_api(fake.address)  # backoff cap 0.2 s
    register(api, rm)
    fake.stop()
    deaf = _DeafPort(fake.port)
    try:
        wait_until(lambda: api.state is ClientState.RECOVERING, 10, "the client recovering")
        # 15 attempts: ~3 s at the client's pace; with gRPC's default backoff, over 5 minutes
        wait_until(lambda: deaf.attempts >= 15, 20, "15 connection attempts", lambda: f"{deaf.attempts} attempts")
    finally:
        deaf.close()
    fake.start()
    wait_until(lambda: api.state is ClientState.RUNNING and api.reconnects == 1, 10, "the client running again")
    api.close()


def test_the_default_channel_reconnects_at_the_clients_pace():
    from si_client import Backoff, channel_options

    opts = dict(channel_options(Backoff(cap=2.0)))
    assert opts["grpc.max_reconnect_backoff_ms"] == 2000 and opts["grpc.initial_reconnect_backoff_ms"] == 100
    assert opts["grpc.max_receive_message_length"] == 64 << 20
