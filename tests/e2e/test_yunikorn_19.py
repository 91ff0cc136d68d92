"""Today's YuniKorn (1.9) through a real stack (``korral up``), with an RM of each SI revision
(the seed's and v1.8): queue preemption stops at the preemptor's guarantee, counting the
preemptions in flight; the compatibility switch follows the RM and shows; in-place resize; the
recovery rule; reservations held by quota cancelled after the wait timeout (1 s here); the
app-added and quota-preemption events.

One stack for the module, its workers' reservation wait timeout 1 s (``korral worker
--reservation-wait-timeout``); every test shuts its RMs down, freeing the two workers."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest

import grpc

from common import si_pb2, si_v18_pb2
from common.restclient import RestClient
from tests.conftest import start_stack, stop_and_verify, wait_until
from tests.e2e.sirm import SEED, SIRM, V18
from tests.queues_yaml import open_root, queues_yaml
from tests.rest.workload import EventStreamClient
from tests.si_builders import seed, v18

BUILDERS = {SEED.name: seed, V18.name: v18}
TERMINATION = {SEED.name: si_pb2, V18.name: si_v18_pb2}
REVISIONS = pytest.mark.parametrize("revision", [SEED, V18], ids=lambda r: r.name)

GUARANTEES = queues_yaml(open_root("""
- {name: a, resources: {guaranteed: {memory: 600}}, properties: {preemption.delay: 1s}}
- {name: b, resources: {guaranteed: {memory: 200}}, properties: {preemption.delay: 1s}}
""") + "    preemption: {enabled: true}\n")


@pytest.fixture(scope="module")
def module_stack(tmp_path_factory):
    """The module's stack (``--workers 2``), reservations held by quota cancelled 2 s after made."""
    handle = start_stack(tmp_path_factory.mktemp("yk19-stack") / "state",
                         env={"KORRAL_RESERVATION_WAIT_TIMEOUT": "1s"})
    yield handle
    problems = stop_and_verify(handle)
    if problems:
        pytest.fail("\n".join(problems))


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


@contextlib.contextmanager
def registered(stack, rm_id: str, revision, config: str, **register) -> Iterator[SIRM]:
    """An RM of ``revision`` registered with ``config`` (``register``: build_info, extra_config),
    its streams open; shut down at the end, however the test ends."""
    rm = SIRM(stack.si_address, rm_id, revision=revision)
    try:
        rm.register(config, **register)
        rm.open()
        yield rm
    finally:
        done(rm)


def one_placed(rm: SIRM, b, memory: int = 10):
    """Node n1 (memory 100) and app1 in root.a reported, ask k1 of ``memory`` placed: its allocation."""
    rm.report(nodes=[b.node("n1", memory=100, vcore=None)], apps=[b.app("app1", queue="root.a")])
    rm.asks(b.ask("k1", "app1", memory=memory, vcore=None))
    return rm.wait_allocated({"k1"})["k1"]


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
    with registered(module_stack, rm_id, revision, GUARANTEES) as rm:
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


# -- §1 the compatibility switch follows the RM -----------------------------------------------------

PLAIN = queues_yaml(open_root("- {name: a}"))


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
    one_placed(rm, b)
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
    with registered(module_stack, rm_id, revision, PLAIN, extra_config=extra, build_info=build) as rm:
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


@REVISIONS
def test_an_unknown_switch_value_is_refused_naming_the_rm_and_1_10_is_read_as_1_9(module_stack, revision):
    rm_id = f"rm-badcompat-{revision.name}"
    b = BUILDERS[revision.name]
    with SIRM(module_stack.si_address, rm_id, revision=revision) as refused:
        with pytest.raises(grpc.RpcError) as info:
            refused.register(PLAIN, extra_config={"korral.compatibility": "2.0"})
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (f"registration of RM failed: RM {rm_id}: extraConfig korral.compatibility: unknown value '2.0'"
            in info.value.details())
    with registered(module_stack, rm_id, revision, PLAIN, extra_config={"korral.compatibility": "1.10"}) as rm:
        wait_until(lambda: f"RM {rm_id}: extraConfig korral.compatibility: '1.10' is read as 1.9"
                   in logs(module_stack, "rmproxy"), 10, "the alias's warning in rmproxy's log")
        assert rest_compatibility(module_stack, rm_id)["version"] == "1.9"
        one_placed(rm, b)
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


# -- §2 in-place resize ----------------------------------------------------------------------------

def events(stack, rm_id: str, reason: str) -> list[dict]:
    batch = rest(stack).get("/ws/v1/events/batch", partition="default", rmID=rm_id)
    return [e for e in batch.get("EventRecords") or [] if e.get("reason") == reason]


def test_a_v1_8_rm_resizes_a_placed_allocation_in_place(module_stack):
    rm_id = "rm-resize-v1.8"
    b = v18
    with registered(module_stack, rm_id, V18, PLAIN) as rm:
        placed = one_placed(rm, b, memory=40)
        rm.allocations(b.allocation("k1", placed.nodeID, "app1", memory=70, vcore=None))  # the pod grew
        node_memory = lambda: rest(module_stack).get("/ws/v1/partition/default/node/n1", rmID=rm_id)["allocated"]["memory"]  # noqa: E731
        wait_until(lambda: node_memory() == 70, 15, "the node's allocated memory at the new size", node_memory)
        assert queue_memory(module_stack, rm_id, "root.a") == 70
        app_info = rest(module_stack).get("/ws/v1/partition/default/application/app1", rmID=rm_id)
        assert app_info["usedResource"]["memory"] == 70
        users = rest(module_stack).get("/ws/v1/partition/default/usage/users", rmID=rm_id)
        alice = next(u for u in users if u["userName"] == "alice")
        assert alice["queues"]["resourceUsage"]["memory"] == 70
        # growing past the node's room, or to a negative size: refused naming it, nothing changes
        for memory, why in ((150, "node n1 has no room to grow it by Resource({memory:80})"),
                            (-1, "allocation contains negative resources")):
            rm.allocations(b.allocation("k1", "n1", "app1", memory=memory, vcore=None))
            refused = rm.wait_for("allocation", lambda r: r.rejectedAllocations).rejectedAllocations
            assert [(x.allocationKey, x.applicationID) for x in refused] == [("k1", "app1")]
            assert refused[0].reason.startswith("resize of allocation k1 of application app1 on node n1 to ")
            assert why in refused[0].reason and refused[0].reason.endswith("it keeps Resource({memory:70})")
        assert node_memory() == 70
        rm.allocations(b.allocation("k1", "n1", "app1", memory=20, vcore=None))  # shrinks: room for more
        rm.asks(b.ask("k2", "app1", memory=75, vcore=None))
        rm.wait_allocated({"k2"})
        assert node_memory() == 95


def test_a_seed_rm_has_no_resize_and_is_told_so(module_stack):
    rm_id = "rm-resize-seed"
    b = seed
    with registered(module_stack, rm_id, SEED, PLAIN) as rm:
        placed = one_placed(rm, b, memory=40)
        again = b.allocation("k1", "n1", "app1", uuid=placed.UUID, memory=70, vcore=None)
        rm.nodes(b.node("n1", action=si_pb2.NodeInfo.UPDATE, memory=100, vcore=None, existing=[again]))
        found = wait_until(lambda: events(module_stack, rm_id, "AllocationResizeUnsupported"), 15,
                           "the NODE event saying the seed's SI has no resize")
        assert "the seed's SI has no in-place resize" in found[0]["message"]
        assert queue_memory(module_stack, rm_id, "root.a") == 40


# -- §2 the recovery rule --------------------------------------------------------------------------

@REVISIONS
def test_a_forced_app_no_rule_places_goes_to_the_recovery_queue_for_today_s_rm(module_stack, revision):
    rm_id = f"rm-recovery-{revision.name}"
    b = BUILDERS[revision.name]
    today = revision is V18  # a seed RM keeps 1.2: no recovery rule
    with registered(module_stack, rm_id, revision, PLAIN, build_info={"si.revision": revision.name}) as rm:  # declared: the switch is known at once
        forced = b.app("running-pod", queue="root.elsewhere", tags={"application.create.force": "true"})
        rm.apps(forced)
        answer = rm.wait_for("application", lambda r: r.accepted or r.rejected)
        assert bool(answer.accepted) is today, answer
        rules = rest(module_stack).get("/ws/v1/partition/default/placementrules", rmID=rm_id)
        dump = rest(module_stack).get("/debug/fullstatedump")
        dumped = next(p["rules"] for p in dump["placementRules"] if p["rmID"] == rm_id)
        if today:
            info = rest(module_stack).get("/ws/v1/partition/default/application/running-pod", rmID=rm_id)
            assert info["queueName"] == "root.@recovery@"
            assert rules[-1] == {"name": "recovery", "parameters": {"queue": "root.@recovery@"}}
        else:
            assert "cannot create queue 'root.elsewhere' without placement rules" in answer.rejected[0].reason
            assert all(r["name"] != "recovery" for r in rules)
        assert dumped == rules


# -- §2 reservations held by quota ------------------------------------------------------------------

HELD = queues_yaml(open_root("""
- {name: a, resources: {max: {memory: %d}}}
- {name: b}
"""))


def reserve(rm: SIRM, b) -> None:
    """b holds 60 of the node's 100; a's ask of 80 reserves the node (after the 2 s delay)."""
    rm.report(nodes=[b.node("n1", memory=100, vcore=None)],
              apps=[b.app("other", queue="root.b"), b.app("app1", queue="root.a")])
    rm.asks(b.ask("o1", "other", memory=60, vcore=None))
    rm.wait_allocated({"o1"})
    rm.asks(b.ask("big", "app1", memory=80, vcore=None))


def reservations(stack, rm_id: str) -> list:
    return rest(stack).get("/ws/v1/partition/default/application/app1", rmID=rm_id)["reservations"]


def test_a_reservation_held_by_quota_is_cancelled_after_the_wait_timeout_for_today_s_rm_only(module_stack):
    with registered(module_stack, "rm-held-seed", SEED, HELD % 200, build_info={"si.revision": "seed"}) as seeds, \
            registered(module_stack, "rm-held-v1.8", V18, HELD % 200, build_info={"si.revision": "v1.8"}) as today:
        for rm, b in ((seeds, seed), (today, v18)):
            reserve(rm, b)
        for rm in (seeds, today):  # a's max drops below the reserved ask: the queue holds it
            wait_until(lambda: reservations(module_stack, rm.rm_id), 20, f"{rm.rm_id}'s ask reserving the node")
            rm.update_config(HELD % 50)
        cancelled = wait_until(lambda: events(module_stack, today.rm_id, "ReservationCancelled"), 20,
                               "the reservation cancelled after twice the 1 s wait timeout")
        rec = cancelled[0]
        assert (rec["objectID"], rec["referenceID"], rec["eventChangeType"], rec["eventChangeDetail"]) == \
            ("n1", "big", 3, 306)
        assert "the max of queue root.a held the ask" in rec["message"]
        assert reservations(module_stack, today.rm_id) == []
        assert reservations(module_stack, seeds.rm_id)  # the seed RM's (1.2) stays, made earlier


# -- §2 events -------------------------------------------------------------------------------------

@REVISIONS
def test_an_app_added_while_a_stream_is_open_shows_on_the_stream(module_stack, revision):
    rm_id = f"rm-stream-{revision.name}"
    b = BUILDERS[revision.name]
    stream = EventStreamClient(module_stack.rest_address)
    try:
        assert "InstanceUUID" in stream.line()
        with registered(module_stack, rm_id, revision, PLAIN) as rm:
            rm.report(apps=[b.app(f"streamed-{revision.name}", queue="root.a")])
            rec = stream.until(lambda r: r.get("objectID") == f"streamed-{revision.name}"
                               and r.get("reason") == "AppAdded")
        assert (rec["type"], rec["eventChangeType"], rec["eventChangeDetail"]) == (2, 2, 203)
    finally:
        stream.close()


QUOTA = queues_yaml(open_root("- {name: a, resources: {max: {memory: %d}}, properties: {quota.preemption.delay: 1s}}")
                   + "    preemption: {quotapreemptionenabled: true}\n")


@REVISIONS
def test_the_quota_preemption_summary_carries_queue_preemption(module_stack, revision):
    rm_id = f"rm-quota-{revision.name}"
    b = BUILDERS[revision.name]
    with registered(module_stack, rm_id, revision, QUOTA % 100) as rm:
        rm.report(nodes=[b.node("n1", memory=100, vcore=None)], apps=[b.app("app1", queue="root.a")])
        rm.asks(*[b.ask(f"q{i}", "app1", memory=10, vcore=None) for i in range(10)])
        rm.wait_allocated({f"q{i}" for i in range(10)})
        rm.update_config(QUOTA % 60)
        summary = wait_until(lambda: events(module_stack, rm_id, "QuotaPreemption"), 20, "the summary event")[0]
        assert summary["message"].startswith("Quota Preemption results summary:")
        assert (summary["type"], summary["objectID"], summary["eventChangeType"], summary["eventChangeDetail"]) == \
            (4, "root.a", 1, 407)
