"""Chaos soak (slow; `make soak`): kill a random Korral process every few seconds for 2 minutes.

A simulated RM keeps submitting and finishing tasks in two partitions. At the end
the scheduler's state equals the RM's, with nothing lost or doubled. Prints the
number of kills survived and the longest resync (kill -> scheduling again).
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from rmproxy.bench.cluster_rm import scheduler_view
from tests.conftest import wait_until
from tests.e2e.test_failover import Workload, owner_of, two_partition_rm

SOAK_SECONDS = float(os.environ.get("KORRAL_SOAK_SECONDS", 120))


@pytest.mark.slow
@pytest.mark.timeout(SOAK_SECONDS + 240)
@pytest.mark.parametrize("stack_options", [{"workers": 3}])
def test_random_kills_for_two_minutes(stack, stack_options):
    seed = int(os.environ.get("KORRAL_SOAK_SEED", time.time()))
    rng = random.Random(seed)
    print(f"chaos seed {seed}")
    # room for the whole soak
    rm = two_partition_rm(stack, "rm-chaos", 10, node_memory=1_000_000, node_vcore=100_000)
    kills: list[tuple[str, float]] = []
    try:
        end = time.monotonic() + SOAK_SECONDS
        with Workload(rm):
            while time.monotonic() < end:
                time.sleep(rng.uniform(2.0, 5.0))
                procs = stack.current_procs()  # supervisord restarts what was killed: new pids
                victim = rng.choice(sorted(p for p in procs if p != "supervisord"))
                try:
                    os.kill(procs[victim].pid, signal.SIGKILL)
                except ProcessLookupError:  # still being restarted from an earlier kill
                    continue
                killed = time.monotonic()
                running = len(rm.running)
                try:  # scheduling again: both partitions owned and allocations flowing
                    wait_until(lambda: owner_of(stack.rest_address, rm.rm_id, "default")
                               and owner_of(stack.rest_address, rm.rm_id, "second"), 30, "owned")
                    rm.wait(lambda r: len(r.running) != running, timeout=30)
                except (AssertionError, TimeoutError) as exc:
                    raise AssertionError(f"no recovery after killing {victim} (seed {seed}): {exc}") from None
                kills.append((victim, time.monotonic() - killed))
        rm.wait(lambda r: not r.pending, timeout=60)
        assert rm.violations == []
        for part, prefix in (("default", "app-default"), ("second", "app-second")):
            wait_until(lambda: scheduler_view(stack.rest_address, part) == {
                k: v for k, v in rm.rm_view().items() if k.startswith(prefix)}, 30, f"{part} in sync")
    finally:
        rm.close()
        longest = max(kills, key=lambda k: k[1]) if kills else ("-", 0.0)
        print(f"chaos: survived {len(kills)} kills ({', '.join(v for v, _ in kills)}); "
              f"longest resync {longest[1]:.2f}s after killing {longest[0]}; {rm.recoveries} RM recoveries")
