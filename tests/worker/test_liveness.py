"""Worker liveness against a real stack: a slow turn is not a dead worker, a hung loop is.

A stack from ``korral up --workers 1`` (real Redis, broker, rmproxy and one spare worker)
plus one ``WorkerLoop`` in a thread of this process, pinned to the RM's partition so it
owns it. Its session is the real ``PartitionSession`` whose ``step()`` burns CPU in pure
Python once when armed (a busy loop holding the GIL in turns, as a long cycle does).
The broker's own STATUS answer (``korral status --broker``) shows who owns the partition.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid

import zmq

from common import registry
from common.cli.cluster_status import from_broker
from common.heartbeat import EXPIRY, INTERVAL
from partition_worker.main import WorkerLoop
from partition_worker.session import PartitionSession
from tests.conftest import wait_until
from tests.e2e.sirm import SIRM

PARTITION = "default"


class BurnOnce:
    """Makes sessions whose ``step()`` spins for ``seconds`` the first time it runs once armed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = threading.Event()
        self.started = threading.Event()
        self.done = threading.Event()
        self.spent = 0.0

    def session(self, *args, **kwargs) -> PartitionSession:
        return _BurningSession(self, *args, **kwargs)

    def spin(self) -> None:
        begin = time.monotonic()
        while time.monotonic() - begin < self.seconds:
            sum(range(1000))  # pure Python: holds the GIL except at the interpreter's switch points
        self.spent = time.monotonic() - begin


class _BurningSession(PartitionSession):
    def __init__(self, burn: BurnOnce, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._burn = burn

    def step(self, now_ns: int):
        if self._burn.armed.is_set() and not self._burn.started.is_set():
            self._burn.started.set()
            self._burn.spin()
            self._burn.done.set()
        return super().step(now_ns)


@contextlib.contextmanager
def worker_in_thread(stack, name: str, rm_id: str, burn: BurnOnce, stall_seconds: float | None = None):
    """A pinned ``WorkerLoop`` running in a thread; yields it and the list of its ``_connect`` times.
    Stopped (``running = False``) and its socket and context closed on exit, even on failure."""
    ctx = zmq.Context()
    store = registry.RegistryStore(registry.connect(stack.redis_url))
    extra = {} if stall_seconds is None else {"stall_seconds": stall_seconds}
    loop = WorkerLoop(ctx, stack.broker_backend, store, name, pin=f"{rm_id}/{PARTITION}",
                      session_factory=burn.session, group_lookup=None, **extra)
    connects: list[float] = []
    real_connect = loop._connect

    def counting_connect() -> None:
        connects.append(time.monotonic())
        real_connect()

    loop._connect = counting_connect
    thread = threading.Thread(target=loop.run, name=f"test-{name}", daemon=True)
    thread.start()
    try:
        yield loop, connects
    finally:
        loop.running = False
        thread.join(burn.seconds + 10)
        store.client.close()
        assert not thread.is_alive(), "the worker loop did not stop within its bound"
        if loop.sock is not None:
            loop.sock.close(0)
        ctx.term()


def status(stack) -> dict:
    return from_broker(stack.broker_frontend, timeout=2.0)


def partition_row(doc: dict, rm_id: str) -> dict | None:
    return next((p for p in doc.get("partitions") or [] if (p["rmID"], p["partition"]) == (rm_id, PARTITION)), None)




def owned_by(stack, rm_id: str, name: str) -> dict:
    """Register the RM (our pinned worker must get its partition) and wait until it is loaded there."""
    wait_until(lambda: any(w["name"] == name for w in status(stack)["workers"]), 10, f"worker {name} known")
    rm = SIRM(stack.si_address, rm_id)
    try:
        rm.register()  # empty config: the default partition
    finally:
        rm.close()
    return wait_until(lambda: (row := partition_row(status(stack), rm_id)) and row["worker"] == name
                    and row["loaded"] and row, 10, f"partition owned and loaded by {name}")


def watch_through_burn(stack, burn: BurnOnce, after: float) -> list[tuple[float, dict]]:
    """Arm the burn and sample the broker's status until ``after`` seconds past its end."""
    burn.armed.set()
    assert burn.started.wait(5), "the worker never ran a step after arming"
    t0 = time.monotonic()
    samples = []
    end = None

    def sampled_past_the_end() -> bool:
        nonlocal end
        samples.append((time.monotonic() - t0, status(stack)))
        if end is None and burn.done.is_set():
            end = time.monotonic() + after
        return end is not None and time.monotonic() >= end

    wait_until(sampled_past_the_end, burn.seconds + after + 10, f"the burn and {after}s after it", interval=0.1)
    return samples


def test_a_long_step_does_not_get_the_worker_declared_dead(stack_factory):
    stack = stack_factory(workers=1)  # a spare worker: a wrongly declared death would move the partition
    rm_id, name = f"rm-live-{uuid.uuid4().hex[:6]}", f"slow-{uuid.uuid4().hex[:6]}"
    burn = BurnOnce(4.0)  # longer than EXPIRY
    assert burn.seconds > EXPIRY + INTERVAL
    with worker_in_thread(stack, name, rm_id, burn) as (_loop, connects):
        before = owned_by(stack, rm_id, name)
        samples = watch_through_burn(stack, burn, after=EXPIRY + 2 * INTERVAL)
        assert burn.spent >= burn.seconds
        for at, doc in samples:
            row = partition_row(doc, rm_id)
            assert row is not None and (row["worker"], row["epoch"]) == (name, before["epoch"]), \
                f"{at:.1f}s into the burn the partition is {row}, was {before}"
            assert any(w["name"] == name for w in doc["workers"]), f"{at:.1f}s into the burn {name} is gone"
        ages = [w["heartbeatAge"] for _, doc in samples for w in doc["workers"] if w["name"] == name]
        assert max(ages) < EXPIRY / 2, f"heartbeats were late during the burn: ages up to {max(ages)}s"
        assert len(connects) == 1, f"the worker reconnected {len(connects) - 1} time(s)"
        print(f"burned {burn.spent:.2f}s in one step; {len(samples)} status samples, max heartbeat age "
              f"{max(ages):.2f}s, owner and epoch {before['epoch']} unchanged, 1 connect")


def test_a_stalled_loop_stops_heartbeats_and_is_declared_dead(stack_factory, caplog):
    stack = stack_factory(workers=1)
    rm_id, name = f"rm-stall-{uuid.uuid4().hex[:6]}", f"stuck-{uuid.uuid4().hex[:6]}"
    burn = BurnOnce(6.0)  # the stall bound + EXPIRY + a purge interval fit well inside it
    stall = 1.0
    with caplog.at_level(logging.ERROR, logger="korral.worker"), \
            worker_in_thread(stack, name, rm_id, burn, stall_seconds=stall) as (_loop, _connects):
        before = owned_by(stack, rm_id, name)
        burn.armed.set()
        assert burn.started.wait(5), "the worker never ran a step after arming"
        t0 = time.monotonic()
        row = wait_until(lambda: (r := partition_row(status(stack), rm_id)) and r["worker"] != name and r,
                       burn.seconds, "the partition leaving the stalled worker")
        lost_after = time.monotonic() - t0
        assert not burn.done.is_set(), "declared dead only after the step ended, not for the stall"
        assert lost_after >= stall, f"declared dead after {lost_after:.1f}s, before the stall bound"
        assert row["worker"] is None or row["epoch"] != before["epoch"]
        assert burn.done.wait(burn.seconds + 5)
    stalls = [r for r in caplog.records if "made no progress" in r.getMessage()]
    assert len(stalls) == 1, [r.getMessage() for r in stalls]
    print(f"stall bound {stall}s: partition left the worker {lost_after:.2f}s into a {burn.seconds}s step "
          f"(now {row['worker']} epoch {row['epoch']})")
