"""The vendored chart library is the released uPlot, unmodified, with its licence, served offline."""

from __future__ import annotations

import hashlib

from rmproxy.webapi.dashboard import WEB_DIR
from tests.rest.workload import Loaded

UPLOT = WEB_DIR / "vendor" / "uplot"
PINS = {  # npm registry package uplot@1.6.32, dist/ (see vendor/uplot/README.md)
    "uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
    "uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
}


def test_the_files_are_the_released_ones_with_their_licence():
    for name, digest in PINS.items():
        assert hashlib.sha256((UPLOT / name).read_bytes()).hexdigest() == digest, f"{name} is not uPlot 1.6.32's"
    licence = (UPLOT / "LICENSE").read_text()
    assert "The MIT License (MIT)" in licence and "Leon Sorokin" in licence
    assert "uplot@1.6.32" in (UPLOT / "README.md").read_text()


def test_the_dashboard_loads_them_from_this_rmproxy(loaded: Loaded):
    page = loaded.get("/").body
    for path in ("/ui/vendor/uplot/uPlot.iife.min.js", "/ui/vendor/uplot/uPlot.min.css", "/ui/trends.js"):
        assert path.encode() in page
        assert loaded.get(path).status == 200
