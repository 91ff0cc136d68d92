"""``GET /debug/stack`` (and v1.2's ``/ws/v1/stack``): what this rmproxy is doing, as plain text —
the stack of every thread and of every asyncio task (YuniKorn dumps its goroutines). Workers
and the broker are other processes; ``korral status`` and ``/ws/v1/korral/processes`` show them.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
import traceback

from aiohttp import web

from rmproxy.server.webapi._http import ALLOW_ORIGIN

__all__ = ["stack", "stack_text"]


def stack_text() -> str:
    """Every thread's stack, then every pending asyncio task's, innermost frame last."""
    out = io.StringIO()
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    out.write(f"{len(frames)} threads, {len(asyncio.all_tasks())} asyncio tasks\n")
    for ident, frame in frames.items():
        out.write(f"\nthread {names.get(ident, '?')} ({ident}):\n")
        out.write("".join(traceback.format_stack(frame)))
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        out.write(f"\ntask {task.get_name()} ({task.get_coro()!r}):\n")
        task.print_stack(file=out)
    return out.getvalue()


async def stack(request: web.Request) -> web.Response:
    return web.Response(text=stack_text(), content_type="text/plain", charset="utf-8", headers=ALLOW_ORIGIN)
