"""The broker's routing table: assignment, routing, liveness, broker restart."""

from __future__ import annotations

import itertools

from broker.table import RoutingTable
from common.envelope import Envelope, Kind


def make_table():
    counter = itertools.count(1)
    return RoutingTable(lambda rm, p, floor: max(next(counter), floor + 1), expiry=3.0)


def kinds(sends):
    return [(dest, env.kind, env.rm_id, env.partition, env.epoch) for dest, env in sends]


def test_registered_partition_goes_to_an_idle_worker_with_a_new_epoch():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    sends = t.rm_register(b"p1", "rm", ["default"], now=0)
    assert kinds(sends) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "default", 1)]
    owned = t.partition_loaded(b"w1", Envelope(Kind.PARTITION_LOADED, "rm", "default", 1, 0, {"error": None}))
    assert kinds(owned) == [(b"p1", Kind.PARTITION_OWNED, "rm", "default", 1)]


def test_partition_waits_for_a_worker_and_is_assigned_when_one_arrives():
    t = make_table()
    assert t.rm_register(b"p1", "rm", ["a", "b"], now=0) == []
    assert t.unowned() == [("rm", "a"), ("rm", "b")]
    assert kinds(t.worker_ready(b"w1", {"name": "w1"}, now=0)) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "a", 1)]
    assert t.unowned() == [("rm", "b")]


def test_one_partition_per_worker_and_pinned_workers_first():
    t = make_table()
    t.worker_ready(b"free", {"name": "a-free"}, now=0)
    t.worker_ready(b"pinned", {"name": "z-pinned", "pin": "rm/b"}, now=0)
    sends = t.rm_register(b"p", "rm", ["a", "b"], now=0)
    assert {(d, e.partition) for d, e in sends} == {(b"free", "a"), (b"pinned", "b")}


def test_reregistration_reloads_in_place_with_a_new_epoch():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    sends = t.rm_register(b"p1", "rm", ["default"], now=1)
    assert kinds(sends) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "default", 2)]


def test_stale_loaded_answer_is_ignored():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    assert t.partition_loaded(b"w1", Envelope(Kind.PARTITION_LOADED, "rm", "default", 1, 0, {})) == []


def test_route_to_owner_and_unroutable_with_reason_and_body():
    t = make_table()
    env = Envelope(Kind.SI_NODE, "rm", "default", 1, 1, b"payload")
    [(dest, reply)] = t.route(b"p1", env)
    assert dest == b"p1" and reply.kind is Kind.UNROUTABLE
    assert "has no worker" in reply.body["reason"] and reply.body["body"] == b"payload"
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    assert t.route(b"p1", env) == [(b"w1", env)]


def test_outcomes_reach_the_proxy_holding_the_rm_and_stale_workers_are_ignored():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.worker_ready(b"w2", {"name": "w2"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    out = Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm", "default", 1, 0, b"r")
    owner = t.owners[("rm", "default")].worker
    other = b"w2" if owner == b"w1" else b"w1"
    assert t.to_proxy(owner, out) == [(b"p1", out)]
    assert t.to_proxy(other, out) == []


def test_dead_worker_is_purged_and_its_partition_waits_for_the_rm_to_re_register():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    t.worker_ready(b"w2", {"name": "w2"}, now=2)
    t.alive(b"p1", now=2)
    sends = t.purge(now=3.5)  # w1 last seen at 0, expiry 3
    # the holder hears which epoch was lost; nothing is reassigned behind the RM's back
    assert kinds(sends) == [(b"p1", Kind.PARTITION_LOST, "rm", "default", 1)]
    assert b"w1" not in t.workers and t.unowned() == [("rm", "default")]
    [part] = t.status()["partitions"]
    assert part["epoch"] is None and part["lastEpoch"] == 1
    assert part["state"].startswith("waiting for RM rm to re-register (epoch 1 lost: its worker w1 is gone")
    # the RM's re-registration gives it one new epoch, on the standby
    assert kinds(t.rm_register(b"p1", "rm", ["default"], now=4)) == [(b"w2", Kind.PARTITION_ASSIGN, "rm", "default", 2)]


def test_a_lost_partition_is_not_taken_by_a_worker_that_arrives_later():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    t.worker_gone(b"w1", "its connection closed")
    assert t.worker_ready(b"w2", {"name": "w2"}, now=1) == []  # waits for the RM, not for a worker
    assert t.rm_partitions("rm", ["default", "gpu"]) == [(b"w2", Envelope(Kind.PARTITION_ASSIGN, "rm", "gpu", 2))]


def test_broker_restart_is_rebuilt_from_reannouncements():
    t = make_table()  # a fresh broker: it knows nothing
    t.proxy_hello(b"p1", {"rms": {"rm": ["default", "gpu"]}}, now=0)
    assert t.unowned() == [("rm", "default"), ("rm", "gpu")]
    # the worker that owned "default" re-announces with its partition and epoch
    assert t.worker_ready(b"w1", {"name": "w1", "owns": {"rm_id": "rm", "partition": "default", "epoch": 7}},
                          now=0) == []
    assert t.owners[("rm", "default")].epoch == 7 and t.owners[("rm", "default")].loaded
    # "gpu" lost its worker while the broker was down: a spare does not take it (its state is
    # gone); the RM's re-registration, which the rmproxy asks for after a broker restart, does
    assert t.worker_ready(b"w2", {"name": "w2"}, now=0) == []
    sends = t.rm_register(b"p1", "rm", ["default", "gpu"], now=1)
    assert sorted(kinds(sends)) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "default", 8),
                                    (b"w2", Kind.PARTITION_ASSIGN, "rm", "gpu", 2)]  # the test counter


def test_registration_shows_the_rm_running_at_once_and_every_change_asks_for_a_status_push():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.proxy_hello(b"p1", {"name": "p1"}, now=0)
    t.status_push()
    assert not t.changed
    t.rm_register(b"p1", "rm", ["default"], now=0)
    assert t.changed
    [proxy] = t.status()["rmproxies"]
    assert proxy["rms"] == {"rm": {"state": "Running", "partitions": ["default"]}}
    pushed = t.status_push()
    assert [(d, e.kind) for d, e in pushed] == [(b"p1", Kind.STATUS)] and not t.changed
    t.partition_loaded(b"w1", Envelope(Kind.PARTITION_LOADED, "rm", "default", 1, 0, {"error": None}))
    assert t.changed
    t.status_push()
    t.rm_unregister("rm")
    assert t.changed and t.status()["rmproxies"][0]["rms"] == {}


def test_unregister_releases_partitions():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    assert kinds(t.rm_unregister("rm")) == [(b"w1", Kind.PARTITION_RELEASE, "rm", "default", 1)]
    assert t.workers[b"w1"].owns is None


def test_epochs_never_repeat_even_if_the_counter_restarts():
    t = RoutingTable(lambda rm, p, floor: max(1, floor + 1), expiry=3.0)  # a counter that lost its state
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    assert t.owners[("rm", "default")].epoch == 2


def test_worker_reannouncing_a_partition_given_away_is_told_to_release_it():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)
    t.worker_ready(b"w2", {"name": "w2"}, now=0)
    t.worker_gone(b"w1", "connection closed")
    t.rm_register(b"p1", "rm", ["default"], now=0)  # the RM re-registered: w2 takes over with epoch 2
    sends = t.worker_ready(b"w1", {"name": "w1", "owns": {"rm_id": "rm", "partition": "default", "epoch": 1}},
                           now=1)
    assert kinds(sends) == [(b"w1", Kind.PARTITION_RELEASE, "rm", "default", 1)]
    assert t.owners[("rm", "default")].worker == b"w2"


def test_rm_reregistered_before_its_worker_reannounces_gets_a_fresh_assignment():
    t = make_table()  # a restarted broker
    t.proxy_hello(b"p1", {"rms": {"rm": ["default"]}}, now=0)
    t.rm_register(b"p1", "rm", ["default"], now=0)  # the RM re-registered at once
    sends = t.worker_ready(b"w1", {"name": "w1", "owns": {"rm_id": "rm", "partition": "default", "epoch": 4}},
                           now=0)
    assert kinds(sends) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "default", 5)]
    assert not t.owners[("rm", "default")].loaded


def test_every_envelope_the_table_makes_encodes():
    from common.envelope import decode, encode

    t = make_table()
    sends = t.worker_ready(b"w1", {"name": "w1"}, now=0)
    sends += t.rm_register(b"p1", "rm", ["default", "other"], now=0)
    sends += t.partition_loaded(b"w1", Envelope(Kind.PARTITION_LOADED, "rm", "default", 1, 0, {"error": None}))
    sends += t.route(b"p1", Envelope(Kind.SI_NODE, "rm", "other", 1, 1, b"x"))
    sends += t.worker_gone(b"w1", "test") + t.heartbeats() + t.rm_unregister("rm")
    assert {e.kind for _, e in sends} >= {Kind.PARTITION_ASSIGN, Kind.PARTITION_OWNED, Kind.PARTITION_LOST,
                                          Kind.UNROUTABLE, Kind.STATUS}
    for _, env in sends:
        assert decode(encode(env)) == env


def test_answers_go_to_the_rmproxy_that_asked_not_the_one_holding_the_rm():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"holder", "rm", ["default"], now=0)
    t.proxy_hello(b"asker", {"name": "asker"}, now=0)
    query = Envelope(Kind.QUERY, "rm", "default", 1, 0, {"id": 77, "what": "nodes"})
    assert t.route(b"asker", query) == [(b"w1", query)]
    assert t.rm_proxy["rm"] == b"holder"  # a query does not move the RM's responses
    answer = Envelope(Kind.QUERY_RESULT, "rm", "default", 1, 0, {"id": 77, "data": []})
    assert t.to_proxy(b"w1", answer) == [(b"asker", answer)]
    response = Envelope(Kind.SI_NODE_RESPONSE, "rm", "default", 1, 0, b"r")
    assert t.to_proxy(b"w1", response) == [(b"holder", response)]


def test_undecoded_envelopes_route_by_header_and_request_id_and_go_out_unchanged():
    from common.envelope import decode_header, encode

    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"holder", "rm", ["default"], now=0)
    t.proxy_hello(b"asker", {"name": "asker"}, now=0)
    query = decode_header(encode(Envelope(Kind.QUERY, "rm", "default", 1, 0, {"what": "dump", "id": 77})))
    assert t.route(b"asker", query) == [(b"w1", query)]
    answer = decode_header(encode(Envelope(Kind.QUERY_RESULT, "rm", "default", 1, 0,
                                           {"id": 77, "packed": b"x" * 100_000})))
    [(dest, out)] = t.to_proxy(b"w1", answer)
    assert dest == b"asker" and out is answer
    response = decode_header(encode(Envelope(Kind.SI_NODE_RESPONSE, "rm", "default", 1, 0, b"r")))
    assert t.to_proxy(b"w1", response) == [(b"holder", response)]


def test_an_undecoded_request_without_a_worker_is_answered_unroutable_with_its_body():
    from common.envelope import decode_header, encode

    t = make_table()
    t.proxy_hello(b"p1", {"name": "p1"}, now=0)
    raw = decode_header(encode(Envelope(Kind.SI_NODE, "rm", "default", 1, 4, b"payload")))
    [(dest, reply)] = t.route(b"p1", raw)
    assert dest == b"p1" and reply.kind is Kind.UNROUTABLE and reply.seq == 4
    assert reply.body["body"] == b"payload" and reply.body["kind"] == "si.node"
