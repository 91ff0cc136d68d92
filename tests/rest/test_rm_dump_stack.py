"""The RM's own state dump (korral.v1 StateDumpRequest → ProvideStateDump) lands in the full dump."""

from __future__ import annotations

import json
import time

from common import si_pb2
from rmproxy.client import ResourceManagerCallback, SchedulerAPI
from rmproxy.client.callback import StateDumpPlugin
from tests.rest.workload import http


class DumpingRM(ResourceManagerCallback, StateDumpPlugin):
    def get_state_dump(self) -> str:
        return json.dumps({"pods": ["p1", "p2"], "rm": "python-client"})


def test_the_rm_state_dump_is_in_rm_diagnostics(stack_factory) -> None:
    stack = stack_factory(workers=1)
    api = SchedulerAPI(stack.si_address)
    try:
        api.register_resource_manager(
            si_pb2.RegisterResourceManagerRequest(rmID="rm-dumping", policyGroup="queues"), DumpingRM())
        base = f"http://{stack.rest_address}"
        deadline = time.monotonic() + 10  # the client opens its notice subscription after registering
        while not any(rm["subscribers"] for rm in http(base, "/ws/v1/korral/processes").json()["rms"]):
            assert time.monotonic() < deadline, "the RM never subscribed to notices"
            time.sleep(0.05)
        d = http(base, "/ws/v1/fullstatedump", timeout=30).json()
    finally:
        api.close()
    diag = d["RMDiagnostics"]["rm-dumping"]
    assert diag["stateDump"] == {"pods": ["p1", "p2"], "rm": "python-client"}
    assert diag["rmID"] == "rm-dumping" and diag["policyGroup"] == "queues"
