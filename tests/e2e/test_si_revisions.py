"""RMs of both SI revisions on one gRPC port of a real stack (docs/si-revisions.md), each built
only from the stubs of its own proto: ``SIRM`` of revision ``SEED`` (common/si.proto) or ``V18``
(common/si_v18.proto). Every answer a v1.8 RM gets is read back through the seed's schema too,
to show no seed-only field reaches it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import grpc
import pytest

from common import si_pb2, si_v18_pb2 as si18
from tests.e2e.sirm import SIRM, V18
from tests.e2e.test_policies import PREEMPTION_CONFIG
from tests.si_builders import app, ask, node, v18

_ids = itertools.count()


def done(*rms: SIRM) -> None:
    """Close the RMs and stop them (korral.v1 Shutdown, test clean-up only), so the shared
    stack's workers are free for the next test."""
    for rm in rms:
        try:
            rm.shutdown()
        except grpc.RpcError:
            pass  # stopped already (a test that re-registered under another client)
        rm.close()


def _seed_view(msg) -> si_pb2.AllocationResponse:
    """What a seed client would read from the bytes a v1.8 RM got."""
    return si_pb2.AllocationResponse.FromString(msg.SerializeToString())


@dataclass
class Collector:
    """Every allocation response of a v1.8 RM, until a condition on the totals holds."""

    rm: SIRM
    new: list = field(default_factory=list)
    released: list = field(default_factory=list)
    rejected: list = field(default_factory=list)  # the RejectedAllocations

    def until(self, cond, timeout: float = 30.0) -> "Collector":
        """Read allocation responses until ``cond(self)`` holds (at once if it does already)."""
        if not cond(self):
            self.rm.read_until("allocation", lambda r: self._take(r) or cond(self) or None, timeout,
                               lambda: f"{len(self.new)} new, {len(self.released)} released, {self.rejected}: "
                                       "the allocation responses awaited")
        return self

    def _take(self, r) -> None:
        seed = _seed_view(r)
        assert not seed.rejected and not seed.releasedAsks, "seed-only fields sent to a v1.8 RM"
        assert not any(a.UUID for a in seed.new) and not any(x.UUID for x in seed.released)
        self.new += r.new
        self.released += r.released
        self.rejected += r.rejectedAllocations


def started18(stack, config: str = "", nodes=(("n1", 100),), build_info=None) -> tuple[SIRM, Collector]:
    rm = SIRM(stack.si_address, f"rm18-{next(_ids)}", revision=V18)
    rm.register(config, build_info=build_info)
    rm.open()
    rm.report(nodes=tuple(v18.node(n, memory=m, vcore=m) for n, m in nodes))
    return rm, Collector(rm)


def add_app18(rm: SIRM, a: si18.AddApplicationRequest) -> None:
    rm.report(apps=(a,))


def test_a_v18_rm_schedules_releases_by_key_and_gets_v18_rejections(module_stack):
    rm, col = started18(module_stack)
    try:
        add_app18(rm, v18.app("app1"))
        rm.allocations(v18.ask("a1", "app1", memory=10, vcore=1), v18.ask("a2", "app1", memory=10, vcore=1))
        col.until(lambda c: len(c.new) == 2)
        assert {(a.allocationKey, a.nodeID, a.applicationID) for a in col.new} == {("a1", "n1", "app1"),
                                                                                    ("a2", "n1", "app1")}
        rm.releases(v18.release_key("a1", "app1"))
        col.until(lambda c: c.released)
        assert [(r.allocationKey, r.terminationType) for r in col.released] == [("a1", si18.STOPPED_BY_RM)]
        lost = v18.ask("x", "app1", memory=1, vcore=1)
        lost.partitionName = "nowhere"
        rm.allocations(v18.ask("g", "ghost", memory=1, vcore=1), lost, v18.ask("e", "app1", memory=None, vcore=None))
        col.until(lambda c: len(c.rejected) == 3)
        assert [(r.allocationKey, r.reason) for r in col.rejected] == [
            ("x", "Failed to find partition nowhere, for application app1 and allocation x"),
            ("g", "failed to find application ghost"),
            ("e", "allocation contains no resources")]
    finally:
        done(rm)


def test_a_v18_gang_is_placed_then_replaced_in_place_named_by_keys(module_stack):
    rm, col = started18(module_stack, nodes=(("n1", 100), ("n2", 100)))
    try:
        gang = v18.app("gang")
        gang.placeholderAsk.CopyFrom(v18.resource(memory=40, vcore=4))
        add_app18(rm, gang)
        phs = [v18.ask(f"ph-{i}", "gang", memory=10, vcore=1) for i in range(4)]
        for p in phs:
            p.placeholder, p.taskGroupName = True, "tg"
        rm.allocations(*phs)
        col.until(lambda c: len(c.new) == 4)
        where = {a.allocationKey: a.nodeID for a in col.new}
        reals = [v18.ask(f"real-{i}", "gang", memory=8, vcore=1) for i in range(4)]
        for r in reals:
            r.taskGroupName = "tg"
        rm.allocations(*reals)
        col.until(lambda c: len(c.released) == 4 and len(c.new) == 8)
        real_node = {a.allocationKey: a.nodeID for a in col.new[4:]}
        for rel in col.released:
            assert rel.terminationType == si18.PLACEHOLDER_REPLACED
            real = rel.message.removeprefix("replacing allocationKey: ")
            assert real in real_node and where[rel.allocationKey] == real_node[real]  # same node
        rm.releases(*[v18.release(r, si18.PLACEHOLDER_REPLACED) for r in col.released])
        rm.allocations(v18.ask("probe", "gang", memory=1, vcore=1))
        col.until(lambda c: any(a.allocationKey == "probe" for a in c.new))
        assert len(col.released) == 4  # the confirmations were not echoed
    finally:
        done(rm)


def test_a_v18_rm_is_told_of_preemption_by_key(module_stack):
    rm, col = started18(module_stack, PREEMPTION_CONFIG, nodes=(("n1", 250), ("n2", 250)))
    try:
        add_app18(rm, v18.app("lo", queue="root.low"))
        rm.allocations(*[v18.ask(f"lo-{i}", "lo", memory=10, vcore=1) for i in range(50)])
        col.until(lambda c: len(c.new) == 50)
        add_app18(rm, v18.app("hi", queue="root.high"))
        rm.allocations(*[v18.ask(f"hi-{i}", "hi", memory=10, vcore=1) for i in range(5)])
        col.until(lambda c: sum(a.applicationID == "hi" for a in c.new) == 5, timeout=60)
        victims = [r for r in col.released if r.terminationType == si18.PREEMPTED_BY_SCHEDULER]
        assert len(victims) == 5 and all(v.applicationID == "lo" and v.allocationKey.startswith("lo-")
                                         for v in victims)
    finally:
        done(rm)


def test_create_drain_keeps_a_node_out_until_drain_to_schedulable(module_stack):
    rm, col = started18(module_stack, nodes=())
    try:
        rm.nodes(v18.node("d1", action=si18.NodeInfo.CREATE_DRAIN, memory=100, vcore=100))
        rm.wait_for("node", lambda r: [n.nodeID for n in r.accepted] == ["d1"])
        add_app18(rm, v18.app("app1"))
        rm.allocations(v18.ask("k1", "app1", memory=1, vcore=1))
        with pytest.raises(TimeoutError, match="not within"):
            col.until(lambda c: c.new, timeout=1.0)  # the only node is drained
        rm.nodes(si18.NodeInfo(nodeID="d1", action=si18.NodeInfo.DRAIN_TO_SCHEDULABLE))
        col.until(lambda c: c.new)
        assert (col.new[0].allocationKey, col.new[0].nodeID) == ("k1", "d1")
    finally:
        done(rm)


def test_a_v18_rm_recovers_its_running_allocations_after_re_registering(module_stack):
    rm, col = started18(module_stack)
    try:
        add_app18(rm, v18.app("app1"))
        running = [v18.ask(f"run-{i}", "app1", memory=30, vcore=1) for i in (1, 2)]
        rm.allocations(*running)
        col.until(lambda c: len(c.new) == len(running))
        rm.close()  # not stopped: the next client re-registers the same rmID
        rm = SIRM(module_stack.si_address, rm.rm_id, revision=V18)  # a restarted RM: same rmID, state wiped
        rm.register()
        rm.open()
        rm.report(nodes=(v18.node("n1", memory=100, vcore=100),), apps=(v18.app("app1"),))
        rm.allocations(v18.allocation("run-1", "n1", "app1", memory=30, vcore=1),
                       v18.allocation("run-2", "n1", "app1", memory=30, vcore=1),
                       v18.ask("new-1", "app1", memory=40, vcore=1))
        col = Collector(rm).until(lambda c: len(c.new) == 3)
        assert sorted((a.allocationKey, a.nodeID) for a in col.new) == [
            ("new-1", "n1"), ("run-1", "n1"), ("run-2", "n1")]  # the recovered ones confirmed
        rm.allocations(v18.ask("too-big", "app1", memory=20, vcore=1))  # 120 > 100: it waits
        rm.releases(v18.release_key("run-1", "app1"))
        col.until(lambda c: any(a.allocationKey == "too-big" for a in c.new))
    finally:
        done(rm)


def test_two_rms_of_different_revisions_schedule_on_one_stack_at_once(module_stack):
    seed = SIRM(module_stack.si_address, f"rm-seed-{next(_ids)}")
    seed.register()
    seed.open()
    rm, col = started18(module_stack, nodes=(("v-n1", 1000),))
    try:
        seed.report(nodes=(node("s-n1", memory=1000, vcore=1000),), apps=(app("s-app"),))
        add_app18(rm, v18.app("v-app"))
        for i in range(20):  # interleaved: both RMs' requests in flight together
            seed.asks(ask(f"s-{i}", "s-app", memory=1, vcore=1))
            rm.allocations(v18.ask(f"v-{i}", "v-app", memory=1, vcore=1))
        got = seed.wait_allocated({f"s-{i}" for i in range(20)}, timeout=30).values()
        assert all(a.UUID and a.nodeID == "s-n1" for a in got)  # the seed RM's own dialect
        col.until(lambda c: len(c.new) == 20)
        assert all(a.nodeID == "v-n1" for a in col.new)
    finally:
        done(seed, rm)


def test_a_re_registration_switches_the_revision(module_stack):
    rm_id = f"rm-switch-{next(_ids)}"
    seed = SIRM(module_stack.si_address, rm_id)
    seed.register()
    seed.open()
    seed.report(nodes=(node("n1", memory=100, vcore=100),), apps=(app("app1"),))
    seed.asks(ask("s-1", "app1", memory=1, vcore=1))
    assert seed.wait_for("allocation", lambda r: r.new).new[0].UUID
    seed.close()
    rm = SIRM(module_stack.si_address, rm_id, revision=V18)
    try:
        rm.register()
        rm.open()
        rm.report(nodes=(v18.node("n1", memory=100, vcore=100),), apps=(v18.app("app1"),))
        rm.allocations(v18.ask("v-1", "app1", memory=1, vcore=1))
        col = Collector(rm).until(lambda c: c.new)
        assert col.new[0].allocationKey == "v-1"
        rm.releases(v18.release_key("v-1", "app1"))
        col.until(lambda c: c.released)
        assert col.released[0].allocationKey == "v-1"
    finally:
        done(rm)


def test_bench_e2e_measures_both_revisions_interleaved(module_stack, capsys):
    import argparse
    import json

    from benchmarks import e2e as bench_e2e

    parser = argparse.ArgumentParser()
    bench_e2e.configure(parser)
    args = parser.parse_args(["--si-address", module_stack.si_address, "--nodes", "10", "--nodes", "10",
                              "--asks", "200", "--rtt-samples", "3", "--no-core", "--json", "--si-revision", "both"])
    assert bench_e2e.run(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [r["si_revision"] for r in rows] == ["seed", "v1.8", "v1.8", "seed"]  # the order alternates
    assert rows[1]["ratio_to_seed"] == round(rows[1]["allocations_per_second"] / rows[0]["allocations_per_second"], 3)
    assert rows[2]["ratio_to_seed"] == round(rows[2]["allocations_per_second"] / rows[3]["allocations_per_second"], 3)
