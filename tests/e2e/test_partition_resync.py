"""One lost partition rebuilt alone, on a real stack (docs/architecture.md, Recovery).

A ClusterRM that declares ``partitionResync`` runs a workload in two partitions; the worker of
one is killed with SIGKILL. rmproxy gives that partition an idle worker and asks the RM to replay
it (ResyncPartition): the RM never re-registers, the other partition keeps getting allocations
with no gap, the lost one comes back with its allocations, and nothing is allocated twice. An RM
of generated stubs only (SIRM) still gets the whole re-registration.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import grpc
import pytest

from benchmarks.cluster_rm import ClusterRM, scheduler_view
from benchmarks.recovery import TWO_PARTITIONS
from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from common.netutil import http_get_json
from tests.e2e.test_failover import Workload, owner_of
from tests.si_builders import app, ask, node
from tests.si_client.rms import fast_api

pytestmark = pytest.mark.timeout(180)

GAP_LIMIT = 1.5  # seconds without a new allocation in the partition that kept its worker


class TimedRM(ClusterRM):
    """A ClusterRM that notes when each new allocation arrived, by partition."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.arrivals: dict[str, list[float]] = {"default": [], "second": []}
        self.arrivals_lock = threading.Lock()

    def update_allocation(self, response) -> None:
        now = time.monotonic()
        with self.arrivals_lock:
            for a in response.new:
                self.arrivals.setdefault(a.partitionName, []).append(now)
        super().update_allocation(response)


def longest_gap(times: list[float], start: float, end: float) -> float:
    inside = [start] + [t for t in times if start <= t <= end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


def in_sync(rest: str, rm: ClusterRM, partition: str, app_id: str) -> bool:
    try:
        return scheduler_view(rest, partition) == {k: v for k, v in rm.rm_view().items() if k.startswith(app_id)}
    except OSError:  # the partition answers 503 while it has no worker
        return False


@pytest.mark.parametrize("stack_options", [{"workers": 3}])
def test_a_killed_worker_rebuilds_its_partition_alone_while_the_other_keeps_scheduling(stack):
    rm = TimedRM("rm-resync", partition_resync=True)
    api = fast_api(stack.si_address)
    rm.register(api, TWO_PARTITIONS)
    try:
        rm.add_nodes(3, "default")
        rm.add_nodes(3, "second")
        rm.add_app("app-default", "root.a", "default")
        rm.add_app("app-second", "root.b", "second")
        rm.wait(lambda r: len(r.accepted_nodes) == 6 and len(r.accepted_apps) == 2, timeout=30)
        before = wait_until(lambda: owner_of(stack.rest_address, rm.rm_id, "default"), 10, "an owner of default")
        second = owner_of(stack.rest_address, rm.rm_id, "second")
        with Workload(rm):
            rm.wait(lambda r: sum(k.startswith("app-default") for k in r.running) > 50, timeout=30)
            kept = {k: v for k, v in rm.rm_view().items() if k.startswith("app-default")}
            os.kill(before["pid"], signal.SIGKILL)
            killed = time.monotonic()
            rm.wait(lambda r: r.partition_replays == ["default"], timeout=20)
            assert api.partition_resyncs <= 1
            after = wait_until(lambda: (w := owner_of(stack.rest_address, rm.rm_id, "default"))
                               and w["epoch"] > before["epoch"] and w, 20, "default owned in a new epoch")
            assert after["pid"] != before["pid"]
            wait_until(lambda: api.partition_resyncs == 1, 20, "the replay of default sent")
            rebuilt = time.monotonic()
            # the rebuilt partition schedules again
            running = sum(k.startswith("app-default") for k in rm.running)
            rm.wait(lambda r: sum(k.startswith("app-default") for k in r.running) > running + 20, timeout=30)
            end = time.monotonic()
        # the RM never re-registered, and the other partition kept its worker and epoch
        assert rm.lost == [] and api.reconnects == 0
        assert owner_of(stack.rest_address, rm.rm_id, "second")["epoch"] == second["epoch"]
        processes = http_get_json(f"http://{stack.rest_address}/ws/v1/korral/processes", timeout=10).body
        [resync] = processes["resyncs"]  # the resync history names it, measured
        assert resync["reason"].startswith(f"partition [rm-resync]default lost epoch {before['epoch']}: ")
        assert resync["reason"].endswith("(partition resync)") and resync["durationSeconds"] is not None
        with rm.arrivals_lock:
            gap = longest_gap(rm.arrivals["second"], killed - 0.5, end)
        assert gap < GAP_LIMIT, f"partition second got no allocation for {gap:.2f}s"
        rm.wait(lambda r: not r.pending, timeout=30)
        assert rm.violations == []
        # the rebuilt partition holds what the RM holds: the allocations from before the kill
        # that are still running kept their UUIDs and nodes, nothing twice (scheduler_view checks)
        wait_until(lambda: in_sync(stack.rest_address, rm, "default", "app-default"), 15, "default in sync")
        wait_until(lambda: in_sync(stack.rest_address, rm, "second", "app-second"), 15, "second in sync")
        view = scheduler_view(stack.rest_address, "default")
        assert all(view[k] == v for k, v in kept.items() if k in rm.running)
        print(f"default rebuilt {rebuilt - killed:.2f}s after the kill; longest gap in second {gap:.2f}s")
    finally:
        api.close()


def test_an_rm_of_generated_stubs_still_re_registers_whole(stack):
    rm = SIRM(stack.si_address, "rm-stub")
    try:
        rm.register()
        rm.open()
        rm.nodes(node("stub-n1", memory=1000, vcore=10))
        rm.apps(app("stub-app", queue="root.default"))
        rm.wait_accepted("application", {"stub-app"})
        owner = wait_until(lambda: owner_of(stack.rest_address, "rm-stub", "default"), 10, "an owner")
        os.kill(owner["pid"], signal.SIGKILL)
        with pytest.raises(grpc.RpcError) as ended:
            rm.wait_for("allocation", lambda r: False, timeout=20)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ended.value.details().startswith(
            f"korral: re-register: partition [rm-stub]default lost epoch {owner['epoch']}: ")
        # what the RM does when asked: register again and replay; the partition schedules again
        rm.cancel_streams()
        rm.register()
        rm.open()
        rm.nodes(node("stub-n1", memory=1000, vcore=10))
        rm.apps(app("stub-app", queue="root.default"))
        rm.wait_accepted("application", {"stub-app"})
        rm.asks(ask("stub-k", "stub-app", memory=10, vcore=1))
        rm.wait_allocated({"stub-k"})
    finally:
        rm.cancel_streams()
        rm.close()
