"""Hot reload while asks are being allocated: add a queue, remove a queue, lower a max.

Nothing crashes, nothing is lost, the removed queue drains (stays while it has work,
Draining, then disappears), and the lowered max holds from the next allocation.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from common import si_pb2
from tests.e2e.sirm import SIRM, app, ask, node
from tests.e2e.test_config_reload import update

BEFORE = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {name: a, resources: {max: {memory: 100000}}}
          - {name: b}
"""

AFTER = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {name: a, resources: {max: {memory: 2000}}}
          - {name: c}
"""


def queues(rest: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"http://{rest}/ws/v1/partition/default/queues", timeout=10) as r:
        tree = json.load(r)
    out: dict[str, dict] = {}

    def walk(q):
        out[q["queuename"]] = q
        for c in q.get("children") or []:
            walk(c)

    walk(tree)
    return out


def test_reload_under_load(stack):
    rm = SIRM(stack.si_address, "rm-reload-load")
    allocations: dict[str, str] = {}  # key -> nodeID
    stop = threading.Event()
    try:
        rm.register(BEFORE)
        rm.open()
        rm.nodes(*[node(f"n{i}", memory=100_000, vcore=1000) for i in range(4)])
        accepted = 0
        while accepted < 4:
            accepted += len(rm.wait_for("node", lambda r: r.accepted).accepted)
        rm.apps(app("app-a", queue="root.a"), app("app-b", queue="root.b"))
        got = set()
        while len(got) < 2:
            got |= {a.applicationID for a in rm.wait_for("application", lambda r: r.accepted).accepted}

        def submit():
            i = 0
            while not stop.is_set():
                rm.asks(ask(f"a-{i}", "app-a", memory=100, vcore=1), ask(f"b-{i}", "app-b", memory=100, vcore=1))
                i += 1
                time.sleep(0.01)

        sender = threading.Thread(target=submit, daemon=True)
        sender.start()
        deadline = time.monotonic() + 20
        while len(allocations) < 20 and time.monotonic() < deadline:
            for a in rm.next("allocation", 10).new:
                allocations[a.allocationKey] = a.nodeID
        update(stack.si_address, rm.rm_id, AFTER)
        time.sleep(1.0)
        stop.set()
        sender.join(5)
        # drain what the scheduler still sends
        end = time.monotonic() + 3
        while time.monotonic() < end:
            try:
                for a in rm.next("allocation", 0.5).new:
                    assert a.allocationKey not in allocations, f"{a.allocationKey} allocated twice"
                    allocations[a.allocationKey] = a.nodeID
            except Exception:
                break
        q = queues(stack.rest_address)
        # the lowered max holds: root.a is not above it beyond what it held before the update
        a_used = q["root.a"]["allocatedResource"].get("memory", 0)
        held_before = 100 * sum(1 for k in list(allocations)[:20] if k.startswith("a-"))
        assert a_used <= max(2000, held_before)
        assert q["root.a"]["maxResource"]["memory"] == 2000
        # the new queue exists; the removed one drains while app-b has work
        assert q["root.c"]["status"] == "Active"
        assert q["root.b"]["status"] == "Draining"
        # b's asks kept being allocated after the update: existing work continues in a draining queue
        assert any(k.startswith("b-") for k in allocations)
        # removing app-b empties root.b, which then disappears
        rm.streams["application"].send(si_pb2.ApplicationRequest(rmID=rm.rm_id, remove=[
            si_pb2.RemoveApplicationRequest(applicationID="app-b", partitionName="default")]))
        deadline = time.monotonic() + 30
        while "root.b" in queues(stack.rest_address) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "root.b" not in queues(stack.rest_address)
        # and the stack still serves
        rm.apps(app("app-c", queue="root.c"))
        assert rm.wait_for("application", lambda r: r.accepted).accepted[0].applicationID == "app-c"
    finally:
        stop.set()
        rm.close()
