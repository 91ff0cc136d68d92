"""The worker-side answers added for YuniKorn 1.9's paths (``partition_worker.queries``) on a real
PartitionSession: applications by state, events by id, node utilisation, placement rules."""

from __future__ import annotations

import pytest

from common import si_pb2
from common.messages import Query
from partition_worker.queries import answer
from partition_worker.session import EVENT_RING_SIZE
from tests.core.test_session import START, add_app, add_node, session
from tests.si_builders import ask, release_key

SECOND = 1_000_000_000


def read(session, body: dict):
    """The answer to ``body`` as it crosses the wire: decoded into its query class first."""
    return answer(session, Query.decode(body))


def ids(page: dict) -> list[str]:
    return sorted(a["applicationID"] for a in page["items"])


@pytest.fixture
def s():
    """app1 Running (two allocations) in root.a, app2 Completed in root.b, app3 Accepted (no asks),
    ghost rejected (no such queue)."""
    sess = session()
    add_app(sess, "app1")
    add_app(sess, "app2", queue="root.b")
    add_app(sess, "app3", queue="root.b")
    add_app(sess, "ghost", queue="root.nope")
    add_node(sess, "n1")
    sess.apply_allocation_request(si_pb2.AllocationRequest(asks=[ask("k1", "app1", repeat=2), ask("k2", "app2")]),
                                  START)
    new = {a.allocationKey: a.UUID for a in sess.step(START).allocation.new}
    releases = si_pb2.AllocationReleasesRequest(allocationsToRelease=[release_key("", "app2", uuid=new["k2"])])
    sess.apply_allocation_request(si_pb2.AllocationRequest(releases=releases), START)
    sess.step(START)
    sess.step(START + 60 * SECOND)  # Completing -> Completed after 30 s
    return sess


def test_applications_by_state(s) -> None:
    assert ids(read(s, {"what": "apps", "category": "active"})) == ["app1", "app3"]
    assert ids(read(s, {"what": "apps", "category": "completed"})) == ["app2"]
    assert ids(read(s, {"what": "apps", "category": "rejected"})) == ["ghost"]
    running = read(s, {"what": "apps", "category": "active", "states": ["running"]})
    assert ids(running) == ["app1"]
    assert ids(read(s, {"what": "apps", "queue": "root.b", "category": "active"})) == ["app3"]


def test_an_unknown_category_is_refused(s) -> None:
    with pytest.raises(ValueError, match="category must be active, completed or rejected, got 'old'"):
        read(s, {"what": "apps", "category": "old"})


def test_events_are_read_by_id_from_a_start_or_before_a_point(s) -> None:
    every = read(s, {"what": "events"})
    total = every["total"]
    assert every["lowest"] == 0 and every["next"] == total and len(every["items"]) == total > 5
    assert [e["id"] for e in every["items"]] == list(range(total))
    assert [e["id"] for e in read(s, {"what": "events", "start": 3, "limit": 2})["items"]] == [3, 4]
    last = read(s, {"what": "events", "last": 2, "before": 4})
    assert [e["id"] for e in last["items"]] == [2, 3] and last["next"] == 4
    assert read(s, {"what": "events", "last": 0})["next"] == total  # where the ring ends now
    assert read(s, {"what": "events", "start": total})["items"] == []
    assert every["ring"] == read(s, {"what": "events", "last": 0})["ring"]


def test_events_carry_todays_record_fields(s) -> None:
    events = read(s, {"what": "events"})["items"]
    node = next(e for e in events if e["objectID"] == "n1")
    assert (node["type"], node["eventChangeType"], node["reason"]) == (3, 2, "NodeAdded")  # NODE, ADD
    running = next(e for e in events if e["objectID"] == "app1" and e.get("eventChangeDetail") == 206)
    assert running["type"] == 2 and running["eventChangeType"] == 1  # APP, SET, APP_RUNNING
    added, rejected = (e for e in events if e["objectID"] == "ghost")  # recorded before placement, as YuniKorn
    assert (added["eventChangeType"], added["eventChangeDetail"]) == (2, 203)  # ADD, APP_NEW
    assert rejected["eventChangeDetail"] == 202 and rejected["resource"] == {}  # APP_REJECT
    assert all("groupID" not in e and e["partition"] == "default" for e in events)


def test_a_full_ring_keeps_counting_ids(s) -> None:
    before = s.events_total
    for i in range(EVENT_RING_SIZE):
        add_node(s, f"m{i}")
    s.step(START)
    page = read(s, {"what": "events", "start": 0, "limit": 3})
    assert page["lowest"] == s.events_total - EVENT_RING_SIZE > before - 1
    assert [e["id"] for e in page["items"]] == [page["lowest"], page["lowest"] + 1, page["lowest"] + 2]


def test_node_utilisation_and_placement_rules_answers(s) -> None:
    (memory, vcore) = read(s, {"what": "node_util"})
    assert memory["type"] == "memory" and memory["utilization"][0]["nodeNames"] == ["n1"]  # 20 of 1000
    assert read(s, {"what": "placement_rules"}) == [{"name": "provided", "parameters": {"create": "false"}}]


def test_the_dump_carries_the_rules_and_the_newest_events(s) -> None:
    dump = read(s, {"what": "dump"})
    assert dump["placementRules"] == read(s, {"what": "placement_rules"})
    assert dump["events"] == read(s, {"what": "events"})["items"]
