"""Bad parameters and unknown objects answer YuniKorn's error body with its status codes."""

from __future__ import annotations

import pytest

from tests.rest.workload import Loaded

CASES = [
    ("/ws/v1/partition/nope/queues", 400, "Partition not found"),
    ("/ws/v1/partition/nope/nodes", 400, "Partition not found"),
    ("/ws/v1/partition/default/queue/root.zz/applications", 400, "Queue not found"),
    ("/ws/v1/partition/default/queue/root.zz", 400, "Queue not found"),
    ("/ws/v1/partition/default/queue/root.a%20b/applications", 400, "not valid"),
    ("/ws/v1/partition/default/queue/root..a/applications", 400, "not valid"),
    ("/ws/v1/partition/default/queue/root.a/application/app-b1", 400, "Application not found"),
    ("/ws/v1/partition/default/application/ghost", 400, "Application not found"),
    ("/ws/v1/partition/default/node/ghost", 404, "Node not found"),
    ("/ws/v1/partition/default/usage/user/ghost", 400, "User not found"),
    ("/ws/v1/partition/default/usage/group/ghost", 400, "Group not found"),
    ("/ws/v1/partition/default/nodes?limit=x", 400, "limit"),
    ("/ws/v1/partition/default/applications?offset=-1", 400, "offset"),
    ("/ws/v1/events/batch?count=many", 400, "count"),
    ("/ws/v1/no/such/path", 404, "Not Found"),
]


@pytest.mark.parametrize("path,status,message", CASES, ids=[c[0].split("/ws/v1/")[1] for c in CASES])
def test_error_shape_and_status(loaded: Loaded, path: str, status: int, message: str) -> None:
    r = loaded.get(path)
    assert r.status == status, r.body
    body = r.json()
    assert set(body) == {"status_code", "message", "description"}
    assert body["status_code"] == status and message in body["message"] + body["description"]
    assert r.headers.get("Access-Control-Allow-Origin") == "*"


def test_a_bad_log_level_is_400(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/loglevel/loud", method="PUT")
    assert r.status == 400 and "loud" in r.json()["message"]


def test_a_wrong_method_is_405_in_the_error_shape(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/clusters", method="DELETE")
    assert r.status == 405 and r.json()["status_code"] == 405


def test_cors_preflight_and_trailing_slashes(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/partition/default/queues", method="OPTIONS")
    assert r.status == 200
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "GET" in r.headers["Access-Control-Allow-Methods"] and "POST" in r.headers["Access-Control-Allow-Methods"]
    assert loaded.get("/ws/v1/partitions/").status == 200
    assert loaded.get("/ws/v1/validate-conf/", method="POST", data=b"").json()["allowed"] is True


def test_partition_names_with_rm_prefix_or_rmid_parameter(loaded: Loaded) -> None:
    assert loaded.get("/ws/v1/partition/%5Brm-rest%5Ddefault/queues").status == 200
    assert loaded.get("/ws/v1/partition/default/queues?rmID=rm-rest").status == 200
    assert loaded.get("/ws/v1/partition/default/queues?rmID=other").status == 400


def test_head_is_answered_on_read_paths(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/partitions", method="HEAD")
    assert r.status == 200 and r.body == b""
