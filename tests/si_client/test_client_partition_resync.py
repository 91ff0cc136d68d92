"""SchedulerAPI's partition resync (korral.v1 ResyncPartition) against the fake scheduler: the
capability is declared only by a hook that rebuilds partitions; a notice replays that partition
alone on the open streams, after each stream's replay-start marker, with no re-registration."""

from __future__ import annotations

import asyncio
import threading

from common import korral_pb2
from benchmarks.cluster_rm import ClusterRM
from si_client import ClientState
from tests.conftest import wait_until
from tests.si_builders import app, ask, node
from tests.si_client.rms import fast_api, is_attach


def _two_partition_rm(fake, partition_resync: bool, rm: ClusterRM | None = None,
                      **api_kw) -> tuple[ClusterRM, object]:
    api = fast_api(fake.address, **api_kw)
    rm = rm or ClusterRM("rm-test", partition_resync=partition_resync)
    rm.register(api)
    rm.report_nodes(node("na", "a"), node("nb", "b"))
    rm.report_apps(app("app-a", partition="a"), app("app-b", partition="b"))
    wait_until(lambda: len(rm.accepted_apps) == 2 and len(rm.accepted_nodes) == 2, 10, "nodes and apps accepted")
    rm.report_asks(ask("ka", "app-a", "a"), ask("kb", "app-b", "b"))
    wait_until(lambda: len(rm.running) == 2, 10, "ka and kb running")
    return rm, api


def test_only_a_hook_that_rebuilds_partitions_declares_it(fake):
    rm, api = _two_partition_rm(fake, partition_resync=False)
    api.close()
    rm2, api2 = ClusterRM("rm-2", partition_resync=True), fast_api(fake.address)
    rm2.register(api2)
    wait_until(lambda: len(fake.subscriptions) == 2, 10, "both subscribed")
    assert [s.partitionResync for s in fake.subscriptions] == [False, True]
    api2.close()


def test_a_resync_notice_replays_that_partition_alone_after_the_markers(fake):
    rm, api = _two_partition_rm(fake, partition_resync=True)
    # the scheduler lost partition a: the fake forgets what a held
    with fake.lock:
        del fake.apps["app-a"]
        del fake.nodes["na"]
        for uuid in [u for u, a in fake.allocs.items() if a[0] == "na"]:
            del fake.allocs[uuid]
    before = len(fake.log)
    fake.push_notice("rm-test", korral_pb2.SchedulerNotice(resyncPartition=korral_pb2.ResyncPartition(
        partition="a", epoch=7, reason="partition [rm-test]a lost epoch 3")))
    wait_until(lambda: api.partition_resyncs == 1, 10, "partition a replayed")
    assert rm.partition_replays == ["a"]
    assert fake.register_count == 1 and api.reconnects == 0 and not rm.lost  # no re-registration
    after = fake.log[before:]
    for kind in ("application", "node", "allocation"):
        of_kind = [r for k, r in after if k == kind]
        assert of_kind and is_attach(of_kind[0]), f"{kind} stream: the marker comes first"
    apps = [a.applicationID for k, r in after if k == "application" for a in r.new]
    nodes = [(n.nodeID, [e.allocationKey for e in n.existingAllocations]) for k, r in after if k == "node"
             for n in r.nodes]
    on_na = sorted(k for k, a in rm.running.items() if a.nodeID == "na")  # the fake ignores partitions
    assert apps == ["app-a"] and [(n, sorted(keys)) for n, keys in nodes] == [("na", on_na)]
    # the streams stayed open: scheduling goes on in both partitions, nothing doubled
    rm.report_asks(ask("ka2", "app-a", "a"), ask("kb2", "app-b", "b"))
    wait_until(lambda: {"ka2", "kb2"} <= rm.running.keys(), 10, "ka2 and kb2 running")
    assert rm.violations == [] and api.state is ClientState.RUNNING
    api.close()


def test_sends_made_during_a_partition_replay_follow_it(fake):
    rm, api = _two_partition_rm(fake, partition_resync=True)
    with fake.lock:
        del fake.apps["app-a"]
        del fake.nodes["na"]
    verdict = type(rm).update_application

    def send_during_the_replay(response):  # the replay waits for this verdict: ka3 is sent meanwhile
        verdict(rm, response)
        if any(a.applicationID == "app-a" for a in response.accepted):
            rm.report_asks(ask("ka3", "app-a", "a"))

    rm.update_application = send_during_the_replay  # type: ignore[method-assign]
    before = len(fake.log)
    fake.push_notice("rm-test", korral_pb2.SchedulerNotice(resyncPartition=korral_pb2.ResyncPartition(
        partition="a", epoch=7, reason="lost")))
    wait_until(lambda: api.partition_resyncs == 1 and "ka3" in rm.running, 10, "replayed, ka3 running")
    after = fake.log[before:]
    replayed_node = next(i for i, (k, r) in enumerate(after) if k == "node" and r.nodes)
    ka3 = next(i for i, (k, r) in enumerate(after)
               if k == "allocation" and any(a.allocationKey == "ka3" for a in r.asks))
    assert replayed_node < ka3 and rm.violations == []  # held until the replay was sent
    api.close()


class _LoopHookRM(ClusterRM):
    """An RM on an event loop (the Kubernetes shim's shape): its hook is a coroutine, and the loop
    makes a send right after the snapshot, before the client thread has taken the hook's return."""

    async def recoverable_partition_state(self, partition: str):
        snapshot = ClusterRM.recoverable_partition_state(self, partition)
        asyncio.get_running_loop().call_soon(self.report_asks, ask("ka3", "app-a", "a"))
        return snapshot


def test_a_send_right_after_a_coroutine_hooks_snapshot_is_not_taken_as_covered(fake):
    """It is not in the snapshot: sent before the marker, rmproxy would drop its part for the
    partition and the ask would never be scheduled (the shim's pools e2e saw a pod never bound)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="rm-loop", daemon=True)
    thread.start()
    try:
        rm, api = _two_partition_rm(fake, True, _LoopHookRM("rm-test", partition_resync=True), loop=loop)
        with fake.lock:  # the scheduler lost partition a
            del fake.apps["app-a"]
            del fake.nodes["na"]
        before = len(fake.log)
        fake.push_notice("rm-test", korral_pb2.SchedulerNotice(resyncPartition=korral_pb2.ResyncPartition(
            partition="a", epoch=7, reason="lost")))
        wait_until(lambda: api.partition_resyncs == 1 and "ka3" in rm.running, 10, "replayed, ka3 running")
        allocation = [r for k, r in fake.log[before:] if k == "allocation"]
        marker = next(i for i, r in enumerate(allocation) if is_attach(r))
        ka3 = next(i for i, r in enumerate(allocation) if any(a.allocationKey == "ka3" for a in r.asks))
        assert marker < ka3 and rm.violations == []  # after the marker: it reaches the rebuilt partition
        api.close()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
