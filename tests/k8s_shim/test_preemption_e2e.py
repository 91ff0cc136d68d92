"""Preemption through the shim, end to end (``korral up`` + ``korral k8s-fake`` + ``korral
k8s-shim``): root.high takes back its guarantee from root.low. The victims Korral releases are
deleted gracefully (their grace period runs on the fake kubelet), each with events saying who
preempted it; pods that opt out (annotation, PriorityClass) are never victims; the pod whose class
says ``preemptionPolicy: Never`` waits for room instead; the preemptors are bound once, when room
is free."""

from __future__ import annotations

import pytest

from tests.conftest import wait_until
from tests.k8s_shim.cluster import pod_events
from tests.k8s_shim.scenarios import Preemption, cluster_for, common_problems

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cluster(stack_factory, tmp_path):
    c = cluster_for(stack_factory(workers=1), tmp_path)
    try:
        c.start_shim()
        yield c
    finally:
        c.stop()


def test_root_high_takes_its_guarantee_back_from_preemptable_pods_only(cluster):
    c, s = cluster, Preemption()
    s.start(c)
    victim_seen = wait_until(lambda: [p for p in c.kube.pods(s.NS) if p["metadata"].get("deletionTimestamp")], 60,
                             "a victim being deleted", c.logs)[0]
    # deleted gracefully, with the pod's own grace period, as YuniKorn's shim deletes a victim
    assert victim_seen["metadata"]["deletionGracePeriodSeconds"] == 30
    wait_until(lambda: s.done(c), 60, "hi-1 and hi-2 bound, the victims gone", c.logs)
    assert s.problems(c, disturbed=False) == []
    victims = s.victims(c)

    def preempted_events() -> dict:
        return {e["regarding"]["name"]: e for e in c.kube.events(s.NS)
                if e["reason"] == "Informational" and e["note"].startswith("Preempted by ")}
    # the events are posted after what they tell: waited for
    wait_until(lambda: set(victims) <= set(preempted_events()) and all(
        "Preempted" in pod_events(c.kube).get(f"{s.NS}/{v}", ()) for v in victims), 30,
        "each victim's preemption events", preempted_events)
    events = preempted_events()
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in c.kube.pods(s.NS)}
    for v in victims:  # who preempted it, and why (YuniKorn's words): the preemptor's key is its pod's uid
        assert events[v]["note"] in {f"Preempted by {uids[h]} from application high in root.high"
                                     for h in ("hi-1", "hi-2")}, events[v]
        assert "Preempted" in pod_events(c.kube)[f"{s.NS}/{v}"]
    s.finish(c)
    wait_until(lambda: not c.disagreements(), 30, "Korral, the shim and the API server agree", c.logs)
    assert common_problems(c) == []
