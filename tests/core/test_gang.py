"""Gang scheduling on the core with the fake clock: placeholders, replacement, timeouts."""

from __future__ import annotations

from partition_worker.core import AddApp, ReleaseAlloc
from partition_worker.core.outcomes import Termination
from tests.core.harness import SECOND, Harness, res


def _gang(h: Harness, app: str = "app1", n: int = 3, size: int = 10, style: str = "Soft",
          timeout_ms: int = 0) -> None:
    h.do(AddApp(app, "root.default", "alice", placeholder_ask=res(memory=n * size, vcore=n),
                gang_style=style, execution_timeout_ms=timeout_ms))
    h.ask(f"{app}-ph", app, memory=size, vcore=1, repeat=n, placeholder=True, task_group="tg")


def _released(h: Harness, term: Termination) -> list:
    return [r for r in h.log.released if r.termination is term]


def test_placeholders_then_replaced_one_by_one_on_the_same_node():
    h = Harness()
    h.node("n1", memory=100).node("n2", memory=100)
    _gang(h)
    h.ask("real-1", "app1", memory=8, vcore=1, task_group="tg")
    h.step()
    phs = h.allocs_of("app1-ph")
    keys = h.allocated_keys()
    assert keys == ["app1-ph"] * 3 + ["real-1"]  # the whole gang first, then the swap
    assert "Starting" in h.states("app1")  # placeholders covered placeholderAsk
    real = h.allocs_of("real-1")
    assert len(real) == 1
    rel = _released(h, Termination.PLACEHOLDER_REPLACED)
    assert len(rel) == 1 and rel[0].uuid == phs[0].uuid  # the oldest placeholder
    assert rel[0].message == f"replacing uuid: {real[0].uuid}"
    assert real[0].node_id == phs[0].node_id
    app = h.p.apps["app1"]
    assert h.p.root.allocated.get("memory") == 28 and app.allocated.get("memory") == 28
    node = h.p.nodes.get(phs[0].node_id)
    assert sum(a.resource.get("memory") for a in node.allocations.values()) == \
        node.allocated.get("memory")
    h.ask("real-2", "app1", memory=10, vcore=1, task_group="tg", repeat=2)
    h.step(1)
    assert len(h.allocs_of("real-2")) == 2 and not app.placeholders
    pairs = {r.uuid for r in _released(h, Termination.PLACEHOLDER_REPLACED)}
    assert pairs == {a.uuid for a in phs}
    d = app.ph_data["tg"]
    assert (d.count, d.replaced, d.timedout) == (3, 3, 0)
    assert h.app_state("app1") == "Running"
    # the RM confirms a replacement: nothing to do, nothing echoed
    n_rel = len(h.log.released)
    h.do(ReleaseAlloc("app1", phs[0].uuid, Termination.PLACEHOLDER_REPLACED))
    assert len(h.log.released) == n_rel and len(h.p.apps["app1"].allocations) == 3


def test_real_ask_bigger_than_placeholder_rejected():
    h = Harness()
    h.node("n1", memory=100)
    _gang(h)
    h.ask("big", "app1", memory=11, vcore=1, task_group="tg")
    reason = h.rejected_ask_reasons()["big"]
    assert "larger than the placeholders of task group tg" in reason
    assert "big" not in h.p.apps["app1"].asks


def test_real_ask_of_a_group_without_placeholders_left_is_scheduled_normally():
    h = Harness()
    h.node("n1", memory=100)
    _gang(h, n=1)
    h.ask("r1", "app1", memory=5, vcore=1, task_group="tg", repeat=2)
    h.step()
    h.step(1)
    assert len(h.allocs_of("r1")) == 2  # one replaced the placeholder, one placed normally
    assert len(_released(h, Termination.PLACEHOLDER_REPLACED)) == 1


def test_hard_timeout_fails_the_app_and_releases_everything():
    h = Harness()
    h.node("n1", memory=25)  # only 2 of 3 placeholders fit
    _gang(h, style="Hard", timeout_ms=60_000)
    h.ask("real", "app1", memory=10, vcore=1, task_group="tg")
    h.step()
    assert len(h.allocs_of("app1-ph")) == 2 and h.app_state("app1") == "Accepted"
    h.step(59 * SECOND)
    assert h.app_state("app1") == "Accepted"
    h.step(1 * SECOND)
    assert h.states("app1")[-2:] == ["Failing", "Failed"]
    timeouts = _released(h, Termination.TIMEOUT)
    assert len(timeouts) == 2
    assert {r.message for r in timeouts} == {"releasing allocated placeholders on placeholder timeout"}
    asks = {(r.allocation_key, r.termination, r.message) for r in h.log.released_asks}
    msg = "releasing placeholders asks on placeholder timeout"
    assert asks == {("app1-ph", Termination.TIMEOUT, msg), ("real", Termination.TIMEOUT, msg)}
    assert h.p.root.allocated.is_zero() and h.p.root.pending.is_zero()


def test_soft_timeout_resumes_then_schedules_real_asks_normally():
    h = Harness()
    h.node("n1", memory=25)
    _gang(h, style="Soft")
    h.ask("real", "app1", memory=10, vcore=1, task_group="tg", repeat=2)
    h.step()
    assert len(h.allocs_of("app1-ph")) == 2
    h.advance(15 * 60 * SECOND)  # default placeholder timeout (timers only)
    assert h.states("app1")[-2:] == ["Resuming", "Accepted"]
    assert [r.allocation_key for r in h.log.released_asks] == ["app1-ph"]
    assert len(_released(h, Termination.TIMEOUT)) == 2
    h.step(1)
    assert len(h.allocs_of("real")) == 2 and h.app_state("app1") in ("Starting", "Running")
    assert h.p.apps["app1"].ph_data["tg"].timedout == 2


def test_started_app_timeout_releases_unused_placeholders():
    h = Harness()
    h.node("n1", memory=100)
    _gang(h, timeout_ms=1000)
    h.ask("real", "app1", memory=10, vcore=1, task_group="tg")
    h.step()
    h.step(1)
    assert h.app_state("app1") == "Running"
    h.step(SECOND)
    rel = _released(h, Termination.TIMEOUT)
    assert len(rel) == 2 and h.app_state("app1") == "Running"
    d = h.p.apps["app1"].ph_data["tg"]
    assert (d.count, d.replaced, d.timedout) == (3, 1, 2)


def test_leftover_placeholders_released_when_the_app_completes():
    h = Harness()
    h.node("n1", memory=100)
    _gang(h)
    h.ask("real", "app1", memory=10, vcore=1, task_group="tg")
    h.step()
    h.step(1)
    real = h.allocs_of("real")[0]
    h.do(ReleaseAlloc("app1", real.uuid, Termination.STOPPED_BY_RM))
    assert h.app_state("app1") == "Completing"
    h.step(30 * SECOND)
    rel = [r for r in _released(h, Termination.TIMEOUT)]
    assert len(rel) == 2 and {r.message for r in rel} == {"releasing placeholders on app complete"}
    assert h.app_state("app1") == "Completed" and h.p.root.allocated.is_zero()


def test_placeholder_data_in_the_app_view():
    from partition_worker.core import dao
    h = Harness()
    h.node("n1", memory=100)
    _gang(h)
    h.step()
    view = dao.app_dao(h.p.apps["app1"], "default")
    assert view["placeholderData"] == [{"taskGroupName": "tg", "count": 3,
                                        "minResource": {"memory": 10, "vcore": 1},
                                        "replaced": 0, "timedout": 0}]


def test_real_ask_added_before_its_placeholders_is_rejected_when_too_big():
    h = Harness()
    h.node("n1", memory=100)
    h.do(AddApp("app1", "root.default", "alice", placeholder_ask=res(memory=20, vcore=2)))
    h.ask("early", "app1", memory=15, vcore=1, task_group="tg")  # size unknown yet: accepted
    h.ask("ph", "app1", memory=10, vcore=1, repeat=2, placeholder=True, task_group="tg")
    h.step()
    h.step(1)
    assert "larger than the placeholders of task group tg" in h.rejected_ask_reasons()["early"]
    assert not h.allocs_of("early") and len(h.allocs_of("ph")) == 2
    assert "early" not in h.p.apps["app1"].asks and h.p.root.pending.is_zero()


def _creation_tagged(h: Harness, created_s: int, style: str, timeout_ms: int) -> None:
    h.do(AddApp("app1", "root.default", "alice", placeholder_ask=res(memory=30, vcore=3),
                gang_style=style, execution_timeout_ms=timeout_ms,
                tags={"yunikorn.apache.org/creationTime": str(created_s)}))
    h.ask("app1-ph", "app1", memory=10, vcore=1, repeat=3, placeholder=True, task_group="tg")


def test_creation_time_tag_shortens_the_placeholder_timeout_of_a_readded_app():
    """An app re-added after a restart keeps the deadline it had: 60 s timeout, created 45 s ago."""
    h = Harness()
    h.node("n1", memory=25)  # 2 of 3 placeholders: the gang never completes
    _creation_tagged(h, h.now // SECOND - 45, "Hard", 60_000)
    h.step()
    assert len(h.allocs_of("app1-ph")) == 2
    h.step(14 * SECOND)
    assert h.app_state("app1") == "Accepted"
    h.step(1 * SECOND)  # 15 s after the first placeholder, 60 s after creation
    assert h.states("app1")[-2:] == ["Failing", "Failed"]


def test_creation_time_past_the_timeout_times_out_at_once_and_bad_tags_are_ignored():
    h = Harness()
    h.node("n1", memory=25)
    _creation_tagged(h, h.now // SECOND - 3600, "Soft", 60_000)  # created an hour ago
    h.step()
    h.step(SECOND // 100)
    assert h.states("app1")[-2:] == ["Resuming", "Accepted"]
    for tag in ("yesterday", str(h.now // SECOND + 3600)):  # not a number; in the future
        g = Harness()
        g.node("n1", memory=25)
        g.do(AddApp("app1", "root.default", "alice", placeholder_ask=res(memory=30, vcore=3),
                    gang_style="Hard", execution_timeout_ms=60_000,
                    tags={"yunikorn.apache.org/creationTime": tag}))
        g.ask("app1-ph", "app1", memory=10, vcore=1, repeat=3, placeholder=True, task_group="tg")
        g.step()
        g.step(59 * SECOND)
        assert g.app_state("app1") == "Accepted", tag
        g.step(SECOND)
        assert g.states("app1")[-1] == "Failed", tag


def test_the_shims_scheduling_policy_parameters_tag_sets_timeout_and_style_when_the_si_fields_do_not():
    h = Harness()
    h.node("n1", memory=25)
    h.do(AddApp("app1", "root.default", "alice", placeholder_ask=res(memory=30, vcore=3),
                tags={"yunikorn.apache.org/schedulingPolicyParameters":
                      "placeholderTimeoutInSeconds=20 gangSchedulingStyle=Hard"}))
    h.ask("app1-ph", "app1", memory=10, vcore=1, repeat=3, placeholder=True, task_group="tg")
    h.step()
    assert h.p.apps["app1"].gang_style == "Hard"
    h.step(19 * SECOND)
    assert h.app_state("app1") == "Accepted"
    h.step(SECOND)
    assert h.states("app1")[-1] == "Failed"
    # the SI fields win over the tag
    g = Harness()
    g.node("n1", memory=25)
    g.do(AddApp("app1", "root.default", "alice", placeholder_ask=res(memory=30, vcore=3),
                gang_style="Soft", execution_timeout_ms=5000,
                tags={"yunikorn.apache.org/schedulingPolicyParameters":
                      "placeholderTimeoutInSeconds=20 gangSchedulingStyle=Hard"}))
    g.ask("app1-ph", "app1", memory=10, vcore=1, repeat=3, placeholder=True, task_group="tg")
    g.step()
    g.step(5 * SECOND)
    assert g.states("app1")[-2:] == ["Resuming", "Accepted"]
