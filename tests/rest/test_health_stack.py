"""The health check reports stack problems: an RM whose streams dropped (Paused) makes the scheduler
unhealthy, answered with 200 and the body, as YuniKorn answers since 1.5."""

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
    body = wait_until(lambda: (lambda r: r.json() if r.status == 200 and not r.json()["Healthy"] else None)(
        http(base, "/ws/v1/scheduler/healthcheck")), 10, "the health check reporting the paused RM")
    assert set(body) == {"Healthy", "HealthChecks"}
    failed = [c for c in body["HealthChecks"] if not c["Succeeded"]]
    assert [c["Name"] for c in failed] == ["RM connections"]
    assert "rm-health is Paused" in failed[0]["DiagnosisMessage"]
