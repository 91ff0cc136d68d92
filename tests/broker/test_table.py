"""The broker's routing table: assignment, routing, liveness, broker restart."""

from __future__ import annotations

import itertools

from broker.table import EpochUnavailable, RoutingTable
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


class Epochs:
    """An epoch counter whose Redis can be made unreachable (``down``)."""

    def __init__(self) -> None:
        self.counter = itertools.count(1)
        self.down = False

    def __call__(self, rm, p, floor):
        if self.down:
            raise EpochUnavailable("Redis unreachable: Timeout reading from socket")
        return max(next(self.counter), floor + 1)


def test_a_registration_the_broker_has_no_epochs_for_is_answered_at_once_and_moves_nothing():
    """Found by the network-fault soak: with the broker cut from Redis, rm.register raised out of
    the table, nothing answered it, and the RM's registration waited 10 s to be told "no worker
    took partition(s)... start more workers"."""
    epochs = Epochs()
    t = RoutingTable(epochs, expiry=3.0)
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.worker_ready(b"w2", {"name": "w2"}, now=0)
    t.rm_register(b"p1", "rm", ["a"], now=0)
    epochs.down = True
    sends = t.rm_register(b"p1", "rm", ["a", "b"], now=1)
    assert kinds(sends) == [(b"p1", Kind.UNROUTABLE, "rm", "", 0)]
    body = sends[0][1].body
    assert body["kind"] == "rm.register"
    assert body["reason"].startswith("the broker could not take a new epoch from Redis for [rm]a (Redis unreachable")
    assert "[rm]b (" in body["reason"]
    assert t.owners[("rm", "a")].epoch == 1 and t.unowned() == [("rm", "b")]
    epochs.down = False  # Redis back: the RM's next registration goes through
    assert sorted(kinds(t.rm_register(b"p1", "rm", ["a", "b"], now=2))) == [
        (b"w1", Kind.PARTITION_ASSIGN, "rm", "a", 2), (b"w2", Kind.PARTITION_ASSIGN, "rm", "b", 3)]


def test_a_worker_lost_while_redis_is_unreachable_is_still_reported_and_a_waiting_partition_waits():
    """Found by the network-fault soak: a worker's death while an awaiting partition could not get
    an epoch raised out of the table, and the PARTITION_LOST for the dead worker's partition was
    never sent: its RM was not asked to re-register."""
    epochs = Epochs()
    t = RoutingTable(epochs, expiry=3.0)
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["a"], now=0)
    t.rm_register(b"p2", "other", ["x"], now=0)  # no idle worker: x awaits one
    epochs.down = True
    assert t.worker_ready(b"w2", {"name": "w2"}, now=1) == []  # x cannot get an epoch: it waits
    sends = t.worker_gone(b"w1", "its connection closed")
    assert kinds(sends) == [(b"p1", Kind.PARTITION_LOST, "rm", "a", 1)]
    assert ("other", "x") in t.awaiting
    epochs.down = False
    assert kinds(t.worker_ready(b"w3", {"name": "w3"}, now=2)) == [(b"w2", Kind.PARTITION_ASSIGN, "other", "x", 2)]


def test_a_worker_reannouncing_a_partition_that_awaits_an_epoch_is_told_to_release_it():
    epochs = Epochs()
    t = RoutingTable(epochs, expiry=3.0)
    t.rm_register(b"p1", "rm", ["a"], now=0)  # registered while no worker is known (broker restart)
    epochs.down = True
    sends = t.worker_ready(b"w1", {"name": "w1", "owns": {"rm_id": "rm", "partition": "a", "epoch": 4}}, now=0)
    assert kinds(sends) == [(b"w1", Kind.PARTITION_RELEASE, "rm", "a", 4)]
    assert t.workers[b"w1"].owns is None and ("rm", "a") in t.awaiting


def test_a_partition_its_worker_cannot_load_goes_to_another_idle_worker():
    """Found by the network-fault soak: a spare cut from Redis failed to load the partition it was
    given, the registration failed, and every retry gave the partition to that same worker again
    while another spare that reached Redis stayed idle."""
    t = make_table()
    for name in ("w1", "w2", "w3"):
        t.worker_ready(name.encode(), {"name": name}, now=0)
    assert kinds(t.rm_register(b"p1", "rm", ["a"], now=0)) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "a", 1)]
    failed = {"error": "worker w1 cannot load partition [rm]a: Timeout connecting to server"}
    sends = t.partition_loaded(b"w1", Envelope(Kind.PARTITION_LOADED, "rm", "a", 1, 0, failed))
    assert kinds(sends) == [(b"w2", Kind.PARTITION_ASSIGN, "rm", "a", 2)]
    assert t.workers[b"w1"].owns is None
    owned = t.partition_loaded(b"w2", Envelope(Kind.PARTITION_LOADED, "rm", "a", 2, 0, {"error": None}))
    assert kinds(owned) == [(b"p1", Kind.PARTITION_OWNED, "rm", "a", 2)]


def test_a_partition_no_idle_worker_can_load_is_reported_failed_with_the_last_workers_words():
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.worker_ready(b"w2", {"name": "w2"}, now=0)
    t.rm_register(b"p1", "rm", ["a"], now=0)
    t.partition_loaded(b"w1", Envelope(Kind.PARTITION_LOADED, "rm", "a", 1, 0, {"error": "w1 cannot"}))
    sends = t.partition_loaded(b"w2", Envelope(Kind.PARTITION_LOADED, "rm", "a", 2, 0, {"error": "w2 cannot"}))
    assert kinds(sends) == [(b"p1", Kind.PARTITION_OWNED, "rm", "a", 2)]
    assert sends[0][1].body["error"] == "w2 cannot"
    # the RM's next registration may try every idle worker again (one may reach Redis by now)
    assert kinds(t.rm_register(b"p1", "rm", ["a"], now=1)) == [(b"w2", Kind.PARTITION_ASSIGN, "rm", "a", 3)]
    sends = t.partition_loaded(b"w2", Envelope(Kind.PARTITION_LOADED, "rm", "a", 3, 0, {"error": "w2 cannot"}))
    assert kinds(sends) == [(b"w1", Kind.PARTITION_ASSIGN, "rm", "a", 4)]


def test_a_zombie_coming_back_before_its_rm_re_registered_is_adopted_in_its_old_epoch_then_reloaded():
    """What the broker forwards of a zombie it adopted carries the lost epoch (rmproxy drops it:
    tests/rmproxy/test_zombie_outcomes.py); the RM's re-registration gives it a new one. A zombie
    whose partition has another owner is told to release it, and what it sends is counted stale."""
    t = make_table()
    t.worker_ready(b"w1", {"name": "w1"}, now=0)
    t.rm_register(b"p1", "rm", ["a"], now=0)
    t.worker_gone(b"w1", "worker missed its heartbeats")
    zombie = {"name": "w1", "owns": {"rm_id": "rm", "partition": "a", "epoch": 1}}
    assert t.worker_ready(b"w1-again", zombie, now=1) == []
    out = Envelope(Kind.SI_ALLOCATION_RESPONSE, "rm", "a", 1, 0, b"r")
    assert t.to_proxy(b"w1-again", out) == [(b"p1", out)]  # epoch 1: rmproxy drops it
    assert kinds(t.rm_register(b"p1", "rm", ["a"], now=2)) == [(b"w1-again", Kind.PARTITION_ASSIGN, "rm", "a", 2)]
    t.worker_ready(b"w2", {"name": "w2"}, now=2)
    t.worker_gone(b"w1-again", "its connection closed")
    t.rm_register(b"p1", "rm", ["a"], now=3)  # now on w2, epoch 3
    zombie["owns"]["epoch"] = 2
    assert kinds(t.worker_ready(b"w1-third", zombie, now=4)) == [(b"w1-third", Kind.PARTITION_RELEASE, "rm", "a", 2)]
    assert t.to_proxy(b"w1-third", out) == [] and t.status()["staleOutcomes"] == {"si.allocation.response": 1}
