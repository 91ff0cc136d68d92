"""Several rmproxies at once: each serves its own RM, responses reach the rmproxy holding the RM's
streams, and any rmproxy's REST API reads every partition of the stack."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from common.netutil import free_ports, wait_for_http
from tests.conftest import stop_process, wait_until
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node


@pytest.fixture
def second_rmproxy(stack, tmp_path):
    si, rest = free_ports(2)
    log = open(tmp_path / "rmproxy2.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "common.cli", "rmproxy", "--si-address", f"127.0.0.1:{si}",
         "--rest-address", f"127.0.0.1:{rest}", "--broker", stack.broker_frontend,
         "--redis-url", stack.redis_url, "--name", "second"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_http(f"http://127.0.0.1:{rest}/ws/v1/korral/ready", time.monotonic() + 20)
        yield f"127.0.0.1:{si}", f"127.0.0.1:{rest}"
    finally:
        stop_process(proc, 10, group=True)
        log.close()


def _nodes(rest: str, rm_id: str) -> list[dict]:
    url = f"http://{rest}/ws/v1/partition/default/nodes?rmID={rm_id}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


@pytest.mark.parametrize("stack_options", [{"workers": 3}])
def test_two_rmproxies_serve_two_rms(stack, second_rmproxy):
    si2, rest2 = second_rmproxy
    rms = [SIRM(stack.si_address, "rm-one"), SIRM(si2, "rm-two")]
    try:
        for rm in rms:
            rm.start(node(f"{rm.rm_id}-n1", memory=100, vcore=10))
            rm.apps(app("app"))
            rm.wait_accepted("application", {"app"})
        for rm in rms:
            rm.asks(ask("k1", "app", memory=5, vcore=1))
        for rm in rms:  # each allocation comes back through the RM's own rmproxy
            [alloc] = rm.wait_for("allocation", lambda r: r.new).new
            assert alloc.nodeID == f"{rm.rm_id}-n1"
        # either rmproxy's REST API reads the other's RM partition (each learns of the other's RM
        # through the broker: wait for it, an HTTP error or an empty list meaning "not yet")
        for rest, rm_id in ((stack.rest_address, "rm-two"), (rest2, "rm-one")):
            seen = wait_until(lambda: [n["nodeID"] for n in _nodes(rest, rm_id)], 10, f"{rm_id}'s nodes at {rest}")
            assert seen == [f"{rm_id}-n1"]
    finally:
        for rm in rms:
            rm.close()
