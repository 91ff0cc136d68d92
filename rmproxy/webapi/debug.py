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

from rmproxy.webapi._http import ALLOW_ORIGIN

__all__ = ["stack", "stack_text"]


def _frames(frames) -> str:
    """One line per frame, outermost first (a frame's line number may be unknown: ``?``)."""
    return "".join(f"  {f.f_code.co_filename}:{f.f_lineno if f.f_lineno is not None else '?'} "
                   f"in {f.f_code.co_name}\n" for f in frames)


def stack_text() -> str:
    """Every thread's stack, then every pending asyncio task's, innermost frame last."""
    out = io.StringIO()
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    out.write(f"{len(frames)} threads, {len(tasks)} asyncio tasks\n")
    for ident, frame in frames.items():
        stack = [f for f, _ in traceback.walk_stack(frame)][::-1]
        out.write(f"\nthread {names.get(ident, '?')} ({ident}):\n{_frames(stack)}")
    for task in tasks:
        out.write(f"\ntask {task.get_name()} ({task.get_coro()!r}):\n{_frames(task.get_stack())}")
    return out.getvalue()


async def stack(request: web.Request) -> web.Response:
    return web.Response(text=stack_text(), content_type="text/plain", charset="utf-8", headers=ALLOW_ORIGIN)
