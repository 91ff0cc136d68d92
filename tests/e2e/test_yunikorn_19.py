"""Today's YuniKorn (1.9) through a real stack (``korral up``), with an RM of each SI revision
(the seed's and v1.8): queue preemption stops at the preemptor's guarantee, counting the
preemptions in flight."""

from __future__ import annotations

import pytest

from common import si_pb2, si_v18_pb2
from common.restclient import RestClient
from tests.conftest import wait_until
from tests.e2e.sirm import SEED, SIRM, V18
from tests.si_builders import seed, v18

BUILDERS = {SEED.name: seed, V18.name: v18}
TERMINATION = {SEED.name: si_pb2, V18.name: si_v18_pb2}
REVISIONS = pytest.mark.parametrize("revision", [SEED, V18], ids=lambda r: r.name)

GUARANTEES = """
partitions:
  - name: default
    preemption: {enabled: true}
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {name: a, resources: {guaranteed: {memory: 600}}, properties: {preemption.delay: 1s}}
          - {name: b, resources: {guaranteed: {memory: 200}}, properties: {preemption.delay: 1s}}
"""


class Totals:
    """Everything an RM's allocation stream brought: new allocations and releases by key."""

    def __init__(self, rm: SIRM) -> None:
        self.rm, self.new, self.released = rm, [], []

    def until(self, cond, timeout: float = 30.0, what: str = "the totals wanted") -> None:
        def step(r):
            self.new += r.new
            self.released += r.released
            return True if cond(self) else None

        if not cond(self):
            self.rm.read_until("allocation", step, timeout,
                               lambda: f"{what} (so far {len(self.new)} new, {len(self.released)} released)")

    def new_of(self, prefix: str) -> list[str]:
        return [a.allocationKey for a in self.new if a.allocationKey.startswith(prefix)]


def done(rm: SIRM) -> None:
    """Shut the RM down so its partition's worker is free for the next test (2 workers)."""
    rm.shutdown()
    rm.close()


def rest(stack) -> RestClient:
    return RestClient(stack.rest_address, timeout=10)


def queue_memory(stack, rm_id: str, path: str) -> int:
    q = rest(stack).get(f"/ws/v1/partition/default/queue/{path}", rmID=rm_id)
    return q["allocatedResource"].get("memory", 0)


def guarantee_refusals(stack, rm_id: str, app_id: str) -> dict[str, int]:
    """Ask key -> how often queue preemption was refused by the guarantee check (REST allocationLog)."""
    info = rest(stack).get(f"/ws/v1/partition/default/application/{app_id}", rmID=rm_id)
    return {r["allocationKey"]: e["count"] for r in info["requests"] for e in r["allocationLog"]
            if e["message"] == "Preemption queue guarantees check failed"}


@REVISIONS
@pytest.mark.parametrize("b_priorities", [(0,) * 10, (0, 10) * 5], ids=["priority-0", "priorities-0-10"])
def test_preemption_stops_at_the_preemptors_guarantee_with_a_late_confirming_rm(module_stack, revision, b_priorities):
    """b fills 10 nodes of memory 100; a (guaranteed 600) asks 8 x 100: six victims, not eight (only
    the priority-0 ones, five, when half of b's run at priority 10). The RM confirms each victim's
    release only after the preemptors were placed, as a shim whose pods take time to go."""
    rm_id = f"rm-guarantee-{revision.name}-{b_priorities[1]}"
    b = BUILDERS[revision.name]
    rm = SIRM(module_stack.si_address, rm_id, revision=revision)
    try:
        rm.register(GUARANTEES)
        rm.open()
        rm.report(nodes=[b.node(f"n{i}", memory=100, vcore=None) for i in range(10)],
                  apps=[b.app("b-app", queue="root.b"), b.app("a-app", queue="root.a")])
        asks = []
        for i, prio in enumerate(b_priorities):
            asks.append(b.ask(f"b{i}", "b-app", memory=100, vcore=None))
            asks[-1].priority = prio
        rm.asks(*asks)
        rm.wait_allocated({f"b{i}" for i in range(10)})
        totals = Totals(rm)
        rm.asks(*[b.ask(f"a{i}", "a-app", memory=100, vcore=None) for i in range(8)])  # due together
        victims = 6 if b_priorities[1] == 0 else 5
        totals.until(lambda t: len(t.released) >= victims and len(t.new_of("a")) >= victims,
                     what=f"{victims} victims released and their preemptors placed")
        assert all(r.terminationType == TERMINATION[revision.name].PREEMPTED_BY_SCHEDULER for r in totals.released)
        if victims == 5:
            assert {r.allocationKey for r in totals.released} == {f"b{i}" for i in range(0, 10, 2)}
        waiting = 8 - victims
        if victims == 6:  # the 7th and 8th are refused by the guarantee check, and say so
            wait_until(lambda: len(guarantee_refusals(module_stack, rm_id, "a-app")) == waiting, 20,
                       "two asks refused by the guarantee check")
        # the shim confirms the victims' releases late: nothing of that changes the books
        rm.releases(*[b.release(r, TERMINATION[revision.name].PREEMPTED_BY_SCHEDULER) for r in totals.released])
        if victims == 6:  # a retry after the confirmations is refused again
            wait_until(lambda: min(guarantee_refusals(module_stack, rm_id, "a-app").values(), default=0) >= 2, 20,
                       "the refused asks retried after the confirmations")
        assert queue_memory(module_stack, rm_id, "root.a") == victims * 100
        assert queue_memory(module_stack, rm_id, "root.b") == 1000 - victims * 100
        assert len(totals.released) == victims
    finally:
        done(rm)


# -- §1 the compatibility switch follows the RM -----------------------------------------------------

PLAIN = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {name: a}
"""


def logs(stack, who: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in (stack.state_dir / "logs").glob(f"*{who}*"))


def status_compatibility(stack, rm_id: str) -> dict | None:
    """The RM's switch as ``korral status --json`` shows it (the broker's view of the rmproxies)."""
    for proxy in (stack.status().get("cluster") or {}).get("rmproxies") or []:
        info = (proxy.get("rms") or {}).get(rm_id)
        if info is not None:
            return info.get("compatibility")
    return None


def rest_compatibility(stack, rm_id: str) -> dict | None:
    return next((rm.get("compatibility") for rm in rest(stack).get("/ws/v1/korral/stack")["rms"]
                 if rm["rmID"] == rm_id), None)


def app_states_after_one_allocation(rm: SIRM, b) -> list[str]:
    """The states the RM is told for an app with one allocation, up to Starting or Running."""
    rm.report(nodes=[b.node("n1", memory=100, vcore=None)], apps=[b.app("app1", queue="root.a")])
    rm.asks(b.ask("k1", "app1", memory=10, vcore=None))
    rm.wait_allocated({"k1"})
    states: list[str] = []

    def step(r):
        states.extend(u.state for u in r.updated if u.applicationID == "app1")
        return True if {"Starting", "Running"} & set(states) else None

    rm.read_until("application", step, 15, lambda: f"Starting or Running (got {states})")
    return states


@pytest.mark.parametrize("revision, extra, build, want, source, detail, starting", [
    (V18, {}, {}, "1.9", "SI revision", "v1.8", False),
    (SEED, {}, {}, "1.2", "SI revision", "seed", True),
    (SEED, {}, {"buildVersion": "1.9.0"}, "1.9", "buildInfo", "buildInfo buildVersion=1.9.0", False),
    (V18, {"korral.compatibility": "1.2"}, {}, "1.2", "explicit", "extraConfig korral.compatibility=1.2", True),
], ids=["v1.8 RM", "seed RM", "seed RM of a 1.9 build", "v1.8 RM asking for 1.2"])
def test_the_compatibility_switch_follows_the_rm_and_is_shown(module_stack, revision, extra, build, want, source,
                                                               detail, starting):
    rm_id = f"rm-compat-{revision.name}-{source.replace(' ', '')}"
    b = BUILDERS[revision.name]
    rm = SIRM(module_stack.si_address, rm_id, revision=revision)
    try:
        rm.register(PLAIN, extra_config=extra, build_info=build)
        rm.open()
        states = app_states_after_one_allocation(rm, b)
        assert ("Starting" in states) is starting, states
        shown = {"version": want, "source": source, "detail": detail}
        assert rest_compatibility(module_stack, rm_id) == shown
        wait_until(lambda: status_compatibility(module_stack, rm_id) == shown, 20,
                   "korral status showing the switch", lambda: status_compatibility(module_stack, rm_id))
        text = module_stack.korral("status", "--state-dir", str(module_stack.state_dir)).stdout
        assert f"{want} ({source}: {detail})" in text
        line = f"RM {rm_id}: compatibility {want} ({source}: {detail})"
        wait_until(lambda: line in logs(module_stack, "rmproxy"), 10, "the switch in rmproxy's log")
        worker_line = f"partition [{rm_id}]default: compatibility {want} ({source}: {detail})"
        wait_until(lambda: worker_line in logs(module_stack, "worker"), 10, "the switch in the worker's log")
        # preemption.enabled unset: on since YuniKorn 1.4, off for the seeds
        part = next(p for p in rest(module_stack).get("/ws/v1/partitions") if p["rmID"] == rm_id)
        assert part["preemptionEnabled"] is (want != "1.2")
    finally:
        done(rm)


@REVISIONS
def test_an_unknown_switch_value_is_refused_naming_the_rm_and_1_10_is_read_as_1_9(module_stack, revision):
    import grpc

    rm_id = f"rm-badcompat-{revision.name}"
    b = BUILDERS[revision.name]
    rm = SIRM(module_stack.si_address, rm_id, revision=revision)
    try:
        with pytest.raises(grpc.RpcError) as info:
            rm.register(PLAIN, extra_config={"korral.compatibility": "2.0"})
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (f"registration of RM failed: RM {rm_id}: extraConfig korral.compatibility: unknown value '2.0'"
                in info.value.details())
        rm.register(PLAIN, extra_config={"korral.compatibility": "1.10"})
        rm.open()
        wait_until(lambda: f"RM {rm_id}: extraConfig korral.compatibility: '1.10' is read as 1.9"
                   in logs(module_stack, "rmproxy"), 10, "the alias's warning in rmproxy's log")
        assert rest_compatibility(module_stack, rm_id)["version"] == "1.9"
        rm.report(nodes=[b.node("n1", memory=100, vcore=None)], apps=[b.app("app1", queue="root.a")])
        rm.asks(b.ask("k1", "app1", memory=10, vcore=None))
        rm.wait_allocated({"k1"})
        with pytest.raises(grpc.RpcError) as info:
            rm.update_config(PLAIN, extra_config={"korral.compatibility": "1.11"})
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (f"update of configuration failed: RM {rm_id}: extraConfig korral.compatibility: unknown value '1.11'"
                in info.value.details())
        # nothing already accepted is lost: the switch, the app and its allocation stay
        assert rest_compatibility(module_stack, rm_id)["detail"] == "extraConfig korral.compatibility=1.10"
        app_info = rest(module_stack).get("/ws/v1/partition/default/application/app1", rmID=rm_id)
        assert [a["allocationKey"] for a in app_info["allocations"]] == ["k1"]
        rm.update_config(PLAIN, extra_config={})  # the key removed: chosen by the RM again
        want = "1.9" if revision is V18 else "1.2"
        assert rest_compatibility(module_stack, rm_id) == {
            "version": want, "source": "SI revision", "detail": revision.name}
    finally:
        done(rm)
