"""What YuniKorn 1.9 (and its site's docs) changed on the REST surface, through a real stack
(``korral up``) holding an RM of each kind: ``rm-seed`` speaks the seed's SI with no
compatibility set (v1.2), ``rm-v18`` speaks SI v1.8 with ``korral.compatibility: 1.9``. Each
check is made against the JSON shape or metric names upstream documents (docs/yunikorn-compat.md):
queue metrics a 1.8+ dashboard reads, the queue's quota preemption and ask backoff fields,
node capacity without zero-valued resources, ``rmBuildInformation``, ``validate-conf``'s
checksums, and user usage as a flat map."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from common.config import config_checksum
from tests.conftest import start_stack, stop_and_verify, wait_until
from tests.e2e.sirm import SIRM, V18
from tests.queues_yaml import open_root, queues_yaml
from tests.rest.workload import Http, http
from tests.si_builders import app, ask, node, v18

SEED_CONFIG = queues_yaml(open_root("""
- name: a
  resources:
    max: {memory: 1000}
"""))
V18_QUEUES = """
- name: a
  resources:
    max: {{memory: {max}}}
  properties:
    quota.preemption.delay: 1h
    application.unschedasks.backoff: "12"
- name: b
  properties:
    application.unschedasks.backoff.delay: 45s
"""
V18_PREEMPTION = "    preemption:\n      quotapreemptionenabled: true\n"
V18_EXTRA = {"korral.compatibility": "1.9"}
V18_BUILD = {"buildVersion": "1.9.0", "buildDate": "2026-07-29T10:00:00+0000", "arch": "amd64"}
SECONDS_NS = 1_000_000_000


def v18_config(a_max: int) -> str:
    return queues_yaml(open_root(V18_QUEUES.format(max=a_max)) + V18_PREEMPTION)


class Stack:
    def __init__(self, handle, seed: SIRM, new: SIRM) -> None:
        self.handle, self.seed, self.new = handle, seed, new
        self.base = f"http://{handle.rest_address}"
        self.armed_between: tuple[int, int] = (0, 0)  # when rm-v18's root.a was armed, ns

    def get(self, path: str, **kw) -> Http:
        return http(self.base, path, **kw)

    def json(self, path: str):
        r = self.get(path)
        assert r.status == 200, (path, r.status, r.body[:300])
        return r.json()

    def scrape(self) -> list:
        r = self.get("/ws/v1/metrics")
        assert r.status == 200
        return [s for f in text_string_to_metric_families(r.body.decode()) for s in f.samples]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    handle = start_stack(tmp_path_factory.mktemp("yk19") / "state", workers=2)
    seed, new = SIRM(handle.si_address, "rm-seed"), SIRM(handle.si_address, "rm-v18", revision=V18)
    try:
        seed.register(SEED_CONFIG)
        seed.open()
        seed.report(nodes=(node("n1", memory=1000, vcore=1000, **{"hugepages-2Mi": 0}),),
                    apps=(app("s1", "root.a", user="alice", groups=["dev"]),))
        seed.asks(ask("s1-k1", "s1", memory=100, vcore=1))
        seed.wait_allocated({"s1-k1"})
        new.register(v18_config(1000), build_info=V18_BUILD, extra_config=V18_EXTRA)
        new.open()
        new.report(nodes=(v18.node("n1", memory=1000, vcore=1000, **{"hugepages-2Mi": 0}),),
                   apps=(v18.app("v1", "root.a", user="bob"),))
        new.asks(v18.ask("v1-k1", "v1", memory=200, vcore=1), v18.ask("v1-k2", "v1", memory=200, vcore=1))
        new.wait_allocated({"v1-k1", "v1-k2"})
        s = Stack(handle, seed, new)
        before = time.time_ns()
        new.update_config(v18_config(300), extra_config=V18_EXTRA)  # 400 over a max of 300: armed
        s.armed_between = (before, time.time_ns())
    except BaseException:
        for rm in (seed, new):
            rm.close()
        stop_and_verify(handle)
        raise
    yield s
    for rm in (seed, new):
        rm.close()
    problems = stop_and_verify(handle)
    if problems:
        pytest.fail("\n".join(problems))


def select(samples: list, name: str, **labels: str) -> list:
    """What the PromQL selector ``name{labels}`` finds in a scrape."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


# queries of a dashboard and alerts written for YuniKorn 1.8+ (names and labels as yunikorn-site's
# docs/metrics/queue.md of 1.9 shows them), each of which must find a series per partition
DASHBOARD = [("yunikorn_queue_app", {"queue": "root.a", "state": "running"}),
             ("yunikorn_queue_app", {"queue": "root.a", "state": "accepted"}),
             ("yunikorn_queue_app_total", {"queue": "root.a", "state": "completed"}),
             ("yunikorn_queue_app_total", {"queue": "root", "state": "rejected"}),
             ("yunikorn_queue_resource", {"queue": "root", "state": "max", "resource": "memory"}),
             ("yunikorn_queue_resource", {"queue": "root.a", "state": "allocated", "resource": "memory"}),
             ("yunikorn_queue_resource", {"queue": "root.a", "state": "max", "resource": "memory"}),
             ("yunikorn_queue_resource", {"queue": "root.a", "state": "pending", "resource": "memory"})]


def test_a_dashboard_for_yunikorn_1_8_reads_every_rms_queues(stack: Stack) -> None:
    got = stack.scrape()
    for name, labels in DASHBOARD:
        assert {s.labels["rm"] for s in select(got, name, **labels)} == {"rm-seed", "rm-v18"}, (name, labels)
    allocated = {s.labels["rm"]: s.value for s in select(got, "yunikorn_queue_resource", queue="root.a",
                                                         state="allocated", resource="memory")}
    assert allocated == {"rm-seed": 100, "rm-v18": 400}
    assert {s.labels["rm"]: s.value for s in select(got, "yunikorn_queue_app", queue="root.a", state="running")} \
        == {"rm-seed": 1, "rm-v18": 1}
    # the per-queue-name form (removed in 1.8) only for the RM below 1.8
    assert {s.labels["rm"] for s in got if s.name == "yunikorn_root_a_queue_app"} == {"rm-seed"}
    assert {s.labels["rm"] for s in got if s.name.startswith("yunikorn_root")} == {"rm-seed"}


def test_an_alert_on_rejected_applications_sees_the_counter_grow(stack: Stack) -> None:
    def rejected() -> float:
        (s,) = select(stack.scrape(), "yunikorn_queue_app_total", rm="rm-v18", queue="root", state="rejected")
        return s.value

    before = rejected()
    stack.new.apps(v18.app("lost", "root.nowhere", user="bob"))
    stack.new.collect("application", "rejected", 1)
    assert wait_until(lambda: rejected() == before + 1, 10, "the rejection counted") is True


def test_queue_fields_of_quota_preemption_and_ask_backoff(stack: Stack) -> None:
    """yunikorn-site docs/api/scheduler.md (master, YUNIKORN-3277): the queue example's
    ``isQuotaPreemptionRunning``, ``quotaPreemptionStartTime``, ``unschedAskBackoff``,
    ``askBackoffDelay``, in the types it shows."""
    a = stack.json("/ws/v1/partition/default/queue/root.a?rmID=rm-v18")
    b = stack.json("/ws/v1/partition/default/queue/root.b?rmID=rm-v18")
    kinds = {"isQuotaPreemptionRunning": bool, "quotaPreemptionStartTime": int, "unschedAskBackoff": int,
             "askBackoffDelay": str}
    for q in (a, b, stack.json("/ws/v1/partition/default/queue/root.a?rmID=rm-seed")):
        assert {k: type(q[k]) for k in kinds} == kinds, q["queuename"]
    low, high = stack.armed_between
    assert a["isQuotaPreemptionRunning"] is False
    assert low + 3600 * SECONDS_NS <= a["quotaPreemptionStartTime"] <= high + 3600 * SECONDS_NS
    assert (a["unschedAskBackoff"], a["askBackoffDelay"]) == (12, "30s")
    assert (b["quotaPreemptionStartTime"], b["unschedAskBackoff"], b["askBackoffDelay"]) == (0, 0, "45s")
    tree = stack.json("/ws/v1/partition/default/queues?rmID=rm-v18")
    assert [c["quotaPreemptionStartTime"] for c in tree["children"]] == [a["quotaPreemptionStartTime"], 0]


def test_node_capacity_drops_zero_valued_resources_from_1_9(stack: Stack) -> None:
    new = stack.json("/ws/v1/partition/default/node/n1?rmID=rm-v18")
    old = stack.json("/ws/v1/partition/default/node/n1?rmID=rm-seed")
    assert new["capacity"] == {"memory": 1000, "vcore": 1000}
    assert new["available"] == {"memory": 600, "vcore": 998}
    assert old["capacity"] == {"memory": 1000, "vcore": 1000, "hugepages-2Mi": 0}  # v1.2 keeps it
    assert old["available"]["hugepages-2Mi"] == 0
    (listed,) = stack.json("/ws/v1/partition/default/nodes?rmID=rm-v18")
    assert listed["capacity"] == new["capacity"]


def test_clusters_carry_each_rms_build_information(stack: Stack) -> None:
    """yunikorn-site docs/api/cluster.md: ``rmBuildInformation`` entries with ``buildDate``,
    ``buildVersion`` and ``rmId`` (the web UI's dashboard shows these three)."""
    clusters = {c["clusterName"]: c for c in stack.json("/ws/v1/clusters")}
    assert set(clusters) == {"rm-seed", "rm-v18"}
    (new,) = clusters["rm-v18"]["rmBuildInformation"]
    assert {k: new[k] for k in ("buildVersion", "buildDate", "arch", "rmId")} == V18_BUILD | {"rmId": "rm-v18"}
    (seed,) = clusters["rm-seed"]["rmBuildInformation"]  # registered without any
    assert {k: seed[k] for k in ("buildVersion", "buildDate", "rmId")} == {
        "buildVersion": "", "buildDate": "", "rmId": "rm-seed"}
    assert all(isinstance(v, str) for c in clusters.values() for v in c["rmBuildInformation"][0].values())


def validate(stack: Stack, text: str) -> dict:
    r = stack.get("/ws/v1/validate-conf", method="POST", data=text.encode())
    assert r.status == 200
    return r.json()


def test_validate_conf_answers_the_checksum_the_scheduler_would_serve(stack: Stack) -> None:
    """yunikorn-site docs/api/cluster.md (YUNIKORN-3347): an allowed config comes with its
    ``checksum`` and ``checksumMatch``, true when the text's own checksum line is that one."""
    served = stack.get("/ws/v1/config?rmID=rm-seed").body.decode()
    own = served.rsplit("checksum: ", 1)[1].strip()
    assert validate(stack, served) == {"allowed": True, "reason": "", "checksum": own, "checksumMatch": True}
    edited = served.replace("memory: 1000", "memory: 2000")
    answer = validate(stack, edited)
    assert (answer["allowed"], answer["checksumMatch"]) == (True, False) and answer["checksum"] != own
    # the checksum is the one /ws/v1/config shows once the text is applied, blank lines and all
    text = "\n\n" + SEED_CONFIG.replace("max: {memory: 1000}", "max: {memory: 1000}  # the same limit") + "\n\n"
    checksum = validate(stack, text)["checksum"]
    assert checksum == config_checksum(text)
    stack.seed.update_config(text)
    assert stack.get("/ws/v1/config?rmID=rm-seed").body.decode().endswith(f"checksum: {checksum}\n")


@pytest.mark.parametrize("text, named", [
    ("partitions:\n  - name: default\n    queues:\n      - name: root\n        queues:\n          - name: a.b\n",
     "a.b"),
    ("partitions:\n  - name: default\n    queues:\n      - name: root\n        wrong_text: 1\n", "wrong_text"),
    ("\xff not yaml", "UTF-8"),
])
def test_validate_conf_refuses_bad_configs_naming_what_is_wrong(stack: Stack, text: str, named: str) -> None:
    raw = text.encode("latin-1") if text.startswith("\xff") else text.encode()
    r = stack.get("/ws/v1/validate-conf", method="POST", data=raw)
    answer = r.json()
    assert r.status == 200 and answer["allowed"] is False and named in answer["reason"], answer
    assert (answer["checksum"], answer["checksumMatch"]) == ("", False)


def test_user_usage_is_a_flat_map_per_queue(stack: Stack) -> None:
    """yunikorn-site docs/api/scheduler.md, "Single user": ``resourceUsage`` maps a resource name
    to its quantity (v1.2 wrapped it: ``{"Resources": {...}}``)."""
    user = stack.json("/ws/v1/partition/default/usage/user/alice?rmID=rm-seed")
    assert (user["userName"], user["groups"]) == ("alice", {"s1": "dev"})
    root = user["queues"]
    assert (root["queuePath"], root["resourceUsage"], root["runningApplications"]) == (
        "root", {"memory": 100, "vcore": 1}, ["s1"])
    (a,) = root["children"]
    assert (a["queuePath"], a["resourceUsage"], a["children"]) == ("root.a", {"memory": 100, "vcore": 1}, [])
