"""rmproxy's one request table: ids, replies, the timeout, packed answers."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from common.envelope import Kind
from common.messages import ConfigUpdate, NodesQuery, PartitionQuery, Reply
from rmproxy.worker_requests import NoAnswer, WorkerRequests


def test_a_reply_resolves_its_request_and_the_table_empties():
    sent = []

    async def go():
        requests = WorkerRequests(sent.append)
        asking = asyncio.ensure_future(requests.ask(Kind.QUERY, "rm", "default", 3, 0, NodesQuery()))
        await asyncio.sleep(0)
        [env] = sent
        assert (env.kind, env.rm_id, env.partition, env.epoch, env.seq) == (Kind.QUERY, "rm", "default", 3, 0)
        assert env.body["what"] == "nodes" and list(env.body)[0] == "id"  # the id first: the broker reads it
        requests.answer(Reply(env.body["id"], packed=msgpack.packb({"items": [1]})))
        reply = await asking
        assert reply == Reply(env.body["id"], {"items": [1]}) and requests.pending == {}

    asyncio.run(go())


def test_no_answer_in_time_names_the_partition_and_a_late_answer_is_dropped():
    sent = []

    async def go():
        requests = WorkerRequests(sent.append, timeout=0.01)
        with pytest.raises(NoAnswer, match=r"partition \[rm\]gpu: no answer from its worker within 0s"):
            await requests.ask(Kind.CONFIG_UPDATE, "rm", "gpu", 1, 7, ConfigUpdate("x"))
        assert requests.pending == {} and sent[0].seq == 7
        requests.answer(Reply(sent[0].body["id"]))  # nobody waits: nothing happens

    asyncio.run(go())


def test_ids_are_distinct_across_requests():
    sent = []

    async def go():
        requests = WorkerRequests(sent.append, timeout=0.01)
        for _ in range(3):
            with pytest.raises(NoAnswer):
                await requests.ask(Kind.QUERY, "rm", "default", 1, 0, PartitionQuery())

    asyncio.run(go())
    assert len({env.body["id"] for env in sent}) == 3


def test_a_lost_partition_ends_its_requests_at_once_and_only_its_own():
    sent = []

    async def go():
        requests = WorkerRequests(sent.append, timeout=30)  # the test would time out, not pass, if they waited
        lost = asyncio.ensure_future(requests.ask(Kind.CONFIG_UPDATE, "rm", "gpu", 4, 1, ConfigUpdate("x")))
        older = asyncio.ensure_future(requests.ask(Kind.QUERY, "rm", "gpu", 3, 0, NodesQuery()))
        newer = asyncio.ensure_future(requests.ask(Kind.QUERY, "rm", "gpu", 5, 0, NodesQuery()))
        other = asyncio.ensure_future(requests.ask(Kind.QUERY, "rm", "default", 4, 0, NodesQuery()))
        await asyncio.sleep(0)
        requests.fail_partition("rm", "gpu", 4, "its worker w1 is gone")
        for fut in (lost, older):
            reply = await asyncio.wait_for(fut, 1)
            assert reply.unavailable and "partition [rm]gpu lost epoch" in reply.error and "w1 is gone" in reply.error
        assert not newer.done() and not other.done()
        requests.fail_all("the broker restarted")
        for fut, name in ((newer, "[rm]gpu"), (other, "[rm]default")):
            reply = await asyncio.wait_for(fut, 1)
            assert reply.unavailable and f"partition {name}: the broker restarted" in reply.error
        assert requests.pending == {}

    asyncio.run(go())
