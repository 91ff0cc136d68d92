"""The worker-side answers (``partition_worker.queries``) on a real PartitionSession, no processes."""

from __future__ import annotations

import msgpack
import pytest

from common import si_pb2
from common.messages import QUERIES, NotFound, Query
from partition_worker.queries import ANSWERS, INT32_MIN, answer
from partition_worker.step_stats import observe_step
from tests.core.test_session import START, add_app, add_node, session
from tests.si_builders import ask


def read(session, body: dict):
    """The answer to ``body`` as it crosses the wire: decoded into its query class first."""
    return answer(session, Query.decode(body))


@pytest.fixture
def s():
    sess = session()
    add_app(sess, "app1", queue="root.a", user="alice")
    add_app(sess, "app2", queue="root.b", user="bob")
    for i in range(5):
        add_node(sess, f"n{i}")
    sess.apply_allocation_request(si_pb2.AllocationRequest(asks=[
        ask("k1", "app1", repeat=2), ask("k2", "app2"), ask("big", "app1", memory=100_000)]), START)
    sess.step(START)
    return sess


def test_every_answer_is_msgpack_able(s) -> None:
    for what in ("partition", "queues", "apps", "nodes", "usage", "events", "health", "metrics", "dump"):
        msgpack.packb(read(s, {"what": what}), use_bin_type=True)


def test_every_query_class_has_its_answer() -> None:
    assert set(ANSWERS) == set(QUERIES.values())


def test_unknown_query_names_the_known_ones(s) -> None:
    with pytest.raises(ValueError, match="unknown query 'everything'.*nodes"):
        read(s, {"what": "everything"})


@pytest.mark.parametrize("body,message", [
    ({"what": "app", "app": "ghost"}, "Application not found"),
    ({"what": "app", "app": "app1", "queue": "root.b"}, "Application not found"),
    ({"what": "apps", "queue": "root.zz"}, "Queue not found"),
    ({"what": "node", "node": "ghost"}, "Node not found"),
    ({"what": "usage", "kind": "user", "name": "ghost"}, "User not found"),
    ({"what": "usage", "kind": "group", "name": "ghost"}, "Group not found"),
], ids=["unknown app", "app in another queue", "unknown queue", "unknown node", "unknown user", "unknown group"])
def test_missing_objects_answer_yunikorns_message(s, body, message) -> None:
    missing = read(s, body)
    assert isinstance(missing, NotFound) and missing.message == message


@pytest.mark.parametrize("body", [{"what": "nodes", "limit": "x"}, {"what": "nodes", "offset": -1},
                                  {"what": "usage", "kind": "planets"}], ids=["limit", "offset", "usage kind"])
def test_malformed_parameters_raise_value_error(s, body) -> None:
    with pytest.raises(ValueError):
        read(s, body)


def test_nodes_page(s) -> None:
    page = read(s, {"what": "nodes", "offset": 1, "limit": 2})
    assert page["total"] == 5 and page["offset"] == 1
    assert [n["nodeID"] for n in page["items"]] == ["n1", "n2"]
    assert read(s, {"what": "nodes", "offset": 10})["items"] == []


def test_apps_filter_by_queue_and_state(s) -> None:
    assert [a["applicationID"] for a in read(s, {"what": "apps", "queue": "root.a"})["items"]] == ["app1"]
    running = read(s, {"what": "apps", "states": ["running"]})["items"]
    assert [a["applicationID"] for a in running] == ["app1"]  # app2 holds one allocation: Starting


def test_an_application_only_shows_pending_asks_and_allocation_priorities(s) -> None:
    app = read(s, {"what": "app", "app": "app1"})
    assert [r["allocationKey"] for r in app["requests"]] == ["big"]
    assert app["minAllocationPriority"] == 0 and app["lastStateChangeTime"] > 0
    assert read(s, {"what": "app", "app": "app2"})["minAllocationPriority"] == 0
    bare = session()
    add_app(bare, "idle")
    assert read(bare, {"what": "app", "app": "idle"})["minAllocationPriority"] == INT32_MIN


def test_queue_tree_priority_capacity_and_partition_on_the_root_only(s) -> None:
    root = read(s, {"what": "queues"})
    a = next(c for c in root["children"] if c["queuename"] == "root.a")
    assert a["currentPriority"] == 0  # the pending "big" ask has priority 0
    assert root["absUsedCapacity"] == {"memory": 0, "vcore": 0}  # 30 of 5,000 memory
    assert root["partition"] == "default" and a["partition"] == ""  # YuniKorn: named on the root only


def test_health_finds_an_orphan_allocation(s) -> None:
    assert all(c["Succeeded"] for c in read(s, {"what": "health"}))
    app = s.core.apps["app2"]
    uuid = next(iter(app.allocations))
    del app.allocations[uuid]  # corrupt the books on purpose: the node still holds it
    checks = {c["Description"]: c for c in read(s, {"what": "health"})}
    orphan = checks["Check if there are orphan allocations on the nodes"]
    assert not orphan["Succeeded"] and uuid in orphan["DiagnosisMessage"]


def test_metrics_include_observed_step_counters(s) -> None:
    assert read(s, {"what": "metrics"})["observed"] is None
    s.apply_allocation_request(si_pb2.AllocationRequest(asks=[ask("k3", "app2")]), START)
    observe_step(s, s.step(START + 1), 0.003)
    obs = read(s, {"what": "metrics"})["observed"]
    assert obs["allocationAttempts"]["allocated"] == 1 and obs["steps"] == 1
    assert sum(obs["stepBuckets"]) == 1 and obs["stepBuckets"][obs["stepBucketsMs"].index(5)] == 1


def test_the_dump_node_shell_matches_the_node_view(s) -> None:
    from partition_worker.core.dao import node_dao

    for n in s.core.nodes.nodes.values():
        full = node_dao(n, "default")
        full.pop("allocations")
        assert node_dao(n, "default", with_allocations=False) == full


def test_pages_are_bounded_by_work_not_only_by_count(s, monkeypatch) -> None:
    import partition_worker.queries as q

    monkeypatch.setattr(q, "PAGE_COST", 3)
    first = read(s, {"what": "apps", "limit": 100})  # app1 costs 1 + 2 allocations + 2 asks
    assert [a["applicationID"] for a in first["items"]] == ["app1"] and first["next"] == 1
    second = read(s, {"what": "apps", "offset": first["next"]})
    assert [a["applicationID"] for a in second["items"]] == ["app2"] and second["next"] == 2 == second["total"]


def test_the_dump_carries_apps_and_nodes_as_json_with_the_same_allocations(s) -> None:
    import json

    d = read(s, {"what": "dump"})
    apps = [json.loads(text) for text in d["applicationsJson"]]  # UTF-8 bytes
    nodes = [json.loads(text) for text in d["nodesJson"]]
    by_app = sorted((al["uuid"], json.dumps(al, sort_keys=True)) for a in apps for al in a["allocations"])
    by_node = sorted((al["uuid"], json.dumps(al, sort_keys=True)) for n in nodes for al in n["allocations"])
    assert by_app == by_node and by_app  # every allocation once per side, the same view


def test_a_bug_in_an_answer_becomes_a_value_error_not_a_crash(s, monkeypatch) -> None:
    import partition_worker.queries as q

    def broken(session, body):
        raise AttributeError("no such field")

    monkeypatch.setitem(q.ANSWERS, q.NodesQuery, broken)
    with pytest.raises(ValueError, match="internal error: AttributeError: no such field"):
        read(s, {"what": "nodes"})


def test_the_dump_encoder_writes_what_json_dumps_writes_even_for_a_non_string_key() -> None:
    import json

    from partition_worker.queries import _encode

    plain = {"nodeID": "n\u00e9", "attributes": {"si/hostname": "h"}, "capacity": {"memory": 10}}
    odd = {"tags": {1: "one"}, "ok": True}  # no view has such a key; encoded as json.dumps would
    for value in (plain, odd):
        assert _encode(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def test_the_dump_views_are_freed_at_the_next_step_not_before_the_answer_leaves(s) -> None:
    import weakref

    from partition_worker import step_stats

    class View(dict):  # a dict that can be watched
        pass

    data = read(s, {"what": "dump"})
    assert data["applicationsJson"] and step_stats._DEFERRED  # held past the answer
    step_stats._DEFERRED.append(watched := View())
    ref = weakref.ref(watched)
    del watched
    observe_step(s, s.step(START + 10**9), 0.001)
    assert not step_stats._DEFERRED and ref() is None
