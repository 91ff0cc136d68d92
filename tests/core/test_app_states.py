"""The application state machine of seed 004: every transition, its triggers and timers."""

import pytest

from partition_worker.core import (AppEvent, AppState, CoreSettings, IllegalTransition,
                                   ReleaseAlloc, ReleaseAsk, RemoveApp, Termination)
from partition_worker.core.app_state import TRANSITIONS, next_state
from partition_worker.core.settings import DAY, MINUTE
from tests.core.harness import SECOND, Harness

S, E = AppState, AppEvent


@pytest.mark.parametrize("state, event, expected", [
    (S.NEW, E.REJECT, S.REJECTED), (S.NEW, E.RUN, S.ACCEPTED), (S.RESUMING, E.RUN, S.ACCEPTED),
    (S.ACCEPTED, E.RUN, S.STARTING), (S.STARTING, E.RUN, S.RUNNING),
    (S.COMPLETING, E.RUN, S.RUNNING), (S.ACCEPTED, E.COMPLETE, S.COMPLETING),
    (S.STARTING, E.COMPLETE, S.COMPLETING), (S.RUNNING, E.COMPLETE, S.COMPLETING),
    (S.COMPLETING, E.COMPLETE, S.COMPLETED), (S.NEW, E.FAIL, S.FAILING),
    (S.ACCEPTED, E.FAIL, S.FAILING), (S.STARTING, E.FAIL, S.FAILING),
    (S.RUNNING, E.FAIL, S.FAILING), (S.FAILING, E.FAIL, S.FAILED),
    (S.NEW, E.RESUME, S.RESUMING), (S.ACCEPTED, E.RESUME, S.RESUMING),
    (S.COMPLETED, E.EXPIRE, S.EXPIRED), (S.FAILED, E.EXPIRE, S.EXPIRED),
    (S.REJECTED, E.EXPIRE, S.EXPIRED),
], ids=lambda v: v.value if hasattr(v, "value") else str(v))
def test_transition_table_matches_seed_004(state, event, expected) -> None:
    assert TRANSITIONS[(state, event)] is expected
    assert next_state("a", state, event) is expected


def test_run_on_running_is_a_silent_no_op() -> None:
    assert next_state("a", S.RUNNING, E.RUN) is None


@pytest.mark.parametrize("state, event", [
    (S.COMPLETED, E.RUN), (S.FAILED, E.RUN), (S.EXPIRED, E.FAIL), (S.REJECTED, E.RUN),
    (S.RUNNING, E.REJECT), (S.NEW, E.COMPLETE),
])
def test_illegal_transitions_raise_naming_state_and_event(state, event) -> None:
    with pytest.raises(IllegalTransition) as exc:
        next_state("app9", state, event)
    assert state.value in str(exc.value) and event.value in str(exc.value) and "app9" in str(exc.value)


def test_first_ask_accepts_first_allocation_starts_second_runs(h: Harness) -> None:
    h.node("n1").app("app1")
    assert h.app_state("app1") == "New"
    h.ask("k1", "app1")
    assert h.states("app1") == ["Accepted"]
    h.step()
    assert h.states("app1") == ["Accepted", "Starting"]
    h.ask("k2", "app1")
    h.step()
    assert h.states("app1") == ["Accepted", "Starting", "Running"]
    assert all(s.message == "runApplication" for s in h.log.app_states)


def test_starting_times_out_into_running_after_five_minutes(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    h.advance(5 * MINUTE - 1)
    assert h.app_state("app1") == "Starting"
    h.advance(1)
    assert h.app_state("app1") == "Running"


def test_stateaware_disable_tag_skips_starting_at_once(h: Harness) -> None:
    h.node("n1").app("app1", tags={"application.stateaware.disable": "true"}).ask("k1", "app1")
    h.step()
    assert h.states("app1") == ["Accepted", "Starting", "Running"]


def test_idle_app_completes_after_thirty_seconds_then_expires() -> None:
    h = Harness(settings=CoreSettings(completing_timeout_ns=30 * SECOND, expire_timeout_ns=3 * DAY))
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    uuid = h.allocs_of("k1")[0].uuid
    h.do(ReleaseAlloc("app1", uuid))
    assert h.app_state("app1") == "Completing"
    h.advance(30 * SECOND)
    assert h.app_state("app1") == "Completed"
    assert "app1" not in h.p.apps and "app1" in h.p.finished_apps
    assert "app1" not in h.p.queues.find("root.default").apps
    h.advance(3 * DAY)
    assert h.states("app1")[-1] == "Expired"
    assert "app1" not in h.p.finished_apps


def test_new_ask_while_completing_runs_again(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid))
    h.ask("k2", "app1")
    assert h.states("app1")[-2:] == ["Completing", "Running"]
    h.advance(60 * SECOND)
    assert h.app_state("app1") == "Running"


def test_removing_all_asks_of_an_accepted_app_completes_it(h: Harness) -> None:
    h.app("app1").ask("k1", "app1")
    h.do(ReleaseAsk("app1", "k1"))
    assert h.states("app1") == ["Accepted", "Completing"]


def test_failing_an_app_releases_its_work_and_ends_failed(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1").ask("k2", "app1", memory=10_000)
    h.step()
    h.p.fail_application("app1", "PartitionRemoved", h.now)
    h._collect()
    assert h.states("app1")[-2:] == ["Failing", "Failed"]
    assert h.log.app_states[-1].message == "PartitionRemoved"
    assert [r.termination for r in h.log.released] == [Termination.STOPPED_BY_RM]
    assert h.p.root.allocated.is_zero() and h.p.root.pending.is_zero()


def test_rejected_app_is_kept_without_a_state_update(h: Harness) -> None:
    h.app("bad", queue="root.nope")
    assert h.app_state("bad") == "Rejected"
    assert h.states("bad") == []
    h.advance(3 * DAY)
    assert h.app_state("bad") == "gone"


def test_remove_app_releases_allocations_and_tells_the_rm(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1", repeat=2).ask("k2", "app1", memory=99_999)
    h.step()
    h.do(RemoveApp("app1"))
    assert sorted(r.message for r in h.log.released) == ["Application app1 Removed"] * 2
    assert all(r.termination is Termination.STOPPED_BY_RM for r in h.log.released)
    assert h.p.root.allocated.is_zero() and h.p.root.pending.is_zero()
    assert h.p.nodes.get("n1").allocated.is_zero()
    assert "app1" not in h.p.apps
    assert h.states("app1")[-1] == "Running"  # no transition reported for a removal


def test_execution_timeout_releases_the_allocation_with_timeout(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1", execution_timeout_ms=1000)
    h.step()
    h.advance(999_999_999)
    assert h.log.released == []
    h.advance(1)
    (rel,) = h.log.released
    assert rel.termination is Termination.TIMEOUT and rel.allocation_key == "k1"
    assert h.p.allocations == {}


def test_app_counts_as_running_in_its_queues_between_starting_and_completing(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    leaf = h.p.queues.find("root.default")
    assert (leaf.running_apps, h.p.root.running_apps) == (1, 1)
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid))
    assert (leaf.running_apps, h.p.root.running_apps) == (0, 0)


def test_next_wakeup_is_the_earliest_timer(h: Harness) -> None:
    h.node("n1").app("app1").ask("k1", "app1")
    h.step()
    assert h.p.next_wakeup_ns() == h.now + 5 * MINUTE
