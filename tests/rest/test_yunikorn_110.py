"""YuniKorn 1.9's REST paths, shapes and response rules through a real stack (``korral up``):
node utilisations, applications by state, placement rules, the queue's subtree, today's DAO
fields, gzip, the ``/debug`` paths, and the event stream (docs/yunikorn-compat.md)."""

from __future__ import annotations

import gzip

import pytest

from tests.conftest import wait_until
from tests.si_builders import node
from tests.rest.workload import EventStreamClient, Loaded, add_app_states, loaded_fixture


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> Loaded:
    for stack in loaded_fixture(tmp_path_factory, "rest110-stack"):
        add_app_states(stack)
        yield stack


def get(loaded: Loaded, path: str, **kw):
    r = loaded.get(path, **kw)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r.json()


def ids(apps: list[dict]) -> list[str]:
    return sorted(a["applicationID"] for a in apps)


def test_node_utilizations_bucket_every_partitions_nodes(loaded: Loaded) -> None:
    parts = {p["partition"]: p for p in get(loaded, "/ws/v1/scheduler/node-utilizations")}
    assert set(parts) == {"default", "gpu"} and parts["default"]["clusterId"] == "rm-rest"
    memory = next(u["utilization"] for u in parts["default"]["utilizations"] if u["type"] == "memory")
    assert [b["bucketName"] for b in memory] == [f"{i * 10}-{i * 10 + 10}%" for i in range(10)]
    assert sorted(n for b in memory for n in b["nodeNames"]) == ["n1", "n2"]
    assert sum(b["numOfNodes"] for b in memory) == 2
    gpu = next(u["utilization"] for u in parts["gpu"]["utilizations"] if u["type"] == "gpu")
    assert gpu[2] == {"bucketName": "20-30%", "numOfNodes": 1, "nodeNames": ["g1"]}  # 1 of 4 gpus


def test_applications_by_state_and_status(loaded: Loaded) -> None:
    base = "/ws/v1/partition/default"
    assert ids(get(loaded, f"{base}/applications/active")) == ["app-a1", "app-b1", "app-idle"]
    assert ids(get(loaded, f"{base}/applications/Active?status=Running")) == ["app-a1"]
    assert ids(get(loaded, f"{base}/applications/active?status=NEW")) == ["app-idle"]  # no ask yet
    rejected = get(loaded, f"{base}/applications/rejected")
    assert ids(rejected) == ["app-ghost"] and rejected[0]["applicationState"] == "Rejected"
    assert "root.nope" in rejected[0]["rejectedMessage"]
    assert get(loaded, f"{base}/applications/completed") == []
    assert ids(get(loaded, f"{base}/queue/root.b/applications/active")) == ["app-b1", "app-idle"]
    assert ids(get(loaded, f"{base}/queue/root.b/applications/active?status=starting")) == ["app-b1"]


def test_placement_rules_of_a_partition(loaded: Loaded) -> None:
    assert get(loaded, "/ws/v1/partition/gpu/placementrules") == [{"name": "provided",
                                                                   "parameters": {"create": "false"}}]


def test_one_queue_has_its_children_only_with_subtree(loaded: Loaded) -> None:
    root = get(loaded, "/ws/v1/partition/default/queue/root")
    assert root["childNames"] == ["root.a", "root.b"] and "children" not in root and root["partition"] == ""
    tree = get(loaded, "/ws/v1/partition/default/queue/root?subtree")
    assert [c["queuename"] for c in tree["children"]] == ["root.a", "root.b"]


def test_todays_fields_hold_the_stacks_data(loaded: Loaded) -> None:
    root = get(loaded, "/ws/v1/partition/default/queues")
    a = next(c for c in root["children"] if c["queuename"] == "root.a")
    assert root["headroom"] == {"memory": 1750, "vcore": 1975}  # 2 nodes of 1000 each, 250 / 25 used
    assert a["headroom"] == {"memory": 800, "vcore": 1975}  # max 1000 - 200, vcore from root
    assert (a["preemptionDelay"], a["quotaPreemptionDelay"], a["sortingPolicy"]) == ("30s", "0s", "fifo")
    apps = {x["applicationID"]: x for x in get(loaded, "/ws/v1/partition/default/applications/active")}
    assert apps["app-a1"]["startTime"] > 1_600_000_000_000 and apps["app-b1"]["startTime"] == 0
    assert apps["app-a1"]["groups"] == ["dev"] and apps["app-a1"]["resourceHistory"] == {}
    n1 = get(loaded, "/ws/v1/partition/default/node/n1")
    assert n1["attributes"]["si/node-partition"] == "default" and n1["foreignAllocations"] == []
    part = next(p for p in get(loaded, "/ws/v1/partitions") if p["name"] == "default")
    assert part["preemptionEnabled"] is False and part["quotaPreemptionEnabled"] is False
    assert part["applications"]["Rejected"] == 1


@pytest.mark.parametrize("path", ["/ws/v1/partition/default/nodes", "/ws/v1/metrics", "/debug/fullstatedump",
                                  "/ws/v1/partition/default/queues"])
def test_large_answers_are_gzipped_once_when_asked(loaded: Loaded, path: str) -> None:
    r = loaded.get(path, headers={"Accept-Encoding": "gzip"})
    assert r.status == 200 and r.headers["Content-Encoding"] == "gzip" and r.headers["Vary"] == "Accept-Encoding"
    text = gzip.decompress(r.body)
    assert text[:1] in (b"[", b"{", b"#")  # plain JSON or Prometheus text after one layer
    plain = loaded.get(path)
    assert "Content-Encoding" not in plain.headers


def test_small_answers_and_the_stream_are_never_gzipped(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/partition/gpu/placementrules", headers={"Accept-Encoding": "gzip"})
    assert "Content-Encoding" not in r.headers and r.json()[0]["name"] == "provided"


def test_the_state_dump_at_todays_path_has_todays_keys(loaded: Loaded) -> None:
    today = get(loaded, "/debug/fullstatedump")
    for key in ("timestamp", "partitions", "applications", "appHistory", "nodes", "clusterInfo",
                "containerHistory", "queues", "rmDiagnostics", "logLevel", "config", "placementRules",
                "eventStreams"):
        assert key in today, key
    assert {p["partition"] for p in today["placementRules"]} == {"default", "gpu"}
    assert today["config"][0]["rmID"] == "rm-rest" and len(today["config"][0]["checksum"]) == 64
    old = get(loaded, "/ws/v1/fullstatedump")
    assert {"Timestamp", "Partitions", "RMDiagnostics", "PlacementRules"} <= set(old) and "timestamp" not in old


@pytest.mark.parametrize("path", ["/debug/stack", "/ws/v1/stack"])
def test_the_stack_of_rmproxy_is_plain_text(loaded: Loaded, path: str) -> None:
    r = loaded.get(path)
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    assert b"thread MainThread" in r.body and b"\ntask " in r.body


def test_the_health_check_answers_200_with_its_body(loaded: Loaded) -> None:
    assert get(loaded, "/ws/v1/scheduler/healthcheck")["Healthy"] is True


def test_head_on_the_stream_opens_no_stream(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/events/stream", method="HEAD")
    assert r.status == 200 and r.body == b"" and r.headers["Content-Type"].startswith("application/json")
    assert get(loaded, "/debug/fullstatedump")["eventStreams"] == []


def test_an_event_stream_sends_history_then_every_new_event(loaded: Loaded) -> None:
    address = loaded.handle.rest_address
    stream = EventStreamClient(address, "?count=2", host="watcher.example:9080")
    try:
        assert stream.resp.status == 200 and stream.resp.getheader("Content-Encoding") is None
        first = stream.line()
        assert set(first) == {"InstanceUUID"} and len(first["InstanceUUID"]) == 36
        history = [stream.line(), stream.line()]
        assert all({"type", "objectID", "timestampNano"} <= set(e) for e in history)
        streams = get(loaded, "/debug/fullstatedump")["eventStreams"]
        assert [s["Name"] for s in streams] == ["watcher.example:9080"] and streams[0]["CreatedAt"].endswith("Z")
        loaded.rm.nodes(node("n-late", memory=10, vcore=10))
        added = stream.until(lambda e: e.get("objectID") == "n-late")
        assert (added["type"], added["eventChangeType"], added["partition"]) == (3, 2, "default")
    finally:
        stream.close()
    wait_until(lambda: get(loaded, "/debug/fullstatedump")["eventStreams"] == [], 10,
               "the closed stream leaving the dump's eventStreams")
