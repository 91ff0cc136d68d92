"""The config what-if (``korral config apply --dry-run``): what a new config would do to the live
partition, computed with the core's own queue, limit and placement logic, changing nothing."""

from __future__ import annotations

from common.config import load_config
from partition_worker.core import whatif
from tests.core.harness import harness_from_yaml
from tests.core.whatif_scenario import LIVE, NEW

def loaded():
    h = harness_from_yaml(LIVE)
    h.node("n1", memory=10_000, vcore=10_000)
    h.app("app1", queue="root.a", user="alice").ask("k1", "app1", memory=100, repeat=3)
    h.app("app4", queue="root.a", user="alice").ask("k4", "app4", memory=10)
    h.app("app2", queue="root.b", user="bob").ask("k2", "app2", memory=50)
    h.app("app3", queue="root.b", user="carol").ask("k3", "app3", memory=5)
    h.step()
    assert len(h.log.allocations) == 6
    return h


def test_the_what_if_names_queues_limits_and_placements_the_new_config_changes():
    h = loaded()
    before = (h.p.queues.find("root.a").max, h.p.queues.find("root.b").state, h.p.limits.active)
    got = whatif.config_whatif(h.p, load_config(NEW).partitions[0])
    assert got["queues"] == {"draining": [{"queue": "root.b", "applications": 2, "allocated": {"memory": 55, "vcore": 2}}],
                             "removed": ["root.c"], "added": ["root.d"]}
    assert got["overMax"] == [{"queue": "root.a", "max": {"memory": 200}, "allocated": {"memory": 310, "vcore": 4},
                               "overBy": {"memory": 110}, "guaranteed": {"memory": 100},
                               "quotaPreemption": {"enabled": False, "reason":
                                                   "preemption.quotapreemptionenabled is off for the partition"}}]
    (limit,) = got["limits"]
    assert (limit["queue"], limit["user"], limit["overBy"], limit["runningApplications"], limit["applications"]) == \
        ("root.a", "alice", {"memory": 60}, 2, ["app1", "app4"])
    placement = got["placement"]
    assert placement["unchanged"] == 2  # app1, app4 stay in root.a
    assert placement["moved"] == [{"applicationID": "app2", "user": "bob", "queue": "root.b", "wouldBe": "root.d"}]
    (rejected,) = placement["rejected"]
    # root.b drains: the provided rule cannot use it, and no other rule matches carol
    assert rejected == {"applicationID": "app3", "user": "carol", "queue": "root.b",
                        "reason": "failed to place application app3: application rejected: no placement rule matched"}
    # nothing changed in the live partition
    assert (h.p.queues.find("root.a").max, h.p.queues.find("root.b").state, h.p.limits.active) == before


def test_a_config_the_partition_would_refuse_is_reported_refused():
    h = loaded()
    bad = load_config(NEW).partitions[0]
    bad = type(bad)(**{**{f: getattr(bad, f) for f in bad.__dataclass_fields__},
                       "nodesortpolicy": type(bad.nodesortpolicy)(type="sideways")})
    got = whatif.config_whatif(h.p, bad)
    assert got["action"] == "update" and "sideways" in got["refused"] and "queues" not in got


def test_a_partition_left_out_of_the_config_would_fail_its_apps():
    h = loaded()
    assert whatif.removal_whatif(h.p) == {"action": "remove", "applications": 4,
                                          "failedApplications": ["app1", "app2", "app3", "app4"],
                                          "allocations": 6, "nodes": 1}


def test_the_what_if_says_what_quota_preemption_would_take_and_takes_nothing():
    h = loaded()
    new = NEW.replace("    placementrules:", "    preemption: {quotapreemptionenabled: true}\n    placementrules:", 1)
    new = new.replace("resources: {guaranteed: {memory: 100}, max: {memory: 200}}",
                      "resources: {guaranteed: {memory: 100}, max: {memory: 200}}\n"
                      "            properties: {quota.preemption.delay: 30s}")
    allocations = dict(h.p.allocations)
    (over,) = whatif.config_whatif(h.p, load_config(new).partitions[0])["overMax"]
    qp = over["quotaPreemption"]
    # 110 over the max, all of it above the guarantee; smaller shares of the max go first: app4's
    # 10, then one of app1's 100s (YuniKorn never takes more than the excess)
    assert (qp["enabled"], qp["delay"], qp["preemptable"], qp["victimCount"]) == (True, "30s", {"memory": 110}, 2)
    assert [(v["applicationID"], v["resource"]["memory"]) for v in qp["victims"]] == [("app4", 10), ("app1", 100)]
    assert all(v["queue"] == "root.a" for v in qp["victims"])
    assert dict(h.p.allocations) == allocations and not h.log.released  # nothing preempted


def test_a_queue_without_a_quota_preemption_delay_is_reported_as_never_preempted():
    h = loaded()
    new = NEW.replace("    placementrules:", "    preemption: {quotapreemptionenabled: true}\n    placementrules:", 1)
    (over,) = whatif.config_whatif(h.p, load_config(new).partitions[0])["overMax"]
    assert over["quotaPreemption"] == {"enabled": False, "reason": "no quota.preemption.delay on the queue (0: never)"}
