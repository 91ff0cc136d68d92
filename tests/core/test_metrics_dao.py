"""The metric gauges of a partition (``dao_totals.metrics_dao``) as YuniKorn >= 1.8 names them:
``yunikorn_queue_app`` counts the apps a queue holds by state and every app that ended there,
``yunikorn_queue_app_total`` the ended ones for the partition's life, removed queues included;
the per-queue-name form follows the compatibility switch (docs/yunikorn-compat.md)."""

from common.compat import Compat
from partition_worker.core import CoreSettings, ReleaseAlloc
from partition_worker.core.dao_totals import metrics_dao
from partition_worker.core.settings import DAY
from tests.core.harness import SECOND, Harness, partition_config, q

ENDED = ("completed", "failed", "rejected")


def two_queues(compat: Compat = Compat()) -> Harness:
    settings = CoreSettings(completing_timeout_ns=30 * SECOND, expire_timeout_ns=DAY, compat=compat)
    return Harness(partition_config(q("root", q("a", max={"memory": 500}, maxapps=3), q("b"), submitacl="*")),
                   settings=settings)


def queue(m: dict, path: str) -> dict:
    return next(x for x in m["queues"] if x["path"] == path)


def ended(m: dict) -> dict[tuple[str, str], int]:
    return {(path, state): n for path, state, n in m["appsEnded"]}


def complete(h: Harness, app_id: str, queue_path: str) -> None:
    """``app_id`` runs one allocation in ``queue_path``, releases it and completes 30 s later."""
    h.app(app_id, queue=queue_path).ask(f"{app_id}-k", app_id)
    h.step()
    h.do(ReleaseAlloc(app_id, h.allocs_of(f"{app_id}-k")[0].uuid))
    h.advance(30 * SECOND)
    assert h.app_state(app_id) == "Completed"


def test_queue_app_states_are_yunikorns_labels_held_now_and_ended_there() -> None:
    h = two_queues()
    h.node("n1")
    complete(h, "done", "root.a")
    h.app("broken", queue="root.a").ask("broken-k", "broken")
    h.step()
    h.p.fail_application("broken", "PartitionRemoved", h.now)
    h.app("running", queue="root.a").ask("running-k", "running").app("waiting", queue="root.b")
    h.app("lost", queue="root.nope")  # rejected: kept in root, as REST lists it
    h.step()
    m = metrics_dao(h.p)
    a = queue(m, "root.a")["appStates"]
    assert a == {"new": 0, "accepted": 0, "running": 1, "resuming": 0, "failing": 0, "completing": 0,
                 "completed": 1, "failed": 1, "rejected": 0}
    assert queue(m, "root.b")["appStates"]["new"] == 1  # an app without asks stays New
    assert queue(m, "root")["appStates"]["rejected"] == 1
    assert {k: v for k, v in ended(m).items() if v} == {("root.a", "completed"): 1, ("root.a", "failed"): 1,
                                                         ("root", "rejected"): 1}
    assert {(p, s) for p, s in ended(m)} == {(p, s) for p in ("root", "root.a", "root.b") for s in ENDED}


def test_ended_apps_still_count_after_they_expire_and_their_queue_is_gone() -> None:
    h = two_queues()
    h.node("n1")
    complete(h, "done", "root.a")
    h.advance(DAY)  # expired: no longer listed by REST
    assert h.app_state("done") == "gone"
    a = queue(metrics_dao(h.p), "root.a")
    assert a["appStates"]["completed"] == 1 and "completed" not in a["apps"]  # the v1.2 form counts held apps
    h.p.update_config(partition_config(q("root", q("b"), submitacl="*")), h.now)
    h.step()
    m = metrics_dao(h.p)
    assert "root.a" not in {x["path"] for x in m["queues"]}
    assert ended(m)[("root.a", "completed")] == 1  # a counter: it survives the queue


def test_queue_resources_include_preempting_and_max_running_apps() -> None:
    h = two_queues()
    h.node("n1").app("app1", queue="root.a").ask("k1", "app1", memory=100)
    h.step()
    a = queue(metrics_dao(h.p), "root.a")
    assert (a["max"], a["allocated"], a["preempting"], a["maxRunningApps"]) == (
        {"memory": 500}, {"memory": 100, "vcore": 1}, {}, 3)


def test_per_queue_metric_names_only_below_compatibility_1_8() -> None:
    served = {version: metrics_dao(two_queues(Compat(version)).p)["perQueueMetricNames"]
              for version in ((1, 2), (1, 7), (1, 8), (1, 9))}
    assert served == {(1, 2): True, (1, 7): True, (1, 8): False, (1, 9): False}
