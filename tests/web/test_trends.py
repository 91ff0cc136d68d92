"""The Trends view in a real headless Chromium: the charts hold exactly the series the trends endpoint
served, and the screenshot shows each line where the chart says its points are.

The stack samples every half second (tests/web/conftest.py); the test lets the ring buffer fill,
stops the page's refresh timer so nothing moves while it reads, reads each chart's data and the
page position of its points back from the uPlot objects (``window.korralCharts``), takes a
screenshot, and compares both with ``/ws/v1/korral/partition/default/trends``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.rest.workload import Loaded
from tests.si_builders import ask
from tests.web.cdp import Browser
from tests.web.png import Image

WINDOW = (1400, 1000)
TRENDS = "/ws/v1/korral/partition/default/trends?rmID=rm-rest"
CHARTS = {"rate": ["allocations/s"], "pending": ["pending asks"], "queue:root.a": ["used", "guaranteed", "max"]}
COLOURS = {"allocations/s": (0x2f, 0x6f, 0xb2), "pending asks": (0xd0, 0x8a, 0x12), "used": (0x2f, 0x6f, 0xb2),
           "guaranteed": (0x2c, 0x9c, 0x5a), "max": (0xc9, 0x37, 0x2c)}

# For every chart: its data, its series' labels and, for each series and sample, where uPlot put
# the point on the page (CSS pixels = screenshot pixels at device scale 1).
READ_CHARTS = """(async () => {
  clearInterval(state.timer);           // nothing redraws while the test reads and looks
  await refresh(); await refresh();
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const out = {};
  for (const [name, c] of Object.entries(window.korralCharts)) {
    const box = c.over.getBoundingClientRect();
    out[name] = {
      data: c.data, labels: c.series.slice(1).map((s) => s.label),
      points: c.series.slice(1).map((s, i) => c.data[0].map((x, j) => c.data[i + 1][j] === null ? null
        : [box.left + c.valToPos(x, "x"), box.top + c.valToPos(c.data[i + 1][j], s.scale)])),
    };
  }
  return out;
})()"""


def near(img: Image, x: float, y: float, colour: tuple[int, int, int], reach: int = 3, tolerance: int = 60) -> bool:
    """Whether a pixel within ``reach`` of (x, y) is about ``colour``: lines are anti-aliased, and
    a dashed line (gaps of at most 3 pixels) may have a gap at the point itself."""
    for dy in range(-reach, reach + 1):
        for dx in range(-reach, reach + 1):
            px, py = round(x) + dx, round(y) + dy
            if 0 <= px < img.width and 0 <= py < img.height:
                if sum(abs(a - b) for a, b in zip(img.pixel(px, py), colour)) <= tolerance:
                    return True
    return False


@pytest.fixture
def browser(chromium: str, tmp_path: Path):
    b = Browser(chromium, tmp_path / "profile", WINDOW)
    yield b
    b.close()


def test_the_trends_charts_show_exactly_what_the_endpoint_served(loaded: Loaded, browser: Browser, tmp_path: Path):
    for i in range(3):  # allocations while the sampler runs: the rate and root.b's usage move
        loaded.rm.asks(ask(f"trend-{i}", "app-b1", memory=10, vcore=1))
    wait_until(lambda: len(loaded.get(TRENDS).json()["times"]) >= 6, 30, "six trend samples")

    page = browser.page()
    page.goto(f"{loaded.base}/#trends")
    wait_until(lambda: page.evaluate("!!document.body && document.body.dataset.loaded === 'trends' && "
                                     "!!window.korralCharts['queue:root.a']"), 30, "the Trends view drawn")
    charts = page.evaluate(READ_CHARTS)
    shot = tmp_path / "trends.png"
    img = page.screenshot(shot)
    print(f"screenshot: {shot}")
    served = loaded.get(TRENDS).json()  # later than the page's read: the same samples and maybe newer ones

    index = {t: i for i, t in enumerate(served["times"])}
    columns = {"rate": [served["allocationsPerSecond"]], "pending": [served["pendingAsks"]],
               "queue:root.a": [served["queues"]["root.a"]["memory"][k] for k in ("used", "guaranteed", "max")]}
    checked = 0
    for name, labels in CHARTS.items():
        chart = charts[name]
        assert chart["labels"] == labels
        times = chart["data"][0]
        assert len(times) >= 6 and all(t in index for t in times), f"{name}: times the endpoint did not serve"
        for series, expected in zip(chart["data"][1:], columns[name]):
            assert series == [expected[index[t]] for t in times], f"{name}: a series differs from the endpoint's"
        for label, points in zip(labels, chart["points"]):
            for point in points:
                if point is None:  # no value (the first sample has no rate)
                    continue
                assert 0 <= point[0] < img.width and 0 <= point[1] < img.height, f"{name}: {point} off screen"
                assert near(img, *point, COLOURS[label]), \
                    f"{name}: no {label} line at {point} in {shot} (pixel {img.pixel(round(point[0]), round(point[1]))})"
                checked += 1
    assert checked >= 5 + 6 + 3 * 6  # six samples at least: five rates, six pending counts, three lines of root.a
    # the known shape of the data: root.a holds 200 of its guaranteed 400 and max 1000 all along
    root_a = charts["queue:root.a"]["data"]
    assert set(root_a[1]) == {200} and set(root_a[2]) == {400} and set(root_a[3]) == {1000}
    assert json.dumps(served["queues"]["root.a"]["memory"]["max"][-1]) == "1000"
