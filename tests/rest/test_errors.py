"""Bad parameters and unknown objects answer YuniKorn's error body with today's status codes (1.5+:
404 for a missing object, 400 for a malformed parameter), the description naming the object."""

from __future__ import annotations

import pytest

from tests.rest.workload import Loaded

INVALID_QUEUE = "invalid queue name"
# today's codes (YuniKorn 1.5+): a missing object is 404, a malformed parameter 400
CASES = [
    ("/ws/v1/partition/nope/queues", 404, "Partition not found", "nope"),
    ("/ws/v1/partition/nope/nodes", 404, "Partition not found", "nope"),
    ("/ws/v1/partition/nope/placementrules", 404, "Partition not found", "nope"),
    ("/ws/v1/partition/nope/applications/active", 404, "Partition not found", "nope"),
    ("/ws/v1/partition/default/queue/root.zz/applications", 404, "Queue not found", "root.zz"),
    ("/ws/v1/partition/default/queue/root.zz/applications/active", 404, "Queue not found", "root.zz"),
    ("/ws/v1/partition/default/queue/root.zz", 404, "Queue not found", "root.zz"),
    ("/ws/v1/partition/default/queue/root.a%20b/applications", 400, INVALID_QUEUE, "root.a b"),
    ("/ws/v1/partition/default/queue/root..a/applications", 400, INVALID_QUEUE, "root..a"),
    ("/ws/v1/partition/nope/queue/root..a/applications", 400, INVALID_QUEUE, "root..a"),  # before the partition
    ("/ws/v1/partition/default/queue/root.a/application/app-b1", 404, "Application not found", "app-b1"),
    ("/ws/v1/partition/default/application/ghost", 404, "Application not found", "ghost"),
    ("/ws/v1/partition/default/node/ghost", 404, "Node not found", "ghost"),
    ("/ws/v1/partition/default/usage/user/ghost", 404, "User not found", "ghost"),
    ("/ws/v1/partition/default/usage/group/ghost", 404, "Group not found", "ghost"),
    ("/ws/v1/partition/default/applications/done", 400,
     "Only following application states are allowed: active, rejected, completed", "done"),
    ("/ws/v1/partition/default/queue/root.a/applications/completed", 400,
     "Only following application states are allowed: active", "completed"),
    ("/ws/v1/partition/default/applications/active?status=sleeping", 400,
     "Only following active statuses are allowed: new,accepted,starting,running,completing,failing,resuming",
     "sleeping"),
    ("/ws/v1/partition/default/nodes?limit=x", 400, "limit", "x"),
    ("/ws/v1/partition/default/applications?offset=-1", 400, "offset", "-1"),
    ("/ws/v1/events/batch?count=many", 400, "count", "many"),
    ("/ws/v1/events/batch?count=0", 400, '0 is not a valid value for "count"', ""),
    ("/ws/v1/events/batch?start=-1", 400, "start", "-1"),
    ("/ws/v1/events/stream?count=x", 400, "count", "x"),
    ("/ws/v1/no/such/path", 404, "Not Found", ""),
]


@pytest.mark.parametrize("path,status,message,named", CASES, ids=[c[0].split("/ws/v1/")[1] for c in CASES])
def test_error_shape_and_status(loaded: Loaded, path: str, status: int, message: str, named: str) -> None:
    r = loaded.get(path)
    assert r.status == status, r.body
    body = r.json()
    assert set(body) == {"status_code", "message", "description"}
    assert body["status_code"] == status and message in body["message"] + body["description"]
    assert f"'{named}'" in body["description"] if named else True, body  # names the object at fault
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
    assert loaded.get("/ws/v1/partition/default/queues?rmID=other").status == 404


def test_head_is_answered_on_read_paths(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/partitions", method="HEAD")
    assert r.status == 200 and r.body == b""
