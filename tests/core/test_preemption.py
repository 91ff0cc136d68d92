"""Preemption on the core with the fake clock: queue guarantees (v1.3) and required node (v1.2)."""

from __future__ import annotations

from dataclasses import replace

from common.config.model import PreemptionConfig
from common.constants import TAG_REQUIRED_NODE
from partition_worker.core.commands import ReleaseAlloc, ReleaseAsk
from partition_worker.core.outcomes import Termination
from tests.core.harness import SECOND, Harness, partition_config, q

DELAY = 30 * SECOND


def _h(low_g: int = 20, high_g: int = 60, enabled: bool = True, extra=(), high_props=None) -> Harness:
    root = q("root", q("high", guaranteed={"memory": high_g}, props=high_props),
             q("low", guaranteed={"memory": low_g}), *extra, submitacl="*")
    cfg = replace(partition_config(root), preemption=PreemptionConfig(enabled=enabled))
    h = Harness(config=cfg)
    h.node("n1", memory=100, vcore=100)
    return h


def _fill_low(h: Harness, n: int = 10, size: int = 10, queue: str = "root.low", app: str = "lo",
              **kw) -> list:
    h.app(app, queue, "bob")
    for i in range(n):
        h.ask(f"{app}-{i}", app, memory=size, **kw)
        h.step(1)  # one by one: distinct creation times (younger = later)
    return [h.allocs_of(f"{app}-{i}")[0] for i in range(n)]


def _preempted(h: Harness) -> list:
    return [r for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]


def test_reclaims_guarantee_youngest_victims_then_places_preemptor():
    h = _h()
    lows = _fill_low(h)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10, repeat=3)
    h.step(1)
    assert not _preempted(h)  # the preemption delay has not passed
    h.step(DELAY)
    rel = _preempted(h)
    assert [r.uuid for r in rel] == [lows[9].uuid]  # youngest first, one per repeat
    assert h.p.nodes.get("n1").reservation.ask_key == "h1"  # room reserved for the preemptor
    for _ in range(4):
        h.step(1)
    assert [r.uuid for r in _preempted(h)] == [lows[9].uuid, lows[8].uuid, lows[7].uuid]
    assert len(h.allocs_of("h1")) == 3
    assert h.p.queues.find("root.low").allocated.get("memory") == 70
    assert h.events("Preemption")
    # each victim's request says who took its place (YuniKorn's event; the RM shows it on the pod)
    assert [(e.object_id, e.group_id, e.message) for e in h.events("Preempted")] == [
        (lows[i].key, "lo", "Preempted by h1 from application hi in root.high") for i in (9, 8, 7)]


def test_never_below_victim_guarantee():
    h = _h(low_g=90)
    _fill_low(h)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10, repeat=3)
    h.step(DELAY)
    for _ in range(4):
        h.step(1)
    assert len(_preempted(h)) == 1 and len(h.allocs_of("h1")) == 1
    assert h.p.queues.find("root.low").allocated.get("memory") == 90


def test_lowest_priority_first_and_opt_outs_respected():
    h = _h()
    h.app("lo", "root.low", "bob")
    for i in range(10):
        # the youngest allocations opt out or have a higher priority
        kw = {"allow_preempt_self": False} if i >= 8 else {}
        h.ask(f"lo-{i}", "lo", memory=10, priority=5 if i in (6, 7) else 0, **kw)
        h.step(1)
    lows = [h.allocs_of(f"lo-{i}")[0] for i in range(10)]
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10, priority=5)
    h.step(DELAY)
    assert [r.uuid for r in _preempted(h)] == [lows[5].uuid]  # priority 0, youngest, not opted out


def test_victims_only_from_queues_above_guarantee():
    h = _h(low_g=50, extra=(q("other", guaranteed={"memory": 10}),))
    _fill_low(h, n=5)  # low exactly at its guarantee
    others = _fill_low(h, n=5, queue="root.other", app="ot")  # other above its guarantee
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10)
    h.step(DELAY)
    assert [r.uuid for r in _preempted(h)] == [others[4].uuid]


def test_minimal_set_on_one_node():
    h = _h()
    h.app("lo", "root.low", "bob")
    h.ask("keep", "lo", memory=65, priority=9)  # above the preemptor: never a victim
    h.step(1)
    h.ask("big", "lo", memory=30)
    h.step(1)
    h.ask("small", "lo", memory=5)  # youngest: taken first, then put back as not needed
    h.step(1)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=30, priority=1)
    h.step(DELAY)
    assert [r.allocation_key for r in _preempted(h)] == ["big"]


def test_no_loop_and_disabled_and_higher_priority_safe():
    h = _h()
    _fill_low(h)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10)
    h.step(DELAY)
    h.step(1)
    assert len(_preempted(h)) == 1 and len(h.allocs_of("h1")) == 1
    # the victim comes back and may preempt others: it cannot take from high (within guarantee)
    h.ask("lo-again", "lo", memory=10, allow_preempt_other=True)
    for _ in range(3):
        h.step(DELAY)
    assert len(_preempted(h)) == 1 and not h.allocs_of("lo-again")

    off = _h(enabled=False)
    _fill_low(off)
    off.app("hi", "root.high", "alice")
    off.ask("h1", "hi", memory=10)
    off.step(DELAY)
    off.step(DELAY)
    assert not _preempted(off)

    fenced = _h(high_props={"priority.policy": "fence", "priority.offset": "-10"})
    _fill_low(fenced)
    fenced.app("hi", "root.high", "alice")
    fenced.ask("h1", "hi", memory=10, priority=100)  # fenced to -10: below the victims' 0
    fenced.step(DELAY)
    assert not _preempted(fenced)


def test_required_node_preemption_daemonset():
    h = Harness()
    h.node("n1", memory=100)
    h.app("lo", "root.default", "bob")
    h.ask("orig", "lo", memory=20, originator=True)  # oldest: an originator goes last
    h.step()
    h.ask("reg", "lo", memory=30, repeat=2)
    h.ask("young", "lo", memory=10, priority=1)  # higher priority than the daemon set ask
    h.step(1)
    h.app("ds", "root.default", "kube")
    h.ask("ds-1", "ds", memory=25, tags={TAG_REQUIRED_NODE: "n1"})
    h.step(1)
    assert not h.allocs_of("ds-1")
    h.step(3 * SECOND)  # reserves its node (after the reservation delay)
    assert h.p.nodes.get("n1").reservation.ask_key == "ds-1"
    h.step(SECOND)
    rel = _preempted(h)
    msg = "preempting allocations to free up resources to run daemon set ask: ds-1"
    assert [(r.allocation_key, r.message) for r in rel] == [("reg", msg)]
    assert [(e.object_id, e.message) for e in h.events("Preempted")] == [
        ("reg", "Preempted by ds-1 from application ds in root.default")]
    h.step(1)
    assert h.allocs_of("ds-1") and h.allocs_of("ds-1")[0].node_id == "n1"


def test_an_ask_holding_a_reservation_still_preempts():
    h = _h()
    _fill_low(h)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10, repeat=2)
    h.step(3 * SECOND)  # older than the reservation delay, younger than the preemption delay
    assert h.p.apps["hi"].asks["h1"].reserved_node == "n1" and not _preempted(h)
    h.step(DELAY)
    for _ in range(3):
        h.step(SECOND)
    assert len(_preempted(h)) == 2 and len(h.allocs_of("h1")) == 2


def test_preemption_policy_disabled_and_fence():
    # low's tasks may not be victims: nothing to preempt
    h = Harness(config=replace(partition_config(q(
        "root", q("high", guaranteed={"memory": 60}),
        q("low", guaranteed={"memory": 20}, props={"preemption.policy": "disabled"}),
        submitacl="*")), preemption=PreemptionConfig(enabled=True)))
    h.node("n1", memory=100, vcore=100)
    _fill_low(h)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10)
    h.step(DELAY)
    assert not _preempted(h)
    # a fenced parent: its children preempt each other, never the queue outside
    h = Harness(config=replace(partition_config(q(
        "root", q("team", q("a", guaranteed={"memory": 30}), q("b"), parent=True,
                  props={"preemption.policy": "fence"}),
        q("low", guaranteed={"memory": 10}), submitacl="*")), preemption=PreemptionConfig(enabled=True)))
    h.node("n1", memory=100, vcore=100)
    lows = _fill_low(h, n=8)
    bs = _fill_low(h, n=2, queue="root.team.b", app="bb")
    h.app("aa", "root.team.a", "alice")
    h.ask("a1", "aa", memory=10, repeat=3)
    h.step(DELAY)
    for _ in range(3):
        h.step(SECOND)
    assert {r.uuid for r in _preempted(h)} == {b.uuid for b in bs}
    assert lows and len(h.allocs_of("a1")) == 2


def test_preemptors_waiting_for_reserved_nodes_retry_next_cycle_not_after_a_delay():
    """30 preemptors, 4 nodes: a node holds one preemptor's reservation at a time. The others
    must not be penalised a whole preemption.delay for finding every node reserved: the
    guarantee is reclaimed in consecutive cycles, and not one victim beyond it."""
    root = q("root", q("high", guaranteed={"memory": 300}, props={"priority.offset": "100"}),
             q("low", guaranteed={"memory": 100}), submitacl="*")
    h = Harness(config=replace(partition_config(root), preemption=PreemptionConfig(enabled=True)))
    h.nodes(4, memory=250, vcore=25).app("lo", "root.low", "bob")
    h.ask("lo", "lo", memory=10, vcore=1, repeat=100)
    h.step(1)
    h.app("hi", "root.high", "alice")
    for i in range(30):  # one ask per pod, as the k8s shim sends them
        h.ask(f"hi-{i}", "hi", memory=10, vcore=1)
    h.step(DELAY)
    assert len(_preempted(h)) == 4  # one per node
    for cycle in range(1, 8):
        h.step(1)  # 1 ns later: far less than the delay
        assert len(_preempted(h)) == min(30, 4 + 4 * cycle)
    h.step(1)
    assert sum(len(h.allocs_of(f"hi-{i}")) for i in range(30)) == 30 and len(_preempted(h)) == 30
    assert h.p.queues.find("root.low").allocated.get("memory") == 700


def test_a_reserved_ask_waits_for_the_preemption_delay_too():
    """An ask that reserved a node (after the 2 s reservation delay) is tried first each cycle
    by the reserved pass; it must not preempt before its preemption.delay either."""
    h = _h()
    _fill_low(h)
    h.app("hi", "root.high", "alice")
    h.ask("h1", "hi", memory=10)
    h.step(3 * SECOND)
    assert h.p.nodes.get("n1").reservation is not None  # reserved: the reserved pass owns it now
    for _ in range(5):
        h.step(5 * SECOND)  # 28 s after the ask: still inside the 30 s delay
    assert not _preempted(h)
    h.step(3 * SECOND)
    assert len(_preempted(h)) == 1


# -- preemptions in flight count against the preemptor's guarantee ------------------------------
# The case: 10 nodes of memory 100, root.a guaranteed 600, root.b guaranteed 200 (both
# preemption.delay 1s), b fills the cluster, a asks 8 x 100. YuniKorn preempts 6 (a reaches its
# guarantee, its 7th and 8th asks wait); counting only what a has allocated took 8.

def _guarantee_case(b_priorities=(0,) * 10, root=None) -> Harness:
    root = root or q("root", q("a", guaranteed={"memory": 600}, props={"preemption.delay": "1s"}),
                     q("b", guaranteed={"memory": 200}, props={"preemption.delay": "1s"}), submitacl="*")
    h = Harness(config=replace(partition_config(root), preemption=PreemptionConfig(enabled=True)))
    h.nodes(10, memory=100, vcore=100)
    h.app("bapp", "root.b", "bob")
    for i, prio in enumerate(b_priorities):
        h.ask(f"b{i}", "bapp", memory=100, priority=prio)
    h.step(1)
    assert len(h.log.allocations) == 10
    return h


def _memory(h: Harness, path: str) -> int:
    return h.p.queues.find(path).allocated.get("memory")


def _confirm_late(h: Harness) -> None:
    """The RM confirms every victim's release (as the k8s shim does once the pod is gone)."""
    h.do(*[ReleaseAlloc(r.app_id, r.uuid, Termination.PREEMPTED_BY_SCHEDULER, "", r.allocation_key)
           for r in _preempted(h)])


def _asks_of(h: Harness, app: str, keys, queue: str = "root.a") -> None:
    if app not in h.p.apps:
        h.app(app, queue, "alice")
    for key in keys:
        h.ask(key, app, memory=100)


def test_asks_falling_due_in_one_cycle_take_no_more_than_the_guarantee():
    h = _guarantee_case()
    _asks_of(h, "aapp", [f"a{i}" for i in range(8)])
    h.step(SECOND)  # all eight due in this cycle
    assert len(_preempted(h)) == 6
    waiting = h.p.apps["aapp"].asks
    assert sum(1 for a in waiting.values() if a.reserved_node) == 6  # in flight: nodes freed for them
    refused = [k for k, a in waiting.items() if a.preemption_log]
    assert len(refused) == 2 and all(waiting[k].preemption_log[0] == "Preemption queue guarantees check failed"
                                     for k in refused)
    h.step(1)
    assert (_memory(h, "root.a"), _memory(h, "root.b")) == (600, 400)
    _confirm_late(h)  # the victims' confirmations change nothing
    for _ in range(3):
        h.step(SECOND)  # the 7th and 8th retry once per delay and are refused again
    assert len(_preempted(h)) == 6 and (_memory(h, "root.a"), _memory(h, "root.b")) == (600, 400)
    assert all(waiting[k].pending == 1 and waiting[k].preemption_log[1] >= 2 for k in refused)


def test_asks_falling_due_across_cycles_count_what_was_placed_and_what_is_in_flight():
    h = _guarantee_case()
    _asks_of(h, "aapp", [f"a{i}" for i in range(4)])
    h.step(SECOND // 2)
    _asks_of(h, "aapp", [f"a{i}" for i in range(4, 8)])  # due half a second later
    h.step(SECOND // 2)
    assert len(_preempted(h)) == 4  # the first four, in flight until the next cycle places them
    h.step(SECOND // 2)  # places the four, then the next four fall due
    assert _memory(h, "root.a") == 400 and len(_preempted(h)) == 6
    h.step(1)
    _confirm_late(h)
    h.step(2 * SECOND)
    assert len(_preempted(h)) == 6 and (_memory(h, "root.a"), _memory(h, "root.b")) == (600, 400)


def test_in_flight_preemptions_of_sibling_queues_count_against_their_parents_guarantee():
    root = q("root", q("p", q("a1", props={"preemption.delay": "1s"}), q("a2", props={"preemption.delay": "1s"}),
                       guaranteed={"memory": 600}, parent=True),
             q("b", guaranteed={"memory": 200}), submitacl="*")
    h = _guarantee_case(root=root)
    _asks_of(h, "one", [f"x{i}" for i in range(4)], "root.p.a1")
    _asks_of(h, "two", [f"y{i}" for i in range(4)], "root.p.a2")
    h.step(SECOND)
    h.step(1)
    assert len(_preempted(h)) == 6 and _memory(h, "root.p") == 600 and _memory(h, "root.b") == 400


def test_an_in_flight_ask_the_rm_withdraws_frees_its_share_and_nothing_more_is_taken():
    h = _guarantee_case()
    _asks_of(h, "aapp", [f"a{i}" for i in range(8)])
    h.step(SECOND)
    in_flight = sorted(k for k, a in h.p.apps["aapp"].asks.items() if a.reserved_node)
    h.do(ReleaseAsk("aapp", in_flight[0]), ReleaseAsk("aapp", in_flight[1]))  # before they are placed
    h.step(1)  # the two waiting asks take the room freed for the withdrawn ones: no new victims
    assert len(_preempted(h)) == 6 and _memory(h, "root.a") == 600
    h.step(2 * SECOND)
    assert len(_preempted(h)) == 6 and _memory(h, "root.b") == 400


def test_only_victims_of_a_priority_not_above_the_asks_are_taken():
    h = _guarantee_case(b_priorities=(0, 10) * 5)
    _asks_of(h, "aapp", [f"a{i}" for i in range(8)])
    h.step(SECOND)
    h.step(1)
    preempted = _preempted(h)
    assert len(preempted) == 5 and {h.p.apps["bapp"].asks.get(r.allocation_key) for r in preempted} == {None}
    assert all(int(r.allocation_key[1:]) % 2 == 0 for r in preempted)  # the priority-0 ones
    assert (_memory(h, "root.a"), _memory(h, "root.b")) == (500, 500)
