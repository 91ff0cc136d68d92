"""korral explain: asks that wait for the same reasons are shown once, with a count."""

from __future__ import annotations


def test_explain_groups_asks_that_wait_for_the_same_reasons():
    from common.cli.explain import format_grouped

    def e(key, state="FAILED", nodes=None):
        return {"allocationKey": key, "applicationID": "job", "pending": 1, "state": state,
                "reason": "request is waiting for cluster resources become available",
                "nodes": nodes or {"insufficient resources": 4}}

    answers = [e(f"pod-{i}") for i in range(37)] + [e("pod-big", nodes={"insufficient resources": 3, "fits": 1})]
    text = format_grouped(answers)
    blocks = [line for line in text.splitlines() if not line.startswith(" ")]
    assert blocks == [
        "37 asks (pod-0, pod-1, pod-2, pod-3, pod-4 and 32 more) of job: 1 pending each, state FAILED "
        "(request is waiting for cluster resources become available)",
        "ask pod-big of job: 1 pending, state FAILED (request is waiting for cluster resources become available)"]
    assert text.count("nodes: insufficient resources 4") == 1


def test_explain_names_why_a_gang_has_no_topology_domain_when_the_state_says_otherwise():
    from common.cli.explain import format_explanation
    e = {"allocationKey": "ph-0", "applicationID": "job", "pending": 9, "state": "SKIPPED",
         "reason": "request does not fit the headroom of queue root.a", "nodes": {"fits": 4},
         "gangTopology": "gang of application job waits for one rack (required): rack: no rack fits 9 members"}
    assert "  gang topology: gang of application job waits for one rack (required): rack: no rack fits 9 members" \
        in format_explanation(e).splitlines()
