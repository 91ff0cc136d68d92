"""The RM's own state dump (korral.v1 StateDumpRequest → ProvideStateDump) lands in the full dump."""

from __future__ import annotations

import json

from benchmarks.cluster_rm import ClusterRM
from tests.conftest import wait_until
from tests.rest.workload import http
from tests.si_builders import node


def test_the_rm_state_dump_is_in_rm_diagnostics(stack_factory) -> None:
    stack = stack_factory(workers=1)
    rm = ClusterRM("rm-dumping")
    rm.connect(stack.si_address)
    try:
        rm.report_nodes(node("n1"), node("n2"))
        base = f"http://{stack.rest_address}"
        # the client opens its notice subscription after registering
        wait_until(lambda: any(r["subscribers"] for r in http(base, "/ws/v1/korral/processes").json()["rms"]),
                   10, "the RM subscribed to notices")
        d = http(base, "/ws/v1/fullstatedump", timeout=30).json()
        own = json.loads(rm.get_state_dump())
    finally:
        rm.close()
    diag = d["RMDiagnostics"]["rm-dumping"]
    assert diag["stateDump"] == own and own["nodes"] == 2
    assert diag["rmID"] == "rm-dumping" and diag["policyGroup"] == "queues"
