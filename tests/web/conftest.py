"""The dashboard tests: a loaded stack (tests/rest/workload.py) and a headless Chromium.

Chromium comes from Debian's ``chromium`` package (``apt-get install -y chromium``). When it is
not installed the tests are skipped with that instruction; nothing else skips them.
"""

from __future__ import annotations

import shutil

import pytest

from tests.rest.workload import Loaded, loaded_fixture


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("headless Chromium is not installed: run `apt-get install -y chromium` (Debian) "
                    "to run the dashboard tests")
    return path


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> Loaded:
    # the trends are sampled every half second, so the charts have points within the test's time
    yield from loaded_fixture(tmp_path_factory, "web-stack", env={"KORRAL_TRENDS_INTERVAL": "0.5"})
