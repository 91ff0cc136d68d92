"""Gang scheduling and queue preemption end to end: a real stack (``korral up``: rmproxy,
broker, partition workers, Redis) driven by ``korral sim`` (the simulated cluster, which
checks every decision as a careful RM would) and by an RM on the generated SI stubs (exact
wire-level pairs)."""

from __future__ import annotations

from rich.console import Console

from common import si_pb2
from simulator.presets import PRESETS
from simulator.runner import SimOptions, simulate
from simulator.workload import parse_workload, plan
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node, release, resource

QUIET = Console(file=open("/dev/null", "w"))

def test_sim_gang_of_50_on_a_busy_cluster_is_placed_whole_and_replaced_in_place(stack_factory):
    stack = stack_factory(workers=1)
    the_plan = plan(parse_workload(PRESETS["gang"][0]))
    s = simulate(the_plan, SimOptions(si_address=stack.si_address, progress=False), QUIET).summary
    # the sim checked every swap: same response (atomic), same node, nothing over-committed
    assert s["violations"] == []
    assert s["placeholders"] == {"allocated": 50, "replaced": 50, "timedout": 0, "released": 0}
    assert s["apps"] == {"Completed": 9}
    assert s["tasks"]["done"] == the_plan.task_count == 210


def test_sim_high_priority_queue_reclaims_its_guarantee_from_the_low_queue(stack_factory):
    stack = stack_factory(workers=1)
    the_plan = plan(parse_workload(PRESETS["preemption"][0]))
    result = simulate(the_plan, SimOptions(si_address=stack.si_address, progress=False), QUIET)
    s = result.summary
    # no protected victim, no placeholder victim, no loop, nothing over-committed
    assert s["violations"] == []
    assert s["queues"]["default:root.low"]["preempted"] == s["preempted"] == 30
    assert s["queues"]["default:root.high"]["preempted"] == 0
    assert s["apps"] == {"Completed": 2}  # the 30 victims were re-submitted and ran later
    assert s["tasks"]["done"] == 130 and s["tasks"]["preempted"] == 30
    # high reached its guarantee (30 of 100 slots) while low kept at least its own (10)
    assert s["queues"]["default:root.high"]["max_share"] >= 0.3
    reclaimed = [row for row in result.timeline if row["shares"].get("default:root.high", 0) >= 0.3]
    assert reclaimed and all(row["shares"].get("default:root.low", 0) >= 0.1 for row in reclaimed)

PREEMPTION_CONFIG = """
partitions:
  - name: default
    preemption:
      enabled: true
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: high
            resources:
              guaranteed: {memory: 600}
            properties:
              preemption.delay: 1s
              priority.offset: "100"
          - name: low
            resources:
              guaranteed: {memory: 100}
"""


class _Collector:
    """Reads every allocation response until a condition on the totals holds."""

    def __init__(self, rm: SIRM) -> None:
        self.rm = rm
        self.new: list = []
        self.released: list = []
        self.released_asks: list = []
        self.rejected: list = []

    def until(self, cond, timeout: float = 30.0) -> None:
        if cond(self):
            return

        def step(r):
            self.new += r.new
            self.released += r.released
            self.released_asks += r.releasedAsks
            self.rejected += r.rejected
            return True if cond(self) else None

        self.rm.read_until("allocation", step, timeout, lambda: (
            f"the totals wanted (so far {len(self.new)} new, {len(self.released)} released, "
            f"{len(self.rejected)} rejected)"))


def test_gang_of_50_on_a_busy_cluster(stack_factory):
    stack = stack_factory(workers=1)
    rm = SIRM(stack.si_address, "rm-gang")
    try:
        rm.register()
        rm.open()
        rm.nodes(*[node(f"n{i}", memory=100, vcore=100) for i in range(10)])
        rm.next("node")
        col = _Collector(rm)
        rm.apps(app("busy"))
        rm.next("application")
        rm.asks(*[ask(f"busy-{i}", "busy", memory=10, vcore=1) for i in range(60)])
        col.until(lambda c: len(c.new) >= 60)
        gang = app("gang")
        gang.placeholderAsk.CopyFrom(resource(memory=250, vcore=50))
        gang.gangSchedulingStyle = "Hard"
        gang.executionTimeoutMilliSeconds = 120_000
        rm.apps(gang)
        rm.wait_for("application", lambda r: any(a.applicationID == "gang" for a in r.accepted))
        rm.asks(*[ask(f"ph-{i}", "gang", memory=5, vcore=1, placeholder=True, task_group="tg") for i in range(50)])
        col.until(lambda c: len(c.new) >= 110)
        placed = {a.UUID: a for a in col.new if a.placeholder}
        assert len(placed) == 50
        rm.asks(*[ask(f"real-{i}", "gang", memory=4, vcore=1, task_group="tg") for i in range(50)])
        col.until(lambda c: len(c.released) >= 50 and len(c.new) >= 160)
        real_allocs = {a.UUID: a for a in col.new if a.allocationKey.startswith("real-")}
        assert len(real_allocs) == 50 and not col.rejected
        for rel in col.released:
            assert rel.terminationType == si_pb2.PLACEHOLDER_REPLACED
            real_uuid = rel.message.removeprefix("replacing uuid: ")
            assert placed[rel.UUID].nodeID == real_allocs[real_uuid].nodeID  # same node
        # the RM confirms every replacement (S10): nothing comes back
        rm.releases(*[release(r, si_pb2.PLACEHOLDER_REPLACED) for r in col.released])
        rm.asks(ask("probe", "busy", memory=1, vcore=1))
        col.until(lambda c: any(a.allocationKey == "probe" for a in c.new))
        assert len(col.released) == 50
    finally:
        rm.close()


def test_high_priority_queue_reclaims_its_guarantee(stack_factory):
    stack = stack_factory(workers=1)
    rm = SIRM(stack.si_address, "rm-preempt")
    try:
        rm.register(PREEMPTION_CONFIG)
        rm.open()
        rm.nodes(*[node(f"n{i}", memory=250, vcore=250) for i in range(4)])
        rm.next("node")
        col = _Collector(rm)
        rm.apps(app("lo", queue="root.low"))
        rm.next("application")
        rm.asks(*[ask(f"lo-{i}", "lo", memory=10, vcore=1) for i in range(100)])
        col.until(lambda c: len(c.new) >= 100)
        rm.apps(app("hi", queue="root.high"))
        rm.wait_for("application", lambda r: any(a.applicationID == "hi" for a in r.accepted))
        rm.asks(*[ask(f"hi-{i}", "hi", memory=10, vcore=1) for i in range(30)])
        col.until(lambda c: sum(a.applicationID == "hi" for a in c.new) >= 30, timeout=60)
        victims = [r for r in col.released if r.terminationType == si_pb2.PREEMPTED_BY_SCHEDULER]
        assert len(victims) == 30 and all(r.applicationID == "lo" for r in victims)
    finally:
        rm.close()


def test_sim_user_and_group_limits_hold_and_are_used_to_the_full(stack_factory):
    stack = stack_factory(workers=1)
    the_plan = plan(parse_workload(PRESETS["limits"][0]))
    s = simulate(the_plan, SimOptions(si_address=stack.si_address, progress=False), QUIET).summary
    assert s["violations"] == []  # the sim checked every allocation against every limit
    assert s["apps"] == {"Completed": 6} and s["tasks"]["done"] == the_plan.task_count
    peaks = s["limit_peaks"]
    # each limit was reached, never passed: the tasks waited for their own user's releases
    assert peaks["default:root.shared user alice"]["vcore"] == 4000
    assert peaks["default:root.shared user bob"]["vcore"] == 2000
    assert peaks["default:root.shared user carol"]["vcore"] == 2000
    assert "default:root.shared group data" in peaks


GANG_TIMEOUTS = """
name: gang-timeouts
seed: 8
duration: 60
nodes:
  # each gang asks for 8 placeholders in a partition with room for fewer: it is never placed
  - {name: s, count: 3, partition: default, resources: {vcore: 2, memory: 4Gi}}
  - {name: h, count: 2, partition: hard, resources: {vcore: 2, memory: 4Gi}}
apps:
  - {name: soft, partition: default, queue: root.gang, tasks: 8, resources: {vcore: 1, memory: 1Gi},
     duration: 0.3, gang: {style: Soft, timeout: 2}}
  - {name: hard, partition: hard, queue: root.gang, tasks: 8, resources: {vcore: 1, memory: 1Gi},
     duration: 0.3, gang: {style: Hard, timeout: 2}}
"""


def test_sim_gang_timeouts_soft_falls_back_to_normal_scheduling_hard_fails(stack_factory):
    stack = stack_factory(workers=2)  # one per partition
    result = simulate(plan(parse_workload(GANG_TIMEOUTS)), SimOptions(si_address=stack.si_address,
                                                                      progress=False), QUIET)
    s = result.summary
    assert s["violations"] == []
    assert s["apps"] == {"Completed": 1, "Failed": 1}
    # soft: 6 placeholders placed then released on timeout, 2 asks timed out; its 8 tasks then ran
    # normally (6 at a time); hard: 4 placed, all 8 released, the app failed, its tasks never sent
    assert s["placeholders"] == {"allocated": 10, "replaced": 0, "timedout": 16, "released": 0}
    assert s["tasks"]["done"] == 8 and s["tasks"]["failed"] == 8
