"""YuniKorn's own web UI (apache/yunikorn-web v1.8.0 and v1.9.0-0) on a running Korral stack, in
headless Chromium.

The UI is not part of Korral and nothing here builds it: build it yourself outside the repository,
as its own README says, and point ``KORRAL_YUNIKORN_WEB`` at the directory of the build (its
``dist/yunikorn-web``; a build from before YUNIKORN-3214 put the files in
``dist/yunikorn-web/browser``, which is found too); without it these tests are skipped. rmproxy
serves that directory at ``/`` on its REST address (``korral up --ui-dir``), so the UI reads
``/ws/v1`` from its own origin as it expects.

Every page is loaded and must render the stack's data; any failed REST call sends the UI to its
error page (``#/error``, the ``app-error-view`` component), which no page may show.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.rest.workload import BUILD_INFO, Loaded, add_app_states, loaded_fixture
from tests.web.cdp import Browser

UI_ENV = "KORRAL_YUNIKORN_WEB"
BROWSER_TIMEOUT = 90
ERROR_PAGE = ("<app-error-view", "Oops, something went wrong")


@pytest.fixture(scope="module")
def ui_dir() -> Path:
    path = os.environ.get(UI_ENV)
    if not path:
        pytest.skip(f"YuniKorn's web UI is not given: build apache/yunikorn-web (v1.8.0 or v1.9.0-0) outside "
                    f"the repository (its README) and set {UI_ENV} to its dist/yunikorn-web directory")
    for root in (Path(path), Path(path) / "browser"):  # the layout since YUNIKORN-3214, and the one before
        if (root / "index.html").is_file():
            return root
    pytest.fail(f"{UI_ENV}={path} has no index.html (nor browser/index.html): give the built "
                "dist/yunikorn-web directory")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, ui_dir: Path) -> Loaded:
    for stack in loaded_fixture(tmp_path_factory, "yunikorn-web-stack", ("--ui-dir", str(ui_dir))):
        add_app_states(stack)
        yield stack


def page_dom(chromium: str, url: str, profile: Path) -> str:
    """The DOM of ``url`` once the UI's scripts ran (8 s of virtual time), as text without markup."""
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--virtual-time-budget=8000", "--window-size=1400,900", "--dump-dom", url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def visible_text(dom: str) -> str:
    """The page's text, words apart; empty elements (the nodes table highlights a filter with
    ``<strong></strong>`` between letters) are dropped first so words stay whole."""
    body = re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.S)
    body = re.sub(r"<(\w+)[^>]*></\1>", "", body)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


# page (hash route) -> the component it shows, and text the stack's data must put in it
PAGES = {
    "dashboard": ("<app-dashboard", [r"Name rm-rest", r"Status Active", r"Nodes 2", r"Applications 4",
                                     r"Running 1", r"Starting 1", r"Rejected 1", r"Node Resource Utilization"]),
    "queues": ("<app-queues-view", [r"Partition: default", r"\broot\b"]),
    "queues-v2": ("<queues-v2-view", [r"\broot\b", r"\ba\b", r"\bb\b"]),
    "applications?partition=default&queue=root.a": ("<app-applications-view", [r"app-a1", r"Running"]),
    "applications?partition=default&queue=root.b": ("<app-applications-view", [r"app-b1", r"Starting",
                                                                                r"app-idle", r"New"]),
    "nodes": ("<app-nodes-view", [r"\bn1\b", r"\bn2\b", r"Memory", r"1 – 2 of 2"]),
    "status": ("<app-status-view", [r"Healthy", r"Orphan allocation on node check", r"RM connections"]),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders_the_stacks_data(chromium: str, loaded: Loaded, tmp_path: Path, page: str) -> None:
    component, patterns = PAGES[page]
    dom = page_dom(chromium, f"{loaded.base}/#/{page}", tmp_path / "profile")
    for mark in ERROR_PAGE:
        assert mark not in dom, f"{page}: the UI went to its error page"
    assert component in dom, f"{page}: {component}> not rendered"
    text = visible_text(dom)
    for pattern in patterns:
        assert re.search(pattern, text), f"{page}: {pattern!r} not in the page: {text[:3000]}"


def test_the_dashboards_build_information_is_the_rms(chromium: str, loaded: Loaded, tmp_path: Path) -> None:
    """The dashboard's info menu shows ``rmBuildInformation``'s build date, build version and RM id."""
    browser = Browser(chromium, tmp_path / "profile", (1400, 900))
    try:
        page = browser.page()
        page.goto(f"{loaded.base}/#/dashboard")
        opened = "(() => { const b = document.querySelector('.info-card button'); if (b) b.click(); return !!b; })()"
        wait_until(lambda: page.evaluate(opened), 30, "the dashboard's info button")
        menu = "document.querySelector('.about-card')?.innerText || ''"

        def filled() -> str | None:  # the menu may open before /ws/v1/clusters answered (n/a until then)
            text = page.evaluate(menu)
            return text if "rm-rest" in text else None

        about = wait_until(filled, 30, "the info menu with the RM's build information", lambda: page.evaluate(menu))
    finally:
        browser.close()
    text = re.sub(r"\s+", " ", about)
    for label, value in (("Build Date", BUILD_INFO["buildDate"]), ("Build Version", BUILD_INFO["buildVersion"]),
                         ("RM Id", "rm-rest")):
        assert re.search(rf"{label} {re.escape(value)}", text, re.I), (label, text)


def test_the_ui_and_its_assets_are_served_at_the_root(loaded: Loaded, ui_dir: Path) -> None:
    assert loaded.get("/").body == (ui_dir / "index.html").read_bytes()
    assert loaded.get("/assets/config/envconfig.json").status == 200
    assert loaded.get("/../../etc/passwd").status == 404 and loaded.get("/no-such-file.js").status == 404
    assert b"Korral" in loaded.get("/ui/").body  # Korral's dashboard moved to /ui/


def test_the_check_sees_the_error_page_when_the_rest_api_fails(chromium: str, ui_dir: Path, tmp_path: Path) -> None:
    """The same UI on a server whose /ws/v1 answers 404 (as Korral without node-utilizations did):
    the dashboard goes to the error page, and the check above would catch it."""

    class NoApi(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/ws/"):
                self.send_error(404)
            else:
                super().do_GET()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(NoApi, directory=str(ui_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        dom = page_dom(chromium, f"http://127.0.0.1:{server.server_port}/#/dashboard", tmp_path / "profile")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert ERROR_PAGE[0] in dom
