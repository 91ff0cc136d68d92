"""Every YuniKorn path of REST_API.md answers the documented fields for a running, loaded stack
(the fields of today's YuniKorn are checked in tests/core/test_dao.py and test_yunikorn_110.py)."""

from __future__ import annotations


import pytest
import yaml

from tests.conftest import wait_until
from tests.rest.workload import Loaded

CLUSTER_COUNTS = {"totalApplications", "totalContainers", "totalNodes", "runningApplications",
                  "runningContainers", "activeNodes", "failedApplications", "pendingApplications",
                  "completedApplications", "failedContainers", "pendingContainers", "failedNodes"}
PARTITION_FIELDS = {"clusterId", "name", "state", "lastStateTransitionTime", "capacity", "nodeSortingPolicy",
                    "applications"}
QUEUE_FIELDS = {"queuename", "status", "pendingResource", "maxResource", "guaranteedResource",
                "allocatedResource", "isLeaf", "isManaged", "properties", "parent", "template", "children",
                "absUsedCapacity", "maxRunningApps", "runningApps", "currentPriority", "allocatingAcceptedApps"}
APP_FIELDS = {"applicationID", "usedResource", "maxUsedResource", "pendingResource", "partition", "queueName",
              "submissionTime", "finishedTime", "requests", "allocations", "applicationState", "user",
              "rejectedMessage", "stateLog", "placeholderData", "hasReserved", "reservations",
              "maxRequestPriority", "minAllocationPriority", "lastStateChangeTime"}
ASK_FIELDS = {"allocationKey", "allocationTags", "requestTime", "resource", "pendingCount", "priority",
              "requiredNodeId", "applicationId", "partition", "placeholder", "placeholderTimeout",
              "taskGroupName", "allocationLog", "triggeredPreemption"}
ALLOC_FIELDS = {"allocationKey", "allocationTags", "requestTime", "allocationTime", "allocationDelay", "uuid",
                "resource", "priority", "nodeId", "applicationId", "partition", "placeholder", "placeholderUsed",
                "taskGroupName", "preempted", "queueName"}
NODE_FIELDS = {"nodeID", "hostName", "rackName", "capacity", "allocated", "occupied", "available", "utilized",
               "allocations", "schedulable", "isReserved", "reservations", "partition"}


def ok_json(loaded: Loaded, path: str, **kw):
    r = loaded.get(path, **kw)
    assert r.status == 200, (path, r.status, r.body[:500])
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    assert r.headers.get("Access-Control-Allow-Origin") == "*"
    return r.json()


def is_resource(r) -> bool:
    return isinstance(r, dict) and all(isinstance(k, str) and isinstance(v, int) for k, v in r.items())


def walk(q: dict):
    yield q
    for c in q["children"]:
        yield from walk(c)


def test_clusters_list_one_entry_per_partition_with_counts_as_strings(loaded: Loaded) -> None:
    clusters = ok_json(loaded, "/ws/v1/clusters")
    assert sorted(c["partition"] for c in clusters) == ["default", "gpu"]
    for c in clusters:
        assert CLUSTER_COUNTS | {"startTime", "rmBuildInformation", "partition", "clusterName"} <= set(c)
        assert all(isinstance(c[k], str) and c[k].isdigit() for k in CLUSTER_COUNTS)
        assert c["clusterName"] == "rm-rest" and isinstance(c["startTime"], int)
        assert c["rmBuildInformation"] and c["rmBuildInformation"][0]["rmId"] == "rm-rest"
    default = next(c for c in clusters if c["partition"] == "default")
    assert (default["totalNodes"], default["totalContainers"], default["totalApplications"]) == ("2", "3", "2")
    assert default["pendingContainers"] == "1"


def test_partitions_carry_capacity_utilisation_and_app_counts(loaded: Loaded) -> None:
    parts = {p["name"]: p for p in ok_json(loaded, "/ws/v1/partitions")}
    assert set(parts) == {"default", "gpu"}
    d = parts["default"]
    assert PARTITION_FIELDS <= set(d)
    assert d["state"] == "Active" and d["clusterId"] == "rm-rest"
    assert d["capacity"]["capacity"] == {"memory": 2000, "vcore": 2000}
    assert d["capacity"]["usedCapacity"] == {"memory": 250, "vcore": 25}
    assert d["capacity"]["utilization"] == {"memory": 12, "vcore": 1}
    # app-a1 holds two allocations (Running); app-b1 one (Starting, as YuniKorn's stateaware start)
    assert d["applications"] == {"total": 2, "Running": 1, "Starting": 1}
    assert {"type", "resourceWeights"} <= set(d["nodeSortingPolicy"])
    assert parts["gpu"]["capacity"]["capacity"]["gpu"] == 4


def test_queue_tree_has_every_field_and_the_configured_resources(loaded: Loaded) -> None:
    root = ok_json(loaded, "/ws/v1/partition/default/queues")
    queues = {q["queuename"]: q for q in walk(root)}
    assert set(queues) == {"root", "root.a", "root.b"}
    for q in queues.values():
        assert QUEUE_FIELDS <= set(q), QUEUE_FIELDS - set(q)
        for k in ("pendingResource", "allocatedResource", "absUsedCapacity"):
            assert is_resource(q[k]), (q["queuename"], k)
        assert isinstance(q["properties"], dict) and isinstance(q["currentPriority"], int)
    assert root["partition"] == "default" and queues["root.a"]["partition"] == ""  # root only, as YuniKorn
    a = queues["root.a"]
    assert a["guaranteedResource"] == {"memory": 400} and a["maxResource"] == {"memory": 1000}
    assert a["allocatedResource"] == {"memory": 200, "vcore": 20}
    assert a["pendingResource"] == {"memory": 900, "vcore": 10}
    assert a["absUsedCapacity"]["memory"] == 20  # 200 of its max 1000
    assert a["isLeaf"] and a["isManaged"] and a["parent"] == "root" and a["runningApps"] == 1
    assert a["properties"]["application.sort.policy"] == "fifo"


def test_one_queue_by_path(loaded: Loaded) -> None:
    q = ok_json(loaded, "/ws/v1/partition/default/queue/root.b")
    assert q["queuename"] == "root.b" and q["allocatedResource"] == {"memory": 50, "vcore": 5}


def check_app(app: dict) -> None:
    assert APP_FIELDS <= set(app), APP_FIELDS - set(app)
    for r in app["requests"]:
        assert ASK_FIELDS <= set(r), ASK_FIELDS - set(r)
        assert isinstance(r["priority"], str) and r["pendingCount"] > 0
    for al in app["allocations"]:
        assert ALLOC_FIELDS <= set(al), ALLOC_FIELDS - set(al)
        assert isinstance(al["priority"], str) and al["queueName"] == app["queueName"]
    assert app["stateLog"] and {"time", "applicationState"} <= set(app["stateLog"][-1])


def test_applications_of_a_queue(loaded: Loaded) -> None:
    apps = ok_json(loaded, "/ws/v1/partition/default/queue/root.a/applications")
    assert [a["applicationID"] for a in apps] == ["app-a1"]
    app = apps[0]
    check_app(app)
    assert app["applicationState"] == "Running" and app["user"] == "alice" and app["partition"] == "default"
    assert sorted(al["allocationKey"] for al in app["allocations"]) == ["a1-k1", "a1-k2"]
    assert [r["allocationKey"] for r in app["requests"]] == ["a1-huge"]  # only asks still pending
    assert app["usedResource"] == {"memory": 200, "vcore": 20}
    assert isinstance(app["submissionTime"], int) and app["submissionTime"] > 1_600_000_000 * 10**9


def test_an_empty_queue_answers_an_empty_list(loaded: Loaded) -> None:
    assert ok_json(loaded, "/ws/v1/partition/gpu/queue/root/applications") == []


@pytest.mark.parametrize("path", [
    "/ws/v1/partition/default/queue/root.b/application/app-b1",
    "/ws/v1/partition/default/application/app-b1",
], ids=["in its queue", "in any queue"])
def test_one_application(loaded: Loaded, path: str) -> None:
    app = ok_json(loaded, path)
    check_app(app)
    assert app["applicationID"] == "app-b1" and app["queueName"] == "root.b" and app["user"] == "bob"


def test_all_applications_of_a_partition_stream_and_page(loaded: Loaded) -> None:
    apps = ok_json(loaded, "/ws/v1/partition/default/applications")
    assert sorted(a["applicationID"] for a in apps) == ["app-a1", "app-b1"]
    first = ok_json(loaded, "/ws/v1/partition/default/applications?offset=0&limit=1")
    second = ok_json(loaded, "/ws/v1/partition/default/applications?offset=1&limit=1")
    assert len(first) == len(second) == 1
    assert {first[0]["applicationID"], second[0]["applicationID"]} == {"app-a1", "app-b1"}


def test_nodes_with_capacity_allocations_and_utilisation(loaded: Loaded) -> None:
    nodes = {n["nodeID"]: n for n in ok_json(loaded, "/ws/v1/partition/default/nodes")}
    assert set(nodes) == {"n1", "n2"}
    for n in nodes.values():
        assert NODE_FIELDS <= set(n), NODE_FIELDS - set(n)
        assert n["partition"] == "default" and n["schedulable"] is True
        assert n["capacity"] == {"memory": 1000, "vcore": 1000}
        for k in ("allocated", "occupied", "available", "utilized"):
            assert is_resource(n[k])
        for al in n["allocations"]:
            assert ALLOC_FIELDS <= set(al) and al["nodeId"] == n["nodeID"]
    assert sum(len(n["allocations"]) for n in nodes.values()) == 3
    total = sum(n["allocated"].get("memory", 0) for n in nodes.values())
    assert total == 250
    gpu = ok_json(loaded, "/ws/v1/partition/gpu/node/g1")
    assert gpu["capacity"]["gpu"] == 4 and gpu["allocated"]["gpu"] == 1 and gpu["utilized"]["gpu"] == 25


def test_user_and_group_usage(loaded: Loaded) -> None:
    users = {u["userName"]: u for u in ok_json(loaded, "/ws/v1/partition/default/usage/users")}
    assert set(users) == {"alice", "bob"}
    alice = ok_json(loaded, "/ws/v1/partition/default/usage/user/alice")
    assert alice["groups"] == {"app-a1": "dev"}
    root = alice["queues"]
    assert root["queuePath"] == "root" and root["resourceUsage"]["memory"] == 200
    assert root["runningApplications"] == ["app-a1"]
    assert [c["queuePath"] for c in root["children"]] == ["root.a"]
    groups = {g["groupName"] for g in ok_json(loaded, "/ws/v1/partition/default/usage/groups")}
    assert groups == {"dev", "bob"}  # bob has no groups: his group is his user name
    dev = ok_json(loaded, "/ws/v1/partition/default/usage/group/dev")
    assert dev["applications"] == ["app-a1"] and dev["queues"]["queuePath"] == "root"


def test_healthcheck_is_healthy_with_yunikorn_and_stack_checks(loaded: Loaded) -> None:
    h = ok_json(loaded, "/ws/v1/scheduler/healthcheck")
    assert h["Healthy"] is True
    names = [c["Name"] for c in h["HealthChecks"]]
    for name in ("Scheduling errors", "Failed nodes", "Negative resources", "Consistency of data",
                 "Orphan allocation on node check", "Orphan allocation on app check",
                 "Partition workers", "Redis", "Broker link", "RM connections"):
        assert name in names
    for c in h["HealthChecks"]:
        assert set(c) == {"Name", "Succeeded", "Description", "DiagnosisMessage"}


def test_full_state_dump_holds_everything(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/fullstatedump")  # v1.2's path and keys
    assert r.status == 200 and b"\n  " in r.body  # pretty JSON
    d = r.json()
    for key in ("Timestamp", "Partitions", "Applications", "AppHistory", "Nodes", "ClusterInfo",
                "ContainerHistory", "Queues", "RMDiagnostics", "LogLevel"):
        assert key in d, key
    assert sorted(p["name"] for p in d["Partitions"]) == ["default", "gpu"]
    assert sorted(a["applicationID"] for a in d["Applications"]) == ["app-a1", "app-b1", "app-g1"]
    assert {n["partitionName"]: len(n["nodesInfo"]) for n in d["Nodes"]} == {"default": 2, "gpu": 1}
    assert d["RMDiagnostics"]["rm-rest"]["config"].strip().startswith("partitions:")
    assert len(d["Stack"]["workers"]) == 3 and not d["Errors"]
    allocs = sum(len(n["allocations"]) for p in d["Nodes"] for n in p["nodesInfo"])
    assert allocs == sum(len(a["allocations"]) for a in d["Applications"]) == 4


def test_full_state_dump_headers_and_head(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/fullstatedump")
    assert r.headers["Content-Type"] == "application/json; charset=UTF-8"
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert int(r.headers["Content-Length"]) == len(r.body) and "Transfer-Encoding" not in r.headers
    head = loaded.get("/ws/v1/fullstatedump", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert head.headers["Content-Type"] == "application/json; charset=UTF-8"


def test_config_as_yaml_with_checksum_and_as_json(loaded: Loaded) -> None:
    r = loaded.get("/ws/v1/config")
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/x-yaml")
    doc = yaml.safe_load(r.body)
    assert [p["name"] for p in doc["partitions"]] == ["default", "gpu"]
    assert len(doc["checksum"]) == 64 and doc["checksum"].isupper() is not False
    j = loaded.get("/ws/v1/config", headers={"Accept": "application/json"}).json()
    assert j["checksum"] == doc["checksum"] and j["partitions"] == doc["partitions"]


@pytest.mark.parametrize("text,allowed", [
    ("partitions:\n  - name: default\n    queues:\n      - name: root\n", True),
    ("", True),
    ("partitions:\n  - name: default\n    queues:\n      - name: root\n        bogus: 1\n", False),
    ("partitions: [", False),
], ids=["a valid config", "empty is the default", "an unknown key", "broken yaml"])
def test_validate_conf(loaded: Loaded, text: str, allowed: bool) -> None:
    r = loaded.get("/ws/v1/validate-conf", method="POST", data=text.encode())
    assert r.status == 200
    body = r.json()
    assert body["allowed"] is allowed and isinstance(body["reason"], str)
    if not allowed:
        assert body["reason"]


def test_events_batch_lists_recent_records(loaded: Loaded) -> None:
    ev = ok_json(loaded, "/ws/v1/events/batch")
    assert {"InstanceUUID", "LowestID", "HighestID", "EventRecords"} <= set(ev)
    recs = ev["EventRecords"]
    assert any(e["type"] == 3 and e["objectID"] == "n1" for e in recs)  # NODE, a number as in YuniKorn
    assert all({"type", "objectID", "timestampNano", "resource"} <= set(e) for e in recs)
    assert [e["timestampNano"] for e in recs] == sorted(e["timestampNano"] for e in recs)
    assert len(ok_json(loaded, "/ws/v1/events/batch?count=2")["EventRecords"]) == 2


def test_history_answers_lists_with_totals_as_strings(loaded: Loaded) -> None:
    # the first sample is taken 5 s after rmproxy starts
    apps = wait_until(lambda: ok_json(loaded, "/ws/v1/history/apps"), 10, "a history sample", interval=0.2)
    assert int(apps[0]["totalApplications"]) >= 0
    containers = ok_json(loaded, "/ws/v1/history/containers")
    assert isinstance(apps, list) and isinstance(containers, list)
    for rec in apps:
        assert isinstance(rec["timestamp"], int) and isinstance(rec["totalApplications"], str)
    for rec in containers:
        assert isinstance(rec["totalContainers"], str)


def test_log_level_get_and_set(loaded: Loaded) -> None:
    before = loaded.get("/ws/v1/loglevel").body.decode()
    assert before in ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")
    assert loaded.get("/ws/v1/loglevel/debug", method="PUT").status == 200
    assert loaded.get("/ws/v1/loglevel").body.decode() == "DEBUG"
    assert loaded.get(f"/ws/v1/loglevel/{before.lower()}", method="PUT").status == 200


def test_korral_processes_view(loaded: Loaded) -> None:
    v = ok_json(loaded, "/ws/v1/korral/processes")
    assert len(v["workers"]) == 3
    owners = {w["partition"]: w for w in v["workers"] if w["partition"]}
    assert set(owners) == {"rm-rest/default", "rm-rest/gpu"}
    assert all(isinstance(w["epoch"], int) for w in owners.values())
    assert [r["rmID"] for r in v["rms"]] == ["rm-rest"] and v["rms"][0]["state"] == "Running"
    assert v["rmproxy"]["brokerConnected"] is True
    assert all(isinstance(w["heartbeatAge"], (int, float)) for w in v["workers"])
    me = [p for p in v["rmproxies"] if p["self"]]
    assert len(me) == 1 and me[0]["rms"] == ["rm-rest"] and isinstance(me[0]["heartbeatAge"], (int, float))


def test_dashboard_feeds_heatmap_and_application_summaries(loaded: Loaded) -> None:
    heat = ok_json(loaded, "/ws/v1/korral/partition/default/heatmap")
    assert heat["total"] == 2 and sorted(r[0] for r in heat["items"]) == ["n1", "n2"]
    assert all(isinstance(r[1], int) and r[2] is True and r[3] is True for r in heat["items"])
    apps = ok_json(loaded, "/ws/v1/korral/partition/default/applications?limit=1")
    assert apps["total"] == 2 and len(apps["items"]) == 1
    row = ok_json(loaded, "/ws/v1/korral/partition/default/applications")["items"]
    a1 = next(a for a in row if a["applicationID"] == "app-a1")
    assert (a1["allocations"], a1["pendingCount"], a1["applicationState"]) == (2, 1, "Running")
