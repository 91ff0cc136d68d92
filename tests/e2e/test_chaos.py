"""Chaos soak (issue 12): SIGKILL every kind of Korral process, over and over, under load.

Two RMs (si_client, ``tests.e2e.soak.SoakRM``), each with two partitions (the same names:
REST tells them apart by ``?rmID=``), keep submitting asks and finishing tasks in all four
partitions. Step by step, a process is killed by pid (round-robin over worker, broker, rmproxy
and Redis; a worker is the owner of a partition three times in four, else a spare), and every
third step an RM re-registers as a restarting shim does and every third it updates its config
(``korral.v1 UpdateConfiguration``), each with a changed config (root.extra added or removed,
root.a's max changed), before the kill or in flight when the kill lands. After each fault every partition
schedules again and every REST read path of every partition of both RMs answers 200 (with the
right partitions, nodes, queues and config) within 5 s of the RMs having re-registered. At the
end the scheduler holds exactly each RM's allocations: none lost, none doubled, no node over
capacity, no violation seen by the RMs.

- ``make soak`` (slow): ``KORRAL_SOAK_KILLS`` kills (default 100, about 12 minutes).
- ``make test``: the same machinery with 8 kills (each kind twice), about a minute.

``KORRAL_SOAK_SEED`` replays a run's choices (timings differ); ``KORRAL_SOAK_REPORT=FILE``
writes the figures as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tests.conftest import wait_until
from tests.e2e.soak import KINDS, Chaos, final_check, make_room, seed_from_env, write_report
from tests.e2e.soak_rm import NODE_MEMORY, NODE_VCORE, PARTITIONS, Load, SoakRM

KILLS = int(os.environ.get("KORRAL_SOAK_KILLS", 100))
FAST_KILLS = 2 * len(KINDS)
WORKERS = 6  # 4 partitions and 2 spares


def run_soak(stack, kills: int, load_between: tuple[int, int] = (50, 200)) -> dict:
    """``kills`` steps; between two, each partition gets ``load_between`` more allocations (a
    seeded number in that range: at ~25 allocations/s a partition, 2-8 s of load by default)."""
    seed = seed_from_env()
    print(f"chaos soak: seed {seed}, {kills} kills")
    rms = [SoakRM(rm_id, node_memory=NODE_MEMORY, node_vcore=NODE_VCORE, si_address=stack.si_address,
                  rest_address=stack.rest_address, seed=seed) for rm_id in ("rm-a", "rm-b")]
    chaos = Chaos(stack, rms, seed, kills)
    report: dict = {"seed": seed, "completed": False}
    try:
        for rm in rms:
            rm.start()
        with Load(rms) as load:
            wait_until(lambda: all(rm.last_alloc.get(p) for rm in rms for p in PARTITIONS), 60,
                       "every partition allocating")
            for step in chaos.plan():
                chaos.run_step(step)
                # the load runs on between faults: until each partition got some more allocations
                counts = {(rm.rm_id, p): rm.allocated.get(p, 0) for rm in rms for p in PARTITIONS}
                more = chaos.rng.randint(*load_between)
                wait_until(lambda: all(rm.allocated.get(p, 0) >= counts[(rm.rm_id, p)] + more
                                       for rm in rms for p in PARTITIONS), 60, "the load running on")
            assert load.errors == [], f"seed {seed}: the load failed: {load.errors[:5]}"
        make_room(rms)
        report.update(final_check(stack.rest_address, rms, seed))
        report["completed"] = True
        return report
    finally:
        report.update(chaos.summary())
        print("chaos soak figures:\n" + json.dumps(report, indent=2, default=str))
        write_report(report | {"steps": [dataclasses.asdict(s) for s in chaos.steps]})
        for rm in rms:
            rm.close()
        chaos.close()


@pytest.mark.slow
@pytest.mark.timeout(KILLS * 45 + 600)
@pytest.mark.parametrize("stack_options", [{"workers": WORKERS}])
def test_chaos_soak(stack):
    report = run_soak(stack, KILLS)
    assert report["kills"] == KILLS
    assert all(n >= KILLS // len(KINDS) for n in report["kills_per_kind"].values()), report["kills_per_kind"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stack_options", [{"workers": WORKERS}])
def test_chaos_fast(stack):
    """The soak's mechanism in CI: each kind killed twice, with re-registrations and config updates."""
    report = run_soak(stack, FAST_KILLS, load_between=(10, 40))
    assert report["kills_per_kind"] == {k: 2 for k in KINDS}
    assert report["reregistrations"] >= 1 and report["config_updates"] >= 1, report
