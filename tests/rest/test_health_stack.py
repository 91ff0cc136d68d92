"""The health check reports stack problems: an RM whose streams dropped (Paused) → 503."""

from __future__ import annotations

from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.rest.workload import http
from tests.si_builders import node


def test_a_paused_rm_makes_the_scheduler_unhealthy(stack_factory) -> None:
    stack = stack_factory(workers=1)
    base = f"http://{stack.rest_address}"
    rm = SIRM(stack.si_address, "rm-health")
    rm.start(node("n1", memory=100, vcore=100))
    ok = http(base, "/ws/v1/scheduler/healthcheck")
    assert ok.status == 200 and ok.json()["Healthy"] is True
    rm.close()  # the RM's streams end: rmproxy marks it Paused

    def unhealthy():
        r = http(base, "/ws/v1/scheduler/healthcheck")
        return r if r.status == 503 else None

    r = wait_until(unhealthy, 10, "the health check failing after the RM dropped", interval=0.2)
    body = r.json()
    assert body["status_code"] == 503 and body["Healthy"] is False
    assert "RM connections" in body["description"] and "rm-health is Paused" in body["description"]
    failed = [c["Name"] for c in body["HealthChecks"] if not c["Succeeded"]]
    assert failed == ["RM connections"]
