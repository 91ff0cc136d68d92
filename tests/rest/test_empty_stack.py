"""A stack with no RM registered: the endpoints YuniKorn's UI polls answer 200 with empty lists."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.rest.workload import http


def test_an_empty_stack_answers_empty_lists(stack_factory) -> None:
    stack = stack_factory(workers=1)
    base = f"http://{stack.rest_address}"
    for path in ("/ws/v1/clusters", "/ws/v1/partitions", "/ws/v1/history/apps", "/ws/v1/history/containers",
                 "/ws/v1/scheduler/node-utilizations"):  # [], not YuniKorn's null: its web UI needs a list
        r = http(base, path)
        assert (r.status, r.json()) == (200, []), path
    health = http(base, "/ws/v1/scheduler/healthcheck")
    assert health.status == 200 and health.json()["Healthy"] is True
    dump = http(base, "/debug/fullstatedump").json()
    assert dump["partitions"] == [] and dump["errors"] == [] and len(dump["stack"]["workers"]) == 1
    config = http(base, "/ws/v1/config")
    assert config.status == 404 and "no RM is registered" in config.json()["message"]
    assert http(base, "/ws/v1/events/batch").json()["EventRecords"] is None  # YuniKorn: start 0 is not held
    families = {f.name for f in text_string_to_metric_families(http(base, "/ws/v1/metrics").body.decode())}
    assert "korral_broker_envelopes_routed" in families
    page = http(base, "/")
    assert page.status == 200 and b"Korral" in page.body
