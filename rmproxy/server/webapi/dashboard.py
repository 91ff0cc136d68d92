"""The dashboard: plain HTML/JS/CSS shipped in ``rmproxy/server/web`` (no build step), served at ``/``
with its files under ``/ui/``."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

__all__ = ["WEB_DIR", "STATIC_PREFIX", "index"]

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
STATIC_PREFIX = "/ui/"  # the dashboard's scripts and styles


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(WEB_DIR / "index.html")
