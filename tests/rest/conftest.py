"""One loaded stack (see ``tests/rest/workload.py``) shared by every REST test of the package."""

from __future__ import annotations

import pytest

from tests.rest.workload import Loaded, start_loaded, stop_loaded


@pytest.fixture(scope="package")
def loaded(tmp_path_factory) -> Loaded:
    handle = start_loaded(tmp_path_factory.mktemp("rest-stack") / "state")
    yield handle
    problems = stop_loaded(handle)
    if problems:
        pytest.fail("\n".join(problems))
