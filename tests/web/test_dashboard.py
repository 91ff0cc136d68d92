"""The dashboard rendered by a real headless Chromium with the data of a running stack.

Each view is loaded once: Chromium writes a screenshot (kept in the test's tmp dir, path printed)
and the DOM after the page's scripts ran; the assertions read the DOM for the workload's objects.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import pytest

from tests.common.test_units import CASES as UNIT_CASES
from tests.conftest import wait_until
from tests.rest.workload import Loaded
from tests.web.cdp import Browser

BROWSER_TIMEOUT = 60
WINDOW = (1400, 900)


def render(chromium: str, url: str, shot: Path, profile: Path) -> str:
    """Load ``url``; return the DOM after scripts ran (5 s of virtual time); write ``shot``."""
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", f"--screenshot={shot}",
           "--dump-dom", f"--window-size={WINDOW[0]},{WINDOW[1]}", url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


VIEWS = {
    "overview": [r'data-loaded="overview"', r"<td>rm-rest</td><td>default</td>", r"<td>gpu</td>",
                 r"healthy", r"Orphan allocation on node check", r"memory 12%"],
    "queues": [r'data-loaded="queues"', r'data-queue="root"', r'data-queue="root.a"', r'data-queue="root.b"',
               r"guaranteed 400 B", r"max 1000 B", r"used 200 B"],  # human units (common/units.py)
    "apps": [r'data-loaded="apps"', r'data-app="app-a1"', r'data-app="app-b1"', r">Running<", r">Starting<",
             r"root\.a", r">alice<"],
    "nodes": [r'data-loaded="nodes"', r'class="cell" data-node="n1"', r'class="cell" data-node="n2"',
              r'<tr data-node="n1">', r"2 nodes · mean of the highest utilisation \d+%"],
    "trends": [r'data-loaded="trends"', r"samples, one every 0\.5 s, of \[rm-rest\] default", r"Allocations per second",
               r'data-queue-chart="root\.a"', r"root\.a \(memory\)"],
    "stack": [r'data-loaded="stack"', r'data-worker="worker-0"', r"rm-rest/default", r"rm-rest/gpu",
              r'data-rm="rm-rest"', r">Running<", r"broker connected", r"allocation, application, node",
              r'data-rmproxy="[^"]+"', r"\(this one\)", r"<td>\d+\.\d s</td>"],
}


def test_the_apps_view_explains_why_a_selected_application_waits(chromium: str, loaded: Loaded,
                                                                 tmp_path: Path) -> None:
    shot = tmp_path / "dashboard-why.png"
    dom = render(chromium, f"{loaded.base}/#apps/app-a1", shot, tmp_path / "profile")
    print(f"screenshot: {shot}")
    assert 'class="error"' not in dom, re.search(r'id="status"[^>]*>[^<]*', dom)
    assert re.search(r"Why app-a1 waits", dom)
    row = re.search(r'<tr data-ask="a1-huge">.*?</tr>', dom, re.S)
    assert row, "the waiting ask a1-huge is not explained"
    assert "headroom of queue root.a" in row.group(0)  # 200 used + 900 > max 1000
    assert re.search(r"(fits|Insufficient \w+) \d", row.group(0))  # the node checks


@pytest.mark.parametrize("view", list(VIEWS))
def test_each_view_renders_the_stack_data(chromium: str, loaded: Loaded, tmp_path: Path, view: str) -> None:
    shot = tmp_path / f"dashboard-{view}.png"
    dom = render(chromium, f"{loaded.base}/#{view}", shot, tmp_path / "profile")
    print(f"screenshot of {view}: {shot}")
    assert png_size(shot) == WINDOW and shot.stat().st_size > 10_000
    assert 'class="error"' not in dom, re.search(r'id="status"[^>]*>[^<]*', dom)
    for pattern in VIEWS[view]:
        assert re.search(pattern, dom), f"{view}: {pattern!r} not in the rendered page"


def test_the_page_and_its_assets_are_served_from_the_package(loaded: Loaded) -> None:
    page = loaded.get("/")
    assert page.status == 200 and b"/ui/app.js" in page.body and b"/ui/style.css" in page.body
    for asset in ("/ui/app.js", "/ui/style.css"):
        assert loaded.get(asset).status == 200
    # offline: nothing is loaded from another origin
    assert not re.search(rb"(src|href)=\"(https?:)?//", page.body)
    assert b"http://" not in loaded.get("/ui/app.js").body and b"https://" not in loaded.get("/ui/style.css").body


def test_the_dashboard_prints_every_quantity_as_the_cli_does(chromium: str, loaded: Loaded, tmp_path: Path) -> None:
    """One formatter, one rounding rule: the dashboard's fmtQty gives the CLI's text for each case."""
    from common.units import human

    browser = Browser(chromium, tmp_path / "profile", WINDOW)
    try:
        page = browser.page()
        page.goto(f"{loaded.base}/#overview")
        wait_until(lambda: page.evaluate("typeof fmtQty === 'function'"), 30, "the dashboard's scripts loaded")
        shown = page.evaluate("(" + json.dumps([[n, v] for n, v, _ in UNIT_CASES]) + ").map(([n, v]) => fmtQty(n, v))")
    finally:
        browser.close()
    assert shown == [text for _, _, text in UNIT_CASES] == [human(n, v) for n, v, _ in UNIT_CASES]
