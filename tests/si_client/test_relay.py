"""``si_client.relay``: coroutine callbacks submitted from another thread run on the loop in
order, one at a time (a callback that awaits holds the ones behind it), each followed by its
``then``; those whose stream closed meanwhile are dropped; a failing callback is logged and the
rest run."""

from __future__ import annotations

import asyncio
import threading

from si_client.relay import LoopRelay
from tests.conftest import wait_until_async


def test_callbacks_run_on_the_loop_in_order_and_one_that_awaits_holds_the_rest():
    async def main():
        loop = asyncio.get_running_loop()
        relay = LoopRelay(loop)
        seen: list[tuple[str, object]] = []
        gate = asyncio.Event()

        async def quick(name):
            seen.append((name, asyncio.get_running_loop()))

        async def slow(name):
            seen.append((f"{name} starts", None))
            await gate.wait()
            await asyncio.sleep(0)
            seen.append((f"{name} ends", None))

        async def broken(name):
            raise RuntimeError("a broken callback")

        def feed():
            relay.submit(lambda: True, quick, ("a",), then=lambda: seen.append(("then a", None)))
            relay.submit(lambda: True, slow, ("b",))
            relay.submit(lambda: True, broken, ("c",), then=lambda: seen.append(("then c", None)))
            relay.submit(lambda: False, quick, ("dropped",))
            relay.submit(lambda: True, quick, ("d",))

        thread = threading.Thread(target=feed)
        thread.start()
        thread.join()
        await wait_until_async(lambda: ("b starts", None) in seen, 5, "the slow callback to start")
        assert [s for s, _ in seen] == ["a", "then a", "b starts"]  # d waits for b
        gate.set()
        await wait_until_async(lambda: seen[-1][0] == "d", 5, "the rest to run")
        assert [s for s, _ in seen] == ["a", "then a", "b starts", "b ends", "then c", "d"]
        assert all(where is loop for s, where in seen if where is not None)
    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_cancelled_task_cancels_the_callback_it_finishes_and_the_next_ones_run():
    async def main():
        relay = LoopRelay(asyncio.get_running_loop())
        cancelled = asyncio.Event()

        async def waits():
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        relay.submit(lambda: True, waits, ())
        def finishing():
            return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "LoopRelay._finish"]
        await wait_until_async(finishing, 5, "the callback's task")
        [task] = finishing()
        await asyncio.sleep(0)  # the task resumes the callback, which waits again
        task.cancel()
        await asyncio.wait_for(cancelled.wait(), 5)
        ran = []

        async def after():
            ran.append(True)

        relay.submit(lambda: True, after, ())  # the relay goes on after the cancelled one
        await wait_until_async(lambda: ran, 5, "the next callback")
    asyncio.run(asyncio.wait_for(main(), 20))
