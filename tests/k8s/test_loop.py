"""The shim's event loop (``rmproxy.k8s.loop``): a busy loop waits a moment before it polls, a
quiet one polls at once, and a timer due sooner than the pause is not delayed."""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
import time

from rmproxy.k8s.loop import CoalescingSelector, new_event_loop


def test_a_busy_loop_waits_a_moment_before_polling_and_a_quiet_one_does_not():
    sel = CoalescingSelector(pause=0.02)
    a, b = socket.socketpair()
    try:
        sel.register(a, selectors.EVENT_READ)
        b.send(b"1")
        assert sel.select(None) and sel.pauses == 0  # quiet so far: polled at once
        a.recv(16)
        b.send(b"2")
        start = time.monotonic()
        assert sel.select(None) and sel.pauses == 1  # busy: it waited first
        assert time.monotonic() - start >= 0.015
        a.recv(16)
        timer = threading.Timer(0.2, b.send, (b"3",))
        timer.start()
        assert sel.select(5) and sel.pauses == 2  # it waited, then polled long: quiet again
        a.recv(16)
        b.send(b"4")
        assert sel.select(None) and sel.pauses == 2  # polled at once
        a.recv(16)
        b.send(b"5")
        sel.busy = True
        start = time.monotonic()
        sel.select(0.002)  # a timer due in 2 ms: the pause is cut to it
        assert time.monotonic() - start < 0.015
        timer.join()
    finally:
        sel.close()
        a.close()
        b.close()


def test_the_loop_runs_coroutines_timers_and_sockets():
    async def main():
        loop = asyncio.get_running_loop()
        assert isinstance(loop._selector, CoalescingSelector)
        reader, writer = await asyncio.open_connection(*server.getsockname())
        conn, _ = await loop.sock_accept(server)
        for i in range(20):
            await loop.sock_sendall(conn, b"%d\n" % i)
            assert await reader.readline() == b"%d\n" % i
        start = loop.time()
        await asyncio.sleep(0.05)
        assert loop.time() - start < 0.5
        writer.close()
        conn.close()

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(asyncio.wait_for(main(), 20))
    finally:
        server.close()
