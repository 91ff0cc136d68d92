"""Reservations keep big asks from being starved by small ones."""

from partition_worker.core import CoreSettings, ReleaseAlloc, ReleaseAsk, RemoveNode
from tests.core.harness import SECOND, Harness, partition_config


def starving_setup(**settings) -> Harness:
    """n1 (memory 100) holds filler (60); big (80) and 100 small asks (10 each) wait; ``settings``
    override the core settings (reservation delay 2 s)."""
    h = Harness(partition_config(), settings=CoreSettings(**{"reservation_delay_ns": 2 * SECOND, **settings}))
    h.node("n1", memory=100, vcore=100).app("app1")
    h.ask("filler", "app1", memory=60, vcore=1)
    h.step()
    h.ask("big", "app1", memory=80, vcore=1, priority=10)
    h.ask("small", "app1", memory=10, vcore=1, repeat=100)
    return h


def test_a_big_ask_reserves_a_node_after_the_delay_and_gets_it_when_freed() -> None:
    h = starving_setup()
    h.step()
    assert h.p.reservations == {}  # younger than the reservation delay: no reservation yet
    h.do(ReleaseAsk("app1", "small"))
    h.ask("small", "app1", memory=10, vcore=1, repeat=100)
    h.step(2 * SECOND)
    assert list(h.p.reservations) == [("app1", "big")]
    assert h.p.nodes.get("n1").reservation.ask_key == "big"
    assert h.log.sched_states[-1].state.value in ("RESERVED", "FAILED")
    small_before = len(h.allocs_of("small"))
    h.do(ReleaseAlloc("app1", h.allocs_of("filler")[0].uuid))
    h.step()
    # 60 free is not enough for big (80), and the reserved node is closed to the small asks
    assert h.allocs_of("big") == [] and len(h.allocs_of("small")) == small_before
    for alloc in h.allocs_of("small")[:2]:
        h.do(ReleaseAlloc("app1", alloc.uuid))
    h.step()
    assert len(h.allocs_of("big")) == 1
    assert len(h.allocs_of("small")) == small_before
    assert ("app1", "big") not in h.p.reservations


def test_without_reservation_small_asks_would_take_the_freed_space() -> None:
    h = starving_setup(max_reservations=0)
    h.step(10 * SECOND)
    h.do(ReleaseAlloc("app1", h.allocs_of("filler")[0].uuid))
    h.step()
    assert h.allocs_of("big") == []


def test_reservation_is_released_when_the_ask_is_removed() -> None:
    h = starving_setup()
    h.step(3 * SECOND)
    assert h.p.reservations
    h.do(ReleaseAsk("app1", "big"))
    assert h.p.reservations == {} and h.p.nodes.get("n1").reservation is None


def test_reservation_is_released_when_the_node_goes_away() -> None:
    h = starving_setup()
    h.step(3 * SECOND)
    h.do(RemoveNode("n1"))
    assert h.p.reservations == {}
    assert h.p.apps["app1"].asks["big"].reserved_node == ""


def test_an_ask_larger_than_every_node_reserves_nothing() -> None:
    h = Harness(partition_config())
    h.node("n1", memory=10).app("app1").ask("huge", "app1", memory=1000)
    h.step(5 * SECOND)
    assert h.p.reservations == {}


def test_reservations_are_bounded() -> None:
    h = Harness(partition_config(), settings=CoreSettings(max_reservations=2, reservation_delay_ns=0))
    h.nodes(5, memory=10, vcore=10).app("app1")
    for i in range(5):
        h.ask(f"f{i}", "app1", memory=6, vcore=1)
    h.step()
    for i in range(5):
        h.ask(f"b{i}", "app1", memory=8, vcore=1)
    h.step()
    assert len(h.p.reservations) == 2


def test_a_reserved_ask_may_use_another_node_that_frees_first() -> None:
    h = Harness(partition_config(), settings=CoreSettings(reservation_delay_ns=0))
    h.node("n1", memory=10, vcore=10).node("n2", memory=10, vcore=10).app("app1")
    h.ask("f1", "app1", memory=6, vcore=1).ask("f2", "app1", memory=6, vcore=1)
    h.step()
    h.ask("big", "app1", memory=8, vcore=1)
    h.step()
    (res,) = h.p.reservations.values()
    other = "n2" if res.node_id == "n1" else "n1"
    filler_other = [a for a in h.log.allocations if a.alloc.node_id == other][0].alloc
    h.do(ReleaseAlloc("app1", filler_other.uuid))
    h.step()
    assert h.allocs_of("big")[0].node_id == other
    assert h.p.reservations == {} and h.p.nodes.get(res.node_id).reservation is None


def big_reserving_n1() -> Harness:
    """n1 (memory 10) holds fill (6); big (8) reserves it at once (no reservation delay)."""
    h = Harness(partition_config(), settings=CoreSettings(reservation_delay_ns=0))
    h.node("n1", memory=10, vcore=10).app("app1")
    h.ask("fill", "app1", memory=6, vcore=1)
    h.step()
    h.ask("big", "app1", memory=8, vcore=1)
    h.step()
    return h


def test_a_required_node_ask_cancels_an_ordinary_reservation_on_its_node() -> None:
    h = big_reserving_n1()
    assert h.p.nodes.get("n1").reservation is not None
    h.ask("ds", "app1", memory=2, vcore=1, tags={"yunikorn.apache.org/requiredNode": "n1"})
    h.step()
    assert h.allocs_of("ds")[0].node_id == "n1"
    assert ("app1", "big") not in h.p.reservations


def test_a_required_node_ask_that_cannot_fit_leaves_the_reservation_alone() -> None:
    h = big_reserving_n1()
    h.ask("ds", "app1", memory=5, vcore=1, tags={"yunikorn.apache.org/requiredNode": "n1"})
    h.step()
    assert ("app1", "big") in h.p.reservations and h.allocs_of("ds") == []
    assert not h.p.changed  # no reserve/unreserve ping-pong between cycles
