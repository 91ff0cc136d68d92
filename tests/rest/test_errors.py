"""Bad parameters and unknown objects answer YuniKorn's error body with today's status codes (1.5+:
404 for a missing object, 400 for a malformed parameter), the description naming the object."""

from __future__ import annotations

import pytest

from tests.rest.workload import Loaded

P = "/ws/v1/partition"
# today's codes (YuniKorn 1.5+): a missing object is 404, a malformed parameter 400;
# (path, status, message, the object the description names)
CASES = (
    [(f"{P}/nope/{tail}", 404, "Partition not found", "nope")
     for tail in ("queues", "nodes", "placementrules", "applications/active")]
    + [(f"{P}/default/queue/root.zz{tail}", 404, "Queue not found", "root.zz")
       for tail in ("/applications", "/applications/active", "")]
    # an invalid queue name is checked before the partition, as YuniKorn does
    + [(f"{P}/{part}/queue/{queue}/applications", 400, "invalid queue name", name)
       for part, queue, name in (("default", "root.a%20b", "root.a b"), ("default", "root..a", "root..a"),
                                 ("nope", "root..a", "root..a"))]
    + [(f"{P}/default/{tail}", 404, f"{kind} not found", name) for tail, kind, name in (
        ("queue/root.a/application/app-b1", "Application", "app-b1"),
        ("application/ghost", "Application", "ghost"), ("node/ghost", "Node", "ghost"),
        ("usage/user/ghost", "User", "ghost"), ("usage/group/ghost", "Group", "ghost"))]
    + [(f"{P}/default/{tail}", 400, f"Only following {what} are allowed: {allowed}", name)
       for tail, what, allowed, name in (
        ("applications/done", "application states", "active, rejected, completed", "done"),
        ("queue/root.a/applications/completed", "application states", "active", "completed"),
        ("applications/active?status=sleeping", "active statuses",
         "new,accepted,starting,running,completing,failing,resuming", "sleeping"))]
    + [(f"/ws/v1/{tail}={value}", 400, param, value) for tail, param, value in (
        ("partition/default/nodes?limit", "limit", "x"), ("partition/default/applications?offset", "offset", "-1"),
        ("events/batch?count", "count", "many"), ("events/batch?start", "start", "-1"),
        ("events/batch?start", "start", "xyz"), ("events/batch?start", "start", "5x"),
        ("events/batch?start", "start", "1_000"), ("events/batch?start", "start", "9" * 30),
        ("partition/default/nodes?offset", "offset", "1e3"), ("events/stream?count", "count", "x"))]
    + [("/ws/v1/events/batch?count=0", 400, '0 is not a valid value for "count"', ""),
       ("/ws/v1/no/such/path", 404, "Not Found", "")]
)


@pytest.mark.parametrize("path,status,message,named", CASES, ids=[c[0].split("/ws/v1/")[1] for c in CASES])
def test_error_shape_and_status(loaded: Loaded, path: str, status: int, message: str, named: str) -> None:
    r = loaded.get(path)
    assert r.status == status, r.body
    body = r.json()
    assert set(body) == {"status_code", "message", "description"}
    assert body["status_code"] == status and message in body["message"] + body["description"]
    assert f"'{named}'" in body["description"] if named else True, body  # names the object at fault
    assert "strconv" not in body["message"] + body["description"], body  # said in our words, not Go's
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
