"""Every worked example of seed 001 through gRPC against a running stack: the exact queue, or the rejection.

The cases are the placement engineer's table (tests/placement/seed001_cases.py).
One RM re-registers with each case's config (re-registration wipes the
partition), adds the application over si.v1, and reads where it landed from the
REST API (`queueName`), as a YuniKorn user would.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.e2e.sirm import SIRM
from tests.placement.seed001_cases import SEED001_CASES
from tests.si_builders import app


def app_queue(rest_address: str, app_id: str) -> str:
    url = f"http://{rest_address}/ws/v1/partition/default/application/{app_id}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["queueName"]


@pytest.fixture
def rm(module_stack):
    """The same RM for every case: each registration wipes the partition."""
    client = SIRM(module_stack.si_address, "rm-seed001")
    yield client
    client.close()


@pytest.mark.parametrize("case", SEED001_CASES, ids=[c.id for c in SEED001_CASES])
def test_seed001_example_through_grpc(module_stack, rm, case):
    rm.register(case.config)
    rm.open()
    app_id = "app-" + str(abs(hash(case.id)))
    rm.apps(app(app_id, case.queue, user=case.user, groups=case.groups, tags=case.tags))
    resp = rm.wait_for("application", lambda r: r.accepted or r.rejected)
    if case.expected is None:
        assert [r.applicationID for r in resp.rejected] == [app_id]
        assert resp.rejected[0].reason == f"failed to place application {app_id}: {case.reason}"
    else:
        assert [a.applicationID for a in resp.accepted] == [app_id], resp
        # reported twice, as the issue asks: with the acceptance, and in the REST API's queueName
        assert [(u.state, u.message) for u in resp.updated] == [("New", f"placed in queue {case.expected}")]
        assert app_queue(module_stack.rest_address, app_id) == case.expected
