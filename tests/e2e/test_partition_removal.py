"""An operator's config change cannot silently remove a partition, and a partition that comes back
holds again what the RM holds: through ``korral config`` on a ``korral up`` stack, under load.

- An empty config, or one leaving out a partition with nodes and applications, is refused (CLI
  and admin endpoint), naming what would go; the active config stays.
- ``--allow-partition-removal`` (``?allowPartitionRemoval=true``) removes it.
- Restoring it (``korral config rollback``) asks the RM to re-register: afterwards the partition's
  nodes, applications and allocations are exactly the RM's, as are the other partition's.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from pathlib import Path

import pytest

from common.constants import NODE_PARTITION
from benchmarks.cluster_rm import ClusterRM, scheduler_view
from si_client import SchedulerAPI
from tests.conftest import Background, run_korral, wait_until
from tests.rest.workload import http

RM = "rm-parts"
PARTITION = """  - name: {name}
    placementrules: [{{name: provided, create: true}}]
    queues: [{{name: root, submitacl: '*'}}]
"""
BOTH = "partitions:\n" + PARTITION.format(name="default") + PARTITION.format(name="edge")
DEFAULT_ONLY = "partitions:\n" + PARTITION.format(name="default")
NODES = 3  # per partition


class Load(Background):
    """Asks for the apps of the partitions in ``live`` and tasks finished, every step."""

    interval = 0.05

    def __init__(self, rm: ClusterRM) -> None:
        super().__init__("partition-removal-load")
        self.rm = rm
        self.live = {"default": "app-d", "edge": "app-e"}
        self.lock = threading.Lock()  # held by a step: ``pause`` returns when no step sends to it
        self.keys = itertools.count()

    def step(self) -> None:
        with self.lock:
            for app_id in self.live.values():
                self.rm.submit(app_id, [f"{app_id}-{next(self.keys)}" for _ in range(3)])
            self.rm.release(4)

    def pause(self, partition: str) -> None:
        with self.lock:
            self.live.pop(partition, None)

    def resume(self, partition: str, app_id: str) -> None:
        with self.lock:
            self.live[partition] = app_id


def config(stack, *args: str):
    return run_korral("config", *args, "--state-dir", str(stack.state_dir), timeout=60)


def get(stack, path: str):
    return http(f"http://{stack.rest_address}", path).json()


def partitions(stack) -> set[str]:
    return {p["name"] for p in get(stack, "/ws/v1/partitions") if p["rmID"] == RM}


def rm_holds(rm: ClusterRM, partition: str) -> tuple[set, set, dict]:
    """The nodes, applications and running allocations (key -> (uuid, node)) the RM holds there."""
    with rm.lock:
        return ({n for n, info in rm.nodes.items() if info.attributes.get(NODE_PARTITION) == partition},
                {a for a, req in rm.apps.items() if req.partitionName == partition},
                {k: (a.UUID, a.nodeID) for k, a in rm.running.items() if a.partitionName == partition})


def scheduler_holds(stack, partition: str) -> tuple[set, set, dict]:
    base = f"/ws/v1/partition/{partition}"
    return ({n["nodeID"] for n in get(stack, f"{base}/nodes?rmID={RM}")},
            {a["applicationID"] for a in get(stack, f"{base}/applications/active?rmID={RM}")},
            scheduler_view(stack.rest_address, partition))


@pytest.mark.parametrize("stack_options", [{"workers": 3}])
def test_a_partition_removed_and_restored_under_load_holds_what_the_rm_holds(stack, tmp_path: Path):
    rm = ClusterRM(RM)
    rm.register(SchedulerAPI(stack.si_address), BOTH)
    try:
        rm.add_nodes(NODES, "default")
        rm.add_nodes(NODES, "edge")
        rm.add_app("app-d", partition="default")
        rm.add_app("app-e", partition="edge")
        rm.wait(lambda r: len(r.accepted_nodes) == 2 * NODES and {"app-d", "app-e"} <= r.accepted_apps)
        empty, default_only = tmp_path / "empty.yaml", tmp_path / "default-only.yaml"
        empty.write_text("")
        default_only.write_text(DEFAULT_ONLY)
        with Load(rm) as load:
            rm.wait(lambda r: len(rm_holds(r, "edge")[2]) >= 10)  # edge runs tasks

            # refused, naming what would go; nothing changes
            refused = config(stack, "apply", str(empty))
            assert refused.returncode == 1
            assert "the config is empty: the scheduler would serve its default config" in refused.stderr
            assert re.search(rf"it removes partition \[{RM}\]edge with {NODES} nodes, 1 applications and \d+ "
                             r"allocations", refused.stderr), refused.stderr
            assert "--allow-partition-removal" in refused.stderr
            refused = config(stack, "apply", str(default_only))
            assert refused.returncode == 1 and f"[{RM}]edge with {NODES} nodes" in refused.stderr, refused.stderr
            dry = config(stack, "apply", "--dry-run", str(default_only))
            assert dry.returncode == 0 and "applying it would be refused: config change of RM" in dry.stdout
            assert partitions(stack) == {"default", "edge"}
            assert json.loads(config(stack, "history", "--json").stdout)["records"] == []

            # asked for explicitly, it goes
            load.pause("edge")
            removed = config(stack, "apply", "--allow-partition-removal", str(default_only))
            assert removed.returncode == 0, removed.stderr
            wait_until(lambda: partitions(stack) == {"default"}, 30, "partition edge removed")
            rm.wait(lambda r: not rm_holds(r, "edge")[2])  # its allocations were released to the RM

            # restored: the RM is asked to re-register and brings its nodes and applications back
            restored_before = rm.restored
            back = config(stack, "rollback", "1")
            assert back.returncode == 0, back.stderr
            rm.wait(lambda r: r.restored > restored_before, 60)
            wait_until(lambda: partitions(stack) == {"default", "edge"}, 30, "partition edge back")
            load.resume("edge", "app-e")
            rm.wait(lambda r: len(rm_holds(r, "edge")[2]) >= 10, 60)  # edge schedules again
        # the load stopped: what the scheduler holds settles on what the RM holds
        for partition in ("edge", "default"):
            wait_until(lambda: scheduler_holds(stack, partition) == rm_holds(rm, partition), 30,
                       f"partition {partition} holding what the RM holds",
                       lambda: f"scheduler {scheduler_holds(stack, partition)} RM {rm_holds(rm, partition)}")
        history = json.loads(config(stack, "history", "--json").stdout)["records"]
        assert [r["action"] for r in history] == ["apply", "rollback"]
        assert [v for v in rm.violations if "rejected" in v] == []  # nothing was sent to a missing partition
    finally:
        rm.close()


def test_the_admin_endpoint_refuses_unless_asked_and_names_what_would_go(stack):
    rm = ClusterRM(RM)
    rm.register(SchedulerAPI(stack.si_address), BOTH)
    try:
        rm.add_nodes(1, "edge")
        rm.wait(lambda r: len(r.accepted_nodes) == 1)
        token = (stack.state_dir / "admin-token").read_text().split(":", 1)[1].strip()
        checksum = http(f"http://{stack.rest_address}", f"/ws/v1/korral/admin/config/{RM}",
                        headers={"Authorization": f"Bearer {token}"}).json()["checksum"]

        def put(query: str):
            return http(f"http://{stack.rest_address}", f"/ws/v1/korral/admin/config/{RM}{query}", method="PUT",
                        data=DEFAULT_ONLY.encode(), headers={"Authorization": f"Bearer {token}", "If-Match": checksum})

        refused = put("")
        assert refused.status == 409 and f"[{RM}]edge with 1 nodes, 0 applications" in refused.json()["message"]
        bad = put("?allowPartitionRemoval=maybe")
        assert bad.status == 400 and "allowPartitionRemoval must be true or false, got 'maybe'" in bad.json()["message"]
        assert partitions(stack) == {"default", "edge"}
        done = put("?allowPartitionRemoval=true")
        assert done.status == 200 and done.json()["changed"] is True
        wait_until(lambda: partitions(stack) == {"default"}, 30, "partition edge removed")
    finally:
        rm.close()
