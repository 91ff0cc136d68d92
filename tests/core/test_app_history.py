"""Applications the partition no longer keeps are remembered (bounded) with how and when they ended,
so ``korral explain`` can say so instead of "not found"."""

from __future__ import annotations

from partition_worker.core import CoreSettings, ReleaseAlloc, RemoveApp
from partition_worker.core.app_history import AppHistory, GoneApp
from partition_worker.core.settings import SECOND
from tests.core.harness import Harness


def running(h: Harness, app_id: str) -> Harness:
    h.node("n1").app(app_id).ask(f"{app_id}-k", app_id)
    h.step()
    return h


def test_an_app_removed_by_the_rm_is_remembered_with_its_state_and_time():
    h = running(Harness(), "app1")
    removed_at = h.now + 5 * SECOND
    h.now = removed_at
    h.do(RemoveApp("app1"))
    gone = h.p.lifecycle.gone.get("app1")
    assert "app1" not in h.p.apps and "app1" not in h.p.finished_apps
    assert gone == GoneApp("app1", "root.default", "alice", "Starting", removed_at,
                           "removed by the RM (RemoveApplication)", removed=True)


def test_a_finished_app_that_expires_is_remembered_in_the_state_it_ended_in():
    h = running(Harness(settings=CoreSettings(completing_timeout_ns=SECOND, expire_timeout_ns=60 * SECOND)), "app1")
    h.do(ReleaseAlloc("app1", h.allocs_of("app1-k")[0].uuid))
    h.step(2 * SECOND)  # Completing -> Completed
    assert h.app_state("app1") == "Completed" and h.p.lifecycle.gone.get("app1") is None
    completed_at = h.p.finished_apps["app1"].finished_ns
    h.step(61 * SECOND)  # expired: purged from the finished list
    gone = h.p.lifecycle.gone.get("app1")
    assert "app1" not in h.p.finished_apps
    assert (gone.state, gone.since_ns, gone.removed) == ("Completed", completed_at, False)


def test_a_rejected_app_pushed_out_of_the_finished_list_keeps_its_reason():
    h = Harness(settings=CoreSettings(max_completed_apps=1))
    h.app("bad", queue="root.nope").app("bad2", queue="root.nope")  # both rejected; only bad2 is kept
    gone = h.p.lifecycle.gone.get("bad")
    assert list(h.p.finished_apps) == ["bad2"]
    assert gone.state == "Rejected" and "cannot create queue 'root.nope'" in gone.reason


def test_an_app_added_again_is_no_longer_in_the_history():
    h = running(Harness(), "app1")
    h.do(RemoveApp("app1"))
    h.app("app1")
    assert h.p.lifecycle.gone.get("app1") is None and "app1" in h.p.apps


def test_the_history_is_bounded_oldest_first():
    history = AppHistory(size=2)
    for i in range(3):
        history.add(GoneApp(f"a{i}", "root.q", "u", "Completed", i, "", removed=False))
    assert (history.get("a0"), len(history)) == (None, 2) and history.get("a2").since_ns == 2
