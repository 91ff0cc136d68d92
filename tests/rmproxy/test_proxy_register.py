"""A registration whose partition loses its new worker while it loads fails at once (UNAVAILABLE,
naming the partition and the lost epoch), not after REGISTER_TIMEOUT; the other outcomes of the
wait keep their answers."""

from __future__ import annotations

import asyncio
import gc

import grpc
import pytest

from common import si_pb2
from common.envelope import Envelope, Kind
from rmproxy.errors import RegistrationError
from rmproxy.rm_registry import REGISTER_TIMEOUT
from tests.conftest import wait_until_async
from tests.rmproxy.test_proxy_lifecycle import make_proxy

TWO = """partitions:
  - name: default
    queues: [{name: root, submitacl: '*'}]
  - name: second
    queues: [{name: root, submitacl: '*'}]
"""


async def registering(sent) -> None:
    await wait_until_async(lambda: any(e.kind is Kind.RM_REGISTER for e in sent), 5, "RM_REGISTER sent to the broker")


def register_with(p, sent, broker_side, rm_id="rm-1"):
    """Register ``rm_id``; ``broker_side(p)`` plays the broker once RM_REGISTER went out.
    Returns (error or None, seconds the registration took)."""
    async def run():
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.create_task(p.registry.register(si_pb2.RegisterResourceManagerRequest(
            rmID=rm_id, policyGroup="queues", config=TWO)))
        await registering(sent)
        broker_side(p)
        try:
            await asyncio.wait_for(task, REGISTER_TIMEOUT / 2)  # well before the registration's own timeout
        except RegistrationError as exc:
            return exc, loop.time() - started
        return None, loop.time() - started
    return asyncio.run(run())


def owned(p, partition, epoch, error=None):
    p.broker._on_owned(Envelope(Kind.PARTITION_OWNED, "rm-1", partition, epoch, 0, {"worker": "w", "error": error}))


def test_a_worker_lost_while_it_loads_a_registering_partition_fails_the_registration_at_once():
    p, sent = make_proxy()

    def broker(p):
        owned(p, "default", 5)
        p.broker._on_lost(Envelope(Kind.PARTITION_LOST, "rm-1", "second", 5, 0,
                            {"reason": "its worker w2 is gone (its connection closed)", "worker": "w2"}))

    err, took = register_with(p, sent, broker)
    assert err is not None and err.code is grpc.StatusCode.UNAVAILABLE, err
    assert "partition [rm-1]second lost epoch 5 while its worker loaded it" in str(err)
    assert "register again" in str(err) and took < 1.0


def test_every_partition_owned_registers():
    p, sent = make_proxy()
    err, _ = register_with(p, sent, lambda p: (owned(p, "default", 3), owned(p, "second", 3)))
    assert err is None
    assert p.registry.rms["rm-1"].epochs == {"default": 3, "second": 3}


def test_a_failed_load_fails_the_registration_with_the_workers_words():
    p, sent = make_proxy()
    err, took = register_with(p, sent, lambda p: owned(p, "second", 3, error="worker w cannot load: boom"))
    assert err is not None and "worker w cannot load: boom" in str(err) and took < 1.0


def test_a_registration_superseded_by_a_newer_one_says_so():
    p, sent = make_proxy()

    async def run():
        first = asyncio.create_task(p.registry.register(si_pb2.RegisterResourceManagerRequest(rmID="rm-1", config=TWO)))
        await registering(sent)
        second = asyncio.create_task(p.registry.register(si_pb2.RegisterResourceManagerRequest(rmID="rm-1", config=TWO)))
        with pytest.raises(RegistrationError) as caught:
            await asyncio.wait_for(first, 2)
        owned(p, "default", 4)
        owned(p, "second", 4)
        await asyncio.wait_for(second, 2)
        return caught.value

    err = asyncio.run(run())
    assert err.code is grpc.StatusCode.UNAVAILABLE and "a newer registration" in str(err)


def test_a_broker_restart_fails_a_registration_still_waiting_at_once():
    """Found by the chaos soak: a broker killed while an RM registered took the RM_REGISTER with it;
    the restarted broker assigned nothing for it and the registration waited its 10 s."""
    p, sent = make_proxy()

    def broker_restarted(p):
        owned(p, "default", 5)
        p.broker._on_heartbeat(Envelope(Kind.HEARTBEAT, body={"reannounce": True}))

    err, took = register_with(p, sent, broker_restarted)
    assert err is not None and err.code is grpc.StatusCode.UNAVAILABLE, err
    assert "the broker restarted before partition [rm-1]second had a worker" in str(err)
    assert took < 1.0


def test_a_registration_the_broker_has_no_epochs_for_fails_at_once_naming_redis():
    """Found by the network-fault soak: the broker could not take an epoch from Redis, and the
    registration waited 10 s to say "no worker took partition(s) ... start more workers"."""
    p, sent = make_proxy()
    reason = "the broker could not take a new epoch from Redis for [rm-1]default (Redis unreachable: Timeout)"

    def broker(p):
        p.broker._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", body={"reason": reason, "kind": "rm.register"}))

    err, took = register_with(p, sent, broker)
    assert err is not None and err.code is grpc.StatusCode.UNAVAILABLE, err
    assert str(err).endswith(f"registration of RM failed: {reason}; register again") and took < 1.0


def test_a_registration_failing_for_several_partitions_at_once_reads_every_error():
    """Found by the network-fault soak: when several partitions' waits failed at once (the broker
    had no epochs for them, or stopped answering), the registration read the first error only,
    and asyncio logged the others as "Future exception was never retrieved" tracebacks."""
    p, sent = make_proxy()
    reason = "the broker could not take a new epoch from Redis for [rm-1]default, [rm-1]second"

    def broker(p):
        p.broker._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", body={"reason": reason, "kind": "rm.register"}))

    err, _ = register_with(p, sent, broker)
    assert err is not None
    waiters = p.registry.rms["rm-1"].owned_waiters.values()
    assert len(waiters) == 2 and not any(w._log_traceback for w in waiters)  # asyncio's "unread" flag


def test_a_registration_call_cancelled_while_it_waits_leaves_no_waiter_behind(caplog):
    """Found by the network-fault soak: a registration call cancelled while it waited for owners
    (the RM gave up on it) left its waiters in the RM's session; when the broker then stopped
    answering, rmproxy failed them, nobody read the errors, and asyncio logged each as a
    "Future exception was never retrieved" traceback."""
    gc.collect()  # earlier tests' garbage first: only this test's futures are looked at below
    caplog.clear()
    p, sent = make_proxy()

    async def run():
        task = asyncio.create_task(p.registry.register(si_pb2.RegisterResourceManagerRequest(rmID="rm-1", config=TWO)))
        await registering(sent)
        task.cancel()  # as gRPC does when the RM's call ends
        with pytest.raises(asyncio.CancelledError):
            await task
        assert all(w.done() for w in p.registry.rms["rm-1"].owned_waiters.values())
        p.broker._reset("the broker stopped answering")

    asyncio.run(run())
    p.registry.rms.clear()  # as the RM's next registration replaces its session
    gc.collect()  # a future whose error nobody read logs it when it is collected
    assert "never retrieved" not in caplog.text
