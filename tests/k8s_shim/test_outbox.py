"""The shim's outbox (``k8s_shim.outbox``): what one flush sends and in how many requests
(applications, node actions, asks and releases together unless a release precedes an ask of the
same key), and flushes paced ``interval`` apart while a lone message goes at once."""

from __future__ import annotations

import asyncio

from common import si_v18_pb2 as si
from si_client import ClientState
from k8s_shim.outbox import Outbox


class Api:
    state = ClientState.RUNNING

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def update_application(self, req): self.sent.append(("application", req))
    def update_node(self, req): self.sent.append(("node", req))
    def update_allocation(self, req): self.sent.append(("allocation", req))


def ask(key: str) -> si.Allocation:
    return si.Allocation(allocationKey=key, applicationID="app")


def release(key: str) -> si.AllocationRelease:
    return si.AllocationRelease(allocationKey=key, applicationID="app")


def shape(sent) -> list:
    """Each request as (stream, [keys of its allocations], [keys of its releases]) or its items."""
    out = []
    for stream, req in sent:
        if stream == "allocation":
            out.append((stream, [a.allocationKey for a in req.allocations],
                        [r.allocationKey for r in req.releases.allocationsToRelease]))
        elif stream == "application":
            out.append((stream, [a.applicationID for a in req.new]))
        else:
            out.append((stream, [n.nodeID for n in req.nodes]))
    return out


def test_one_flush_sends_each_kind_in_one_request_unless_a_key_is_released_then_asked_again():
    async def main():
        box = Outbox(interval=0.0)
        box.api = api = Api()
        box.put("app", si.AddApplicationRequest(applicationID="a1"))
        box.put("alloc", ask("k1"))
        box.put("release", release("k2"))
        box.put("node", si.NodeInfo(nodeID="n1"))
        box.put("alloc", ask("k3"))
        box.put("app", si.AddApplicationRequest(applicationID="a2"))
        box.put("release", release("k1"))
        box.put("alloc", ask("k2"))  # released above, asked again: the release must come first
        box.put("release", release("k4"))
        await asyncio.sleep(0)
        assert shape(api.sent) == [("application", ["a1", "a2"]), ("node", ["n1"]),
                                   ("allocation", ["k1", "k3"], ["k2", "k1"]),
                                   ("allocation", ["k2"], ["k4"])]
    asyncio.run(main())


def test_flushes_are_paced_but_a_lone_message_goes_at_once():
    async def main():
        box = Outbox(interval=0.2)
        box.api = api = Api()
        loop = asyncio.get_running_loop()
        box.put("alloc", ask("k1"))
        await asyncio.sleep(0)
        assert len(api.sent) == 1  # the first: no wait
        start = loop.time()
        box.put("alloc", ask("k2"))
        box.put("alloc", ask("k3"))
        while len(api.sent) < 2:
            await asyncio.sleep(0.01)
        assert loop.time() - start >= 0.15
        assert shape(api.sent)[1] == ("allocation", ["k2", "k3"], [])
    asyncio.run(main())


def test_nothing_is_sent_before_registration_and_clear_drops_what_the_replay_covers():
    async def main():
        box = Outbox(interval=0.0)
        box.put("alloc", ask("k1"))
        await asyncio.sleep(0)
        box.api = api = Api()
        box.clear()
        box.flush()
        assert api.sent == []
    asyncio.run(main())


def test_the_pause_after_a_flush_grows_with_what_it_carried_and_shrinks_back():
    async def main():
        box = Outbox(interval=0.005, longest=0.02)
        box.api = Api()
        for sizes, pause in (([1], 0.005), ([5], 0.005), ([20], 0.01), ([80], 0.02), ([500], 0.02), ([3], 0.005)):
            for i in range(sizes[0]):
                box.put("alloc", ask(f"k{i}"))
            box.flush()
            assert abs(box.pause - pause) < 1e-9, (sizes, box.pause)
    asyncio.run(main())
