"""YuniKorn 1.8-1.9 semantics through a real stack (``korral up``): the compatibility switch
(both ways), quota-change preemption after a config update, foreign allocations, the app
summary log line, the unchanged-checksum reload, and bad input refused naming the key."""

from __future__ import annotations

import grpc
import pytest

from common import si_pb2
from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.si_builders import allocation, app, ask, node, release_key, remove_app

BASE = """
partitions:
  - name: default
    placementrules: [{name: provided, create: false}]
    preemption: {quotapreemptionenabled: true}
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {name: default}
          - name: a
            resources: {max: {memory: %d}}
            properties: {quota.preemption.delay: 1s, application.unschedasks.backoff: "5"}
"""


def done(rm: SIRM) -> None:
    """Shut the RM down so its partition's worker is free for the next test (2 workers)."""
    rm.shutdown()
    rm.close()


def logs(stack, who: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in (stack.state_dir / "logs").glob(f"*{who}*"))


def started(stack, rm_id: str, n: si_pb2.NodeInfo, app_id: str, queue: str, user: str = "alice") -> SIRM:
    """A registered RM (the BASE config, max 100 on root.a) with node ``n`` and one accepted app."""
    rm = SIRM(stack.si_address, rm_id)
    rm.register(BASE % 100)
    rm.open()
    return rm.report(nodes=(n,), apps=(app(app_id, queue=queue, user=user),))


def allocations(rm: SIRM, n: int, timeout: float = 15) -> list:
    return rm.collect("allocation", "new", n, timeout)


@pytest.mark.parametrize("compat, placed", [("", False), ("1.9", True)])
def test_placement_fallback_follows_the_switch(module_stack, compat, placed):
    rm = SIRM(module_stack.si_address, f"rm-fallback-{compat or 'seeds'}")
    try:
        rm.register(BASE % 100, extra_config={"korral.compatibility": compat} if compat else {})
        rm.open()
        rm.apps(app("x", queue="root.nowhere"))
        r = rm.wait_for("application", lambda r: r.accepted or r.rejected)
        assert bool(r.accepted) is placed
        if not placed:
            assert "no placement rule matched" in r.rejected[0].reason
    finally:
        done(rm)


def test_an_unknown_switch_value_is_refused_naming_the_key(module_stack):
    rm = SIRM(module_stack.si_address, "rm-badswitch")
    with pytest.raises(grpc.RpcError) as info:
        rm.register(BASE % 100, extra_config={"korral.compatibility": "2.0"})
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "extraConfig korral.compatibility: unknown value '2.0'" in info.value.details()
    rm.close()


@pytest.mark.parametrize("bad, message", [
    ('application.unschedasks.backoff: "5"', 'application.unschedasks.backoff.delay: 0s'),
    ("quota.preemption.delay: 1s", "quota.preemption.delay: -1s"),
    ("quota.preemption.delay: 1s", "quota.preemption.dlay: 1s"),
])
def test_bad_new_keys_are_refused_naming_queue_and_key_and_the_old_config_stays(module_stack, bad, message):
    rm = SIRM(module_stack.si_address, "rm-badkeys")
    try:
        rm.register(BASE % 100)
        rm.open()
        with pytest.raises(grpc.RpcError) as info:
            rm.update_config((BASE % 100).replace(bad, message))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "queue root.a: property " + message.split(":")[0] in info.value.details()
        rm.apps(app("still", queue="root.a"))  # the old config is active
        assert rm.wait_for("application", lambda r: r.accepted or r.rejected).accepted
    finally:
        done(rm)


def test_a_lowered_max_is_enforced_by_quota_preemption_and_an_unchanged_reload_is_a_no_op(module_stack):
    rm = started(module_stack, "rm-quota", node("n1", memory=1000, vcore=100), "qa", "root.a")
    try:
        rm.asks(*[ask(f"q{i}", "qa", memory=10, vcore=1) for i in range(10)])
        allocations(rm, 10)
        rm.update_config(BASE % 60)
        preempted = rm.collect("allocation", "released", 4,
                               keep=lambda x: x.terminationType == si_pb2.PREEMPTED_BY_SCHEDULER)
        assert len(preempted) == 4
        assert preempted[0].message == "preempting allocations to enforce new max quota for queue : root.a"
        rm.update_config(BASE % 60)  # the same text again: the checksum matches
        wait_until(lambda: "rm-quota: configuration unchanged" in logs(module_stack, "rmproxy"), 10,
                   "the no-op reload logged by rmproxy")
    finally:
        done(rm)


def test_a_foreign_allocation_occupies_its_node(module_stack):
    n = node("n1", memory=100, vcore=10)
    n.existingAllocations.append(allocation("kube-proxy", "n1", app_id="", partition="", uuid="",
                                            tags={"foreign": "static"}, memory=80, vcore=1))
    rm = started(module_stack, "rm-foreign", n, "fa", "root.default")
    try:
        rm.asks(ask("big", "fa", memory=50, vcore=1), ask("fits", "fa", memory=20, vcore=1))
        assert [a.allocationKey for a in allocations(rm, 1)] == ["fits"]
        # the pod ends: a release without an application frees its room
        rm.releases(release_key("kube-proxy", app_id=""))
        assert [a.allocationKey for a in allocations(rm, 1)] == ["big"]
    finally:
        done(rm)


def test_a_finished_app_that_ran_writes_one_summary_line(module_stack):
    rm = started(module_stack, "rm-summary", node("n1", memory=100, vcore=10), "sum-app", "root.default", "dana")
    try:
        rm.asks(ask("s1", "sum-app", memory=10, vcore=1))
        allocations(rm, 1)
        rm.remove_apps(remove_app("sum-app"))
        line = wait_until(lambda: [x for x in logs(module_stack, "worker").splitlines()
                                   if "YK_APP_SUMMARY: {ApplicationID: sum-app," in x], 15, "the summary line")
        assert len(line) == 1 and "User: dana, Queue: root.default" in line[0] and "RmID: rm-summary" in line[0]
    finally:
        done(rm)
