"""One loaded stack (see ``tests/rest/workload.py``) shared by every REST test of the package."""

from __future__ import annotations

import pytest

from tests.rest.workload import Loaded, loaded_fixture


@pytest.fixture(scope="package")
def loaded(tmp_path_factory) -> Loaded:
    yield from loaded_fixture(tmp_path_factory, "rest-stack")
