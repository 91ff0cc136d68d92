"""The pages served at ``/``: Korral's dashboard (plain HTML/JS/CSS shipped in
``rmproxy/web``, no build step, its files under ``/ui/``), or, with ``korral rmproxy
--ui-dir DIR``, a web UI of the operator's choosing (e.g. YuniKorn's own, built elsewhere) whose
files are served from ``DIR`` at the root, on the same origin as ``/ws/v1`` as such UIs expect.
Korral's dashboard then stays at ``/ui/``.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

__all__ = ["WEB_DIR", "STATIC_PREFIX", "index", "UiDir"]

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
STATIC_PREFIX = "/ui/"  # the dashboard's scripts and styles


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(WEB_DIR / "index.html")


class UiDir:
    """Static files of a web UI directory at ``/``: ``/`` is its ``index.html``, any other path
    a file inside the directory (never outside it: ``..`` and links out are 404)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def file(self, request: web.Request) -> web.FileResponse:
        rel = request.match_info.get("tail", "")
        path = (self.root / rel).resolve() if rel else self.root / "index.html"
        if not path.is_relative_to(self.root) or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)
