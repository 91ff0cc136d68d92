"""Snapshot views carry YuniKorn 1.9's REST field names (``pkg/webservice/dao``), every one of
them present (Korral does not omit empty fields), plus v1.2's fields YuniKorn dropped."""

import json
from dataclasses import replace

from common.compat import Compat
from common.config.model import FilterConfig, PlacementRuleConfig, PreemptionConfig
from common.constants import TAG_REQUIRED_NODE
from partition_worker.core import CoreSettings, ReleaseAlloc
from partition_worker.core.commands import AddForeign
from partition_worker.core.dao import (node_utilisation, partition_snapshot, placement_rules_dao,
                                       queue_dao, utilisation_bucket)
from tests.core.harness import SECOND, Harness, partition_config, q, res

# YuniKorn 1.9's keys (dao/*.go), then the v1.2 keys Korral still sends
QUEUE_KEYS = {"queuename", "status", "partition", "pendingResource", "maxResource", "guaranteedResource",
              "allocatedResource", "preemptingResource", "headroom", "isLeaf", "isManaged", "properties",
              "parent", "template", "children", "childNames", "absUsedCapacity", "maxRunningApps",
              "runningApps", "currentPriority", "allocatingAcceptedApps", "sortingPolicy", "prioritySorting",
              "preemptionEnabled", "isPreemptionFence", "preemptionDelay", "quotaPreemptionDelay",
              "isPriorityFence", "priorityOffset", "isQuotaPreemptionRunning", "quotaPreemptionStartTime",
              "unschedAskBackoff", "askBackoffDelay"}
APP_KEYS = {"applicationID", "usedResource", "maxUsedResource", "pendingResource", "partition",
            "queueName", "submissionTime", "finishedTime", "requests", "allocations",
            "applicationState", "user", "groups", "rejectedMessage", "stateLog", "placeholderData",
            "hasReserved", "reservations", "maxRequestPriority", "startTime", "resourceHistory",
            "backoffDeadline"} | {"minAllocationPriority", "lastStateChangeTime"}
ASK_KEYS = {"allocationKey", "allocationTags", "requestTime", "resource", "priority", "requiredNodeId",
            "applicationId", "placeholder", "taskGroupName", "allocationLog", "triggeredPreemption",
            "originator", "schedulingAttempted", "triggeredScaleUp"} | {"pendingCount", "partition",
                                                                        "placeholderTimeout"}
ALLOC_KEYS = {"allocationKey", "allocationTags", "requestTime", "allocationTime", "allocationDelay",
              "resource", "priority", "nodeId", "applicationId", "placeholder", "placeholderUsed",
              "taskGroupName", "preempted", "originator"} | {"uuid", "partition", "queueName"}
FOREIGN_KEYS = {"allocationKey", "allocationTags", "allocationTime", "resource", "priority", "nodeId",
                "preemptable"}
NODE_KEYS = {"nodeID", "hostName", "rackName", "attributes", "capacity", "allocated", "occupied", "available",
             "utilized", "allocations", "foreignAllocations", "schedulable", "isReserved",
             "reservations"} | {"partition"}


def snapshot() -> tuple[Harness, dict]:
    h = Harness(partition_config(q("root", q("a", max={"memory": 100}), submitacl="*")))
    h.node("n1", memory=1000, vcore=100, attrs={"si/hostname": "host1"})
    h.app("app1", queue="root.a", groups=("devs",)).ask("k1", "app1", memory=20, repeat=2)
    h.ask("waiting", "app1", memory=500)
    h.step()
    return h, json.loads(json.dumps(partition_snapshot(h.p, "default", "rm1")))


def test_queue_app_ask_allocation_and_node_views_have_the_rest_fields() -> None:
    _, snap = snapshot()
    root = snap["queues"]
    assert QUEUE_KEYS <= set(root) and root["partition"] == "default"
    (a,) = root["children"]
    assert QUEUE_KEYS <= set(a) and a["partition"] == ""  # YuniKorn: the root's only
    assert a["queuename"] == "root.a" and a["allocatedResource"] == {"memory": 40, "vcore": 2}
    assert a["absUsedCapacity"] == {"memory": 40}
    (app,) = snap["applications"]
    assert APP_KEYS <= set(app)
    assert [s["applicationState"] for s in app["stateLog"]] == ["Accepted", "Starting", "Running"]
    (req,) = app["requests"]  # only asks still pending
    assert ASK_KEYS <= set(req) and req["allocationKey"] == "waiting" and req["priority"] == "0"
    assert ALLOC_KEYS <= set(app["allocations"][0])
    (node,) = snap["nodes"]
    assert NODE_KEYS <= set(node) and node["hostName"] == "host1"
    assert node["utilized"] == {"memory": 4, "vcore": 2}
    assert node["attributes"] == {"si/hostname": "host1"} and node["foreignAllocations"] == []


def test_max_used_keeps_the_peak_after_a_release() -> None:
    h, _ = snapshot()
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid))
    (app,) = partition_snapshot(h.p, "default", "rm1")["applications"]
    assert app["usedResource"] == {"memory": 20, "vcore": 1}
    assert app["maxUsedResource"] == {"memory": 40, "vcore": 2}


def test_max_used_follows_usage_past_the_old_peak_after_a_release() -> None:
    h, _ = snapshot()
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid))
    app = h.p.apps["app1"]
    for _ in range(3):  # each add beyond the old peak moves the peak with it
        app.add_allocated(res(memory=20, vcore=1))
    assert app.max_used == app.allocated == res(memory=80, vcore=4)
    assert app.max_used is app.allocated  # back on the fast path: no new peak object per allocation
    app.add_allocated(res(memory=20, vcore=1))
    assert app.max_used == res(memory=100, vcore=5)


def test_usage_is_tracked_per_user_and_first_group_along_the_queue_path() -> None:
    _, snap = snapshot()
    (user,) = snap["usage"]["users"]
    assert user["userName"] == "alice" and user["groups"] == {"app1": "devs"}
    assert user["queues"]["queuePath"] == "root"
    assert user["queues"]["resourceUsage"] == {"memory": 40, "vcore": 2}  # flat since YuniKorn 1.4
    (child,) = user["queues"]["children"]
    assert child["queuePath"] == "root.a" and child["runningApplications"] == ["app1"]
    (group,) = snap["usage"]["groups"]
    assert group["groupName"] == "devs" and group["applications"] == ["app1"]


def test_partition_summary_counts() -> None:
    _, snap = snapshot()
    part = snap["partition"]
    assert part["applications"] == {"total": 1, "Running": 1}
    assert (part["totalNodes"], part["totalContainers"], part["pendingContainers"]) == (1, 2, 1)
    assert part["capacity"]["utilization"] == {"memory": 4, "vcore": 2}
    assert part["preemptionEnabled"] is False and part["quotaPreemptionEnabled"] is False


def test_queue_fields_of_yunikorn_1_7_follow_the_properties() -> None:
    h = Harness(partition_config(q("root", q("a", props={"preemption.policy": "fence", "preemption.delay": "90s",
                                                          "priority.policy": "fence", "priority.offset": "5",
                                                          "quota.preemption.delay": "2m",
                                                          "application.sort.policy": "fair"}),
                                   q("b", props={"preemption.policy": "disabled",
                                                 "application.sort.priority": "disabled"}), submitacl="*")))
    root = json.loads(json.dumps(partition_snapshot(h.p, "default", "rm1")))["queues"]
    a, b = root["children"]
    assert root["childNames"] == ["root.a", "root.b"] and a["childNames"] == []
    assert (a["sortingPolicy"], a["prioritySorting"], a["preemptionEnabled"], a["isPreemptionFence"]) == \
        ("fair", True, True, True)
    assert (a["preemptionDelay"], a["quotaPreemptionDelay"], a["isPriorityFence"], a["priorityOffset"]) == \
        ("1m30s", "2m0s", True, 5)
    assert (b["sortingPolicy"], b["prioritySorting"], b["preemptionEnabled"], b["isPreemptionFence"]) == \
        ("fifo", False, False, False)
    assert (b["preemptionDelay"], b["quotaPreemptionDelay"]) == ("30s", "0s")  # the defaults
    assert root["sortingPolicy"] == "fair"  # parents sort their children fairly


def test_quota_preemption_and_ask_backoff_fields_in_yunikorns_shape() -> None:
    """yunikorn-site's queue example: ``isQuotaPreemptionRunning`` a bool,
    ``quotaPreemptionStartTime`` nanoseconds, ``unschedAskBackoff`` a count, ``askBackoffDelay``
    a Go duration."""
    def cfg(a_max: int):
        return replace(partition_config(q("root", q("a", max={"memory": a_max}, props={
            "quota.preemption.delay": "1h", "application.unschedasks.backoff": "12"}), q("b", props={
                "application.unschedasks.backoff.delay": "45s"}), submitacl="*")),
            preemption=PreemptionConfig(quotapreemptionenabled=True))

    h = Harness(cfg(100))
    h.node("n1").app("app1", queue="root.a").ask("k1", "app1", memory=60, repeat=2)
    h.step()
    h.p.update_config(cfg(100), h.now)
    a, b = queue_dao(h.p.root, h.p.settings.preemption_delay_ns)["children"]
    assert (a["isQuotaPreemptionRunning"], a["quotaPreemptionStartTime"]) == (False, 0)  # within its max
    assert (a["unschedAskBackoff"], a["askBackoffDelay"], b["unschedAskBackoff"], b["askBackoffDelay"]) == \
        (12, "30s", 0, "45s")  # 30s: YuniKorn's default delay
    h.p.update_config(cfg(100 // 2), h.now)  # now over its max: enforcement armed for an hour on
    a = queue_dao(h.p.root, h.p.settings.preemption_delay_ns)["children"][0]
    assert (a["isQuotaPreemptionRunning"], a["quotaPreemptionStartTime"]) == (False, h.now + 3600 * SECOND)
    h.step(3600 * SECOND)  # enforced within one step, disarmed
    a = queue_dao(h.p.root, h.p.settings.preemption_delay_ns)["children"][0]
    assert (a["isQuotaPreemptionRunning"], a["quotaPreemptionStartTime"]) == (False, 0)
    assert json.loads(json.dumps(a))["quotaPreemptionStartTime"] == 0


def test_node_capacity_leaves_out_zero_valued_types_from_compatibility_1_9() -> None:
    views = {}
    for version in ((1, 8), (1, 9)):
        h = Harness(partition_config(), settings=CoreSettings(compat=Compat(version)))
        h.node("n1", memory=100, vcore=10, gpu=0, pods=0)
        h.app("app1").ask("k1", "app1", memory=100, vcore=1)
        h.step()
        (views[version],) = partition_snapshot(h.p, "default", "rm1")["nodes"]
    old, new = views[(1, 8)], views[(1, 9)]
    assert old["capacity"] == {"memory": 100, "vcore": 10, "gpu": 0, "pods": 0}
    assert old["available"] == {"memory": 0, "vcore": 9, "gpu": 0, "pods": 0}
    assert new["capacity"] == {"memory": 100, "vcore": 10}
    assert new["available"] == {"memory": 0, "vcore": 9}  # a type used up stays, at 0
    assert new["utilized"] == old["utilized"] == {"memory": 100, "vcore": 10}


def test_headroom_is_max_minus_allocated_capped_by_every_ancestor() -> None:
    h = Harness(partition_config(q("root", q("p", q("a", max={"memory": 300, "gpu": 2}), q("b"),
                                               max={"memory": 500, "vcore": 50}), submitacl="*")))
    h.node("n1", memory=1000, vcore=100)
    h.app("app1", queue="root.p.a").ask("k1", "app1", memory=100, vcore=10)
    h.app("app2", queue="root.p.b").ask("k2", "app2", memory=250, vcore=20)
    h.step()
    root = queue_dao(h.p.root, h.p.settings.preemption_delay_ns)
    (p,) = root["children"]
    a, b = p["children"]
    assert root["headroom"] == {"memory": 650, "vcore": 70}  # the partition's size - allocated
    assert p["headroom"] == {"memory": 150, "vcore": 20}  # 500 - 350, 50 - 30
    assert a["headroom"] == {"memory": 150, "vcore": 20, "gpu": 2}  # 300 - 100 capped by p; gpu: a's own
    assert b["headroom"] == p["headroom"]  # no max of its own


def test_app_start_time_is_when_it_first_ran_in_milliseconds() -> None:
    h, snap = snapshot()
    (app,) = snap["applications"]
    running = [t for t, s in h.p.apps["app1"].state_log if s == "Running"][0]
    assert app["startTime"] == running // 1_000_000 > 0
    assert app["resourceHistory"] == {} and app["backoffDeadline"] is None


def test_backoff_deadline_and_resource_history_show_what_the_app_holds() -> None:
    h, _ = snapshot()
    app = h.p.apps["app1"]
    app.backoff_deadline_ns = 1_777_630_272_500_000_000
    app.resource_history = {"resourceUsage": {"UNKNOWN": {"memory": 4000}}, "preemptedResource": {}}
    (view,) = partition_snapshot(h.p, "default", "rm1")["applications"]
    assert view["backoffDeadline"] == "2026-05-01T10:11:12.5Z"  # Go's time.Time text, as YuniKorn's
    assert view["resourceHistory"] == {"resourceUsage": {"UNKNOWN": {"memory": 4000}}}


def test_the_rms_foreign_allocations_are_the_nodes_foreign_allocations() -> None:
    h = Harness(partition_config())
    h.node("n1", memory=1000, vcore=100)
    h.app("app1").ask("own", "app1", memory=10)
    h.do(AddForeign("static", "n1", res(memory=20), {"foreign": "static"}),
         AddForeign("other", "n1", res(memory=30), {"foreign": "default"}))
    h.step()
    (node,) = json.loads(json.dumps(partition_snapshot(h.p, "default", "rm1")))["nodes"]
    assert [al["allocationKey"] for al in node["allocations"]] == ["own"]
    foreign = {al["allocationKey"]: al for al in node["foreignAllocations"]}
    assert set(foreign) == {"static", "other"} and all(set(al) == FOREIGN_KEYS for al in foreign.values())
    assert (foreign["static"]["preemptable"], foreign["other"]["preemptable"]) == (False, True)


def test_node_utilisation_buckets_every_node_per_resource_type() -> None:
    h = Harness(partition_config())
    for n, mem in (("n0", 0), ("n10", 100), ("n11", 110), ("n100", 1000)):
        h.node(n, memory=1000, vcore=1000, gpu=4)
        if mem:
            h.app(f"app-{n}").ask(f"k-{n}", f"app-{n}", memory=mem, vcore=1, tags={TAG_REQUIRED_NODE: n})
    h.step()
    by_type = {u["type"]: u["utilization"] for u in node_utilisation(h.p)}
    assert list(by_type) == ["gpu", "memory", "vcore"]  # every type a node has, sorted
    mem = by_type["memory"]
    assert [b["bucketName"] for b in mem] == [f"{i * 10}-{i * 10 + 10}%" for i in range(10)]
    assert mem[0]["nodeNames"] == ["n0", "n10"] and mem[1]["nodeNames"] == ["n11"]
    assert mem[9] == {"bucketName": "90-100%", "numOfNodes": 1, "nodeNames": ["n100"]}
    assert by_type["gpu"][0]["numOfNodes"] == 4 and by_type["gpu"][5]["nodeNames"] == []


def test_utilisation_buckets_are_yunikorns_tenths() -> None:
    cases = {0: 0, 1: 0, 10: 0, 11: 1, 20: 1, 21: 2, 90: 8, 91: 9, 100: 9, 250: 9}
    assert {p: utilisation_bucket(p) for p in cases} == cases


def test_placement_rules_render_as_yunikorns_rule_list() -> None:
    rules = (PlacementRuleConfig("provided", create=True, parent=PlacementRuleConfig("fixed", value="root.users")),
             PlacementRuleConfig("tag", value="Namespace", filter=FilterConfig("deny", users=("bob", "eve"))),
             PlacementRuleConfig("user", filter=FilterConfig("allow", groups=("^dev.*$",))))
    h = Harness(partition_config(q("root", q("users", parent=True), submitacl="*"), rules=rules))
    assert placement_rules_dao(h.p) == [
        {"name": "provided", "parameters": {"create": "true"},
         "parentRule": {"name": "fixed", "parameters": {"queue": "root.users", "create": "false",
                                                        "qualified": "true"}}},
        {"name": "tag", "parameters": {"tagName": "namespace", "create": "false"},
         "filter": {"type": "deny", "userList": ["bob", "eve"], "groupList": [], "userExp": "", "groupExp": ""}},
        {"name": "user", "parameters": {"create": "false"},
         "filter": {"type": "allow", "userList": [], "groupList": [], "userExp": "", "groupExp": "^dev.*$"}}]


def test_without_rules_the_chain_is_provided_without_create() -> None:
    assert placement_rules_dao(Harness(partition_config()).p) == [{"name": "provided",
                                                                    "parameters": {"create": "false"}}]
