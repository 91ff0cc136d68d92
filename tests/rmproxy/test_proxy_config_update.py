"""UpdateConfiguration's answers when a partition's worker cannot be reached (found by the chaos
soak: a broker killed during an update made rmproxy answer INVALID_ARGUMENT, so the RM took a
valid config for a wrong one): UNAVAILABLE, the registration unchanged; a worker that refuses the
config is still INVALID_ARGUMENT."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from common import si_pb2
from common.envelope import Envelope, Kind
from common.registry import Registration
from rmproxy.errors import ConfigUpdateError
from rmproxy.rms import RMSession
from tests.conftest import wait_until_async
from tests.rmproxy.test_proxy_lifecycle import make_proxy

OLD = "partitions:\n  - name: default\n    queues: [{name: root, submitacl: '*'}]\n"
NEW = ("partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n"
       "        queues: [{name: extra}]\n")


def registered(p) -> RMSession:
    reg = Registration("rm-1", config=OLD)
    asyncio.run(p.store.save(reg))
    rm = RMSession("rm-1", ["default"], epochs={"default": 4}, registration=reg)
    p.registry.rms["rm-1"] = rm
    return rm


def update(p, sent, answer) -> ConfigUpdateError | None:
    """Run UpdateConfiguration(NEW); ``answer(p, envelope)`` plays the broker/worker side."""
    async def run():
        task = asyncio.create_task(p.registry.apply_config(
            si_pb2.UpdateConfigurationRequest(rmID="rm-1", policyGroup="queues", config=NEW)))
        await wait_until_async(lambda: any(e.kind is Kind.CONFIG_UPDATE for e in sent), 5,
                               "CONFIG_UPDATE sent to the worker")
        answer(p, next(e for e in sent if e.kind is Kind.CONFIG_UPDATE))
        try:
            await task
        except ConfigUpdateError as exc:
            return exc
        return None
    return asyncio.run(run())


def test_a_worker_that_does_not_answer_makes_the_update_unavailable_and_changes_nothing():
    p, sent = make_proxy()
    p.broker.requests.timeout = 0.05
    registered(p)
    err = update(p, sent, lambda p, env: None)  # the broker died with the request in it
    assert err is not None and err.code is grpc.StatusCode.UNAVAILABLE, err
    assert "[rm-1]default: no answer from its worker" in str(err) and "retry" in str(err)
    assert asyncio.run(p.store.load("rm-1")).config == OLD


def test_an_unroutable_update_is_unavailable():
    p, sent = make_proxy()
    registered(p)

    def unroutable(p, env):
        p.broker._on_unroutable(Envelope(Kind.UNROUTABLE, "rm-1", "default", env.epoch, env.seq, {
            "reason": "partition [rm-1]default has no worker: start more workers", "kind": env.kind.value,
            "body": env.body}))

    err = update(p, sent, unroutable)
    assert err is not None and err.code is grpc.StatusCode.UNAVAILABLE, err
    assert "has no worker" in str(err)
    assert asyncio.run(p.store.load("rm-1")).config == OLD


def test_a_worker_that_refuses_the_config_makes_it_invalid():
    p, sent = make_proxy()
    registered(p)

    def refuse(p, env):
        p.broker._on_reply(env.reply(Kind.CONFIG_RESULT, {"id": env.body["id"], "error": "queue extra: bad"}))

    err = update(p, sent, refuse)
    assert err is not None and err.code is grpc.StatusCode.INVALID_ARGUMENT, err
    assert "queue extra: bad" in str(err)
    assert asyncio.run(p.store.load("rm-1")).config == OLD


def test_an_accepted_update_replaces_the_registration():
    p, sent = make_proxy()
    registered(p)
    err = update(p, sent, lambda p, env: p.broker._on_reply(env.reply(Kind.CONFIG_RESULT, {"id": env.body["id"],
                                                                                      "error": None})))
    assert err is None
    assert asyncio.run(p.store.load("rm-1")).config == NEW


def test_an_update_while_the_rm_is_asked_to_re_register_is_unavailable():
    p, sent = make_proxy()
    rm = registered(p)
    p.registry.resync(rm, "partition [rm-1]default lost epoch 4: its worker w is gone")

    async def run():
        await p.registry.apply_config(si_pb2.UpdateConfigurationRequest(rmID="rm-1", config=NEW))

    with pytest.raises(ConfigUpdateError) as caught:
        asyncio.run(run())
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE
    assert "asked to re-register" in str(caught.value) and "lost epoch 4" in str(caught.value)
    assert not [e for e in sent if e.kind is Kind.CONFIG_UPDATE]
