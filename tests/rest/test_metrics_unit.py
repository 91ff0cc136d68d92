"""Queue metrics rendered from real partitions (the core's metrics answer, no stack) and read back
with ``prometheus_client``'s parser, as Prometheus reads them: YuniKorn >= 1.8's names, labels and
types for every partition, the per-queue-name form only where the RM's compatibility is below 1.8
(docs/rest.md, Metrics)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from common.compat import Compat
from partition_worker.core import CoreSettings, ReleaseAlloc
from partition_worker.core.dao_totals import metrics_dao
from rmproxy.webapi.cluster import Target
from rmproxy.webapi.metrics import render_metrics
from tests.core.harness import SECOND, Harness, partition_config, q

PROXY = {"name": "p", "brokerConnected": True, "dropped": 0, "resyncs": 0, "resyncSeconds": 0.0,
         "pendingQueries": 0, "cluster": {}, "rms": {}}


@dataclass(frozen=True)
class Sample:
    name: str
    type: str  # of its family
    labels: dict
    value: float


def scrape(*partitions: tuple[str, Harness]) -> list[Sample]:
    """``/ws/v1/metrics`` of one partition ``default`` per (rmID, harness), parsed."""
    answers = [(Target(rm_id, "default", 1, "w"), {**metrics_dao(h.p), "observed": None}) for rm_id, h in partitions]
    text = render_metrics(answers, PROXY).decode()
    return [Sample(s.name, f.type, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def select(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    """What the PromQL selector ``name{labels}`` finds."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def one(samples: list[Sample], name: str, **labels: str) -> Sample:
    (found,) = select(samples, name, **labels)
    return found


def partition(compat: Compat, *queues) -> Harness:
    settings = CoreSettings(completing_timeout_ns=30 * SECOND, compat=compat)
    return Harness(partition_config(q("root", *queues, submitacl="*")), settings=settings)


def test_yunikorns_queue_metrics_with_their_labels_and_types() -> None:
    h = partition(Compat((1, 9)), q("a", guaranteed={"memory": 200}, max={"memory": 500}, maxapps=4), q("b"))
    h.node("n1").app("done", queue="root.a").ask("k1", "done", memory=100)
    h.step()
    h.do(ReleaseAlloc("done", h.allocs_of("k1")[0].uuid))
    h.advance(30 * SECOND)
    h.app("run", queue="root.a").ask("k2", "run", memory=100).app("lost", queue="root.nope")
    h.step()
    got = scrape(("rm-new", h))
    app = one(got, "yunikorn_queue_app", queue="root.a", state="running")
    assert (app.type, app.value, app.labels["rm"], app.labels["partition"]) == ("gauge", 1, "rm-new", "default")
    assert one(got, "yunikorn_queue_app", queue="root.a", state="completed").value == 1
    total = one(got, "yunikorn_queue_app_total", queue="root.a", state="completed")
    assert (total.type, total.value) == ("counter", 1)
    assert one(got, "yunikorn_queue_app_total", queue="root", state="rejected").value == 1
    assert {s.labels["state"] for s in select(got, "yunikorn_queue_app", queue="root.b")} == {
        "new", "accepted", "running", "resuming", "failing", "completing", "completed", "failed", "rejected"}
    res = {(s.labels["state"], s.labels["resource"]): s.value
           for s in select(got, "yunikorn_queue_resource", queue="root.a")}
    assert res == {("guaranteed", "memory"): 200, ("max", "memory"): 500, ("allocated", "memory"): 100,
                   ("allocated", "vcore"): 1, ("pending", "memory"): 0, ("pending", "vcore"): 0,
                   ("maxRunningApps", "apps"): 4}  # nothing preempting: no preempting series
    assert one(got, "yunikorn_queue_resource", queue="root", state="max", resource="memory").value == 1000
    assert not [s for s in got if s.name.startswith("yunikorn_root")]  # 1.8+: no per-queue-name metrics


def test_a_scrape_covering_rms_of_both_kinds_names_each_partitions_queues_its_way() -> None:
    old, new = (partition(Compat(version), q("a", max={"memory": 100})) for version in ((1, 2), (1, 8)))
    for h in (old, new):
        h.app("app1", queue="root.a")
    got = scrape(("rm-old", old), ("rm-new", new))
    # the labelled form for both RMs: a dashboard written for 1.8+ sees every partition
    assert {s.labels["rm"] for s in select(got, "yunikorn_queue_app", queue="root.a", state="new")} == {
        "rm-old", "rm-new"}
    # the per-queue-name form only for the RM below 1.8
    assert {s.labels["rm"] for s in select(got, "yunikorn_root_a_queue_app")} == {"rm-old"}
    assert {s.labels["rm"] for s in select(got, "yunikorn_root_a_queue_resource", state="max")} == {"rm-old"}
    assert {s.labels["rm"] for s in select(got, "yunikorn_queue_resource", queue="root.a", state="max")} == {
        "rm-old", "rm-new"}


def test_per_queue_names_keep_queues_with_the_same_metric_name_apart() -> None:
    h = partition(Compat(), q("a-b"), q("a_b"))
    for queue, memory in (("root.a-b", 10), ("root.a_b", 20)):
        app_id = f"app-{memory}"
        h.node(f"n{memory}").app(app_id, queue=queue).ask(f"k{memory}", app_id, memory=memory)
    h.step()
    allocated = select(scrape(("rm", h)), "yunikorn_root_a_b_queue_resource", state="allocated", resource="memory")
    assert sorted((s.labels["queue"], s.value) for s in allocated) == [("root.a-b", 10.0), ("root.a_b", 20.0)]
