"""A headless Chromium driven over the DevTools protocol (a websocket, with aiohttp's client), for
tests that read what a page holds (``evaluate``) and what it shows (``screenshot``).

``Browser(chromium, profile, size)`` starts Chromium on a free DevTools port (loopback, found
through ``DevToolsActivePort``), ``page()`` connects to its tab; every call has a timeout, and
``close()`` closes the connections and stops the process by its pid. Screenshots are decoded by ``png.decode`` (no imaging library needed).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import wait_until
from tests.web import png

TIMEOUT = 30.0
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0")


class Browser:
    def __init__(self, chromium: str, profile: Path, size: tuple[int, int]) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.size = size
        self.proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}",
                                      f"--window-size={size[0]},{size[1]}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        try:
            wait_until(lambda: port_file.exists() and port_file.read_text().split("\n")[0], TIMEOUT,
                       "Chromium's DevTools port")
        except BaseException:
            self.close()
            raise
        self.port = int(port_file.read_text().split("\n")[0])
        self.loop = asyncio.new_event_loop()
        self.pages: list[Page] = []

    def run(self, coro) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT))

    def page(self) -> "Page":
        async def connect():
            session = aiohttp.ClientSession()
            async with session.get(f"http://127.0.0.1:{self.port}/json/list") as r:
                targets = await r.json()
            target = next(t for t in targets if t.get("type") == "page")
            return session, await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        session, ws = self.run(connect())
        page = Page(self, session, ws)
        self.pages.append(page)
        page.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
                  deviceScaleFactor=1, mobile=False)
        return page

    def close(self) -> None:
        """Close the pages' connections, then stop Chromium by its pid."""
        for page in getattr(self, "pages", ()):
            page.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "loop", None) is not None:
            self.loop.close()


class Page:
    def __init__(self, browser: Browser, session: aiohttp.ClientSession, ws) -> None:
        self.browser, self.session, self.ws = browser, session, ws
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict:
        async def send() -> dict:
            n = next(self.ids)
            await self.ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                msg = json.loads((await self.ws.receive()).data)
                if msg.get("id") == n:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return msg["result"]
        return self.browser.run(send())

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise), as JSON data."""
        got = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression[:80]}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def screenshot(self, path: Path) -> png.Image:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return png.decode(data)

    def close(self) -> None:
        async def close():
            await self.ws.close()
            await self.session.close()
        if not self.session.closed:
            self.browser.run(close())
