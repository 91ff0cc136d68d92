"""Snapshot views carry YuniKorn's REST field names (REST_API.md)."""

import json

from partition_worker.core import ReleaseAlloc
from partition_worker.core.dao import partition_snapshot
from tests.core.harness import Harness, partition_config, q

QUEUE_KEYS = {"queuename", "status", "pendingResource", "maxResource", "guaranteedResource",
              "allocatedResource", "isLeaf", "isManaged", "properties", "parent", "template",
              "children", "absUsedCapacity", "maxRunningApps", "runningApps", "currentPriority",
              "allocatingAcceptedApps"}
APP_KEYS = {"applicationID", "usedResource", "maxUsedResource", "pendingResource", "partition",
            "queueName", "submissionTime", "finishedTime", "requests", "allocations",
            "applicationState", "user", "rejectedMessage", "stateLog", "placeholderData",
            "hasReserved", "reservations", "maxRequestPriority", "minAllocationPriority",
            "lastStateChangeTime"}
ASK_KEYS = {"allocationKey", "allocationTags", "requestTime", "resource", "pendingCount", "priority",
            "requiredNodeId", "applicationId", "partition", "placeholder", "placeholderTimeout",
            "taskGroupName", "allocationLog", "triggeredPreemption"}
ALLOC_KEYS = {"allocationKey", "allocationTags", "requestTime", "allocationTime", "allocationDelay",
              "uuid", "resource", "priority", "nodeId", "applicationId", "partition", "placeholder",
              "placeholderUsed", "taskGroupName", "preempted", "queueName"}
NODE_KEYS = {"nodeID", "hostName", "rackName", "capacity", "allocated", "occupied", "available",
             "utilized", "allocations", "schedulable", "isReserved", "reservations", "partition"}


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


def test_max_used_keeps_the_peak_after_a_release() -> None:
    h, _ = snapshot()
    h.do(ReleaseAlloc("app1", h.allocs_of("k1")[0].uuid))
    (app,) = partition_snapshot(h.p, "default", "rm1")["applications"]
    assert app["usedResource"] == {"memory": 20, "vcore": 1}
    assert app["maxUsedResource"] == {"memory": 40, "vcore": 2}


def test_usage_is_tracked_per_user_and_first_group_along_the_queue_path() -> None:
    _, snap = snapshot()
    (user,) = snap["usage"]["users"]
    assert user["userName"] == "alice" and user["groups"] == {"app1": "devs"}
    assert user["queues"]["queuePath"] == "root"
    assert user["queues"]["resourceUsage"] == {"Resources": {"memory": 40, "vcore": 2}}
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
