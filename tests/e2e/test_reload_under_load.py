"""Hot reload while asks are being allocated: add a queue, remove a queue, lower a max.

Nothing crashes, nothing is lost, the removed queue drains (stays while it has work,
Draining, then disappears), and the lowered max holds from the next allocation.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.e2e.test_config_reload import config
from tests.si_builders import app, ask, node, remove_app

BEFORE = config(100_000, "b")
AFTER = config(2000, "c")


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
        rm.wait_accepted("node", {f"n{i}" for i in range(4)})
        rm.apps(app("app-a", queue="root.a"), app("app-b", queue="root.b"))
        rm.wait_accepted("application", {"app-a", "app-b"})

        def submit():
            i = 0
            while not stop.is_set():
                rm.asks(ask(f"a-{i}", "app-a", memory=100, vcore=1), ask(f"b-{i}", "app-b", memory=100, vcore=1))
                i += 1
                time.sleep(0.01)

        def record(r) -> None:
            for a in r.new:
                assert a.allocationKey not in allocations, f"{a.allocationKey} allocated twice"
                allocations[a.allocationKey] = a.nodeID

        def record_until(enough):
            """A ``read_until`` step: records each response until ``enough()`` holds."""
            return lambda r: record(r) or (True if enough() else None)

        sender = threading.Thread(target=submit, daemon=True)
        sender.start()
        rm.read_until("allocation", record_until(lambda: len(allocations) >= 20), 20,
                      lambda: f"20 allocations before the update (got {len(allocations)})")
        before_update = len(allocations)
        rm.update_config(AFTER)
        # what root.a held when the lower max took effect (the update returns once the worker
        # applied it): asks allocated meanwhile, not read yet, count too
        a_at_update = queues(stack.rest_address)["root.a"]["allocatedResource"].get("memory", 0)
        # the load goes on through the update: b's asks are still allocated after it
        rm.read_until("allocation", record_until(
            lambda: any(k.startswith("b-") for k in list(allocations)[before_update:])), 20,
            lambda: "an allocation of app-b read after the update")
        stop.set()
        sender.join(5)
        try:  # drain what the scheduler still sends, until it is quiet for half a second
            while True:
                record(rm.next("allocation", 0.5))
        except TimeoutError:
            pass
        q = queues(stack.rest_address)
        # the lowered max holds: root.a is not above it beyond what it held before the update
        a_used = q["root.a"]["allocatedResource"].get("memory", 0)
        assert a_used <= max(2000, a_at_update), (a_used, a_at_update)
        assert q["root.a"]["maxResource"]["memory"] == 2000
        # the new queue exists; the removed one drains while app-b has work
        assert q["root.c"]["status"] == "Active"
        assert q["root.b"]["status"] == "Draining"
        # b's asks kept being allocated after the update (read above): existing work continues in
        # a draining queue
        # removing app-b empties root.b, which then disappears
        rm.remove_apps(remove_app("app-b"))
        wait_until(lambda: "root.b" not in queues(stack.rest_address), 30, "root.b removed", interval=0.5)
        # and the stack still serves
        rm.apps(app("app-c", queue="root.c"))
        assert rm.wait_for("application", lambda r: r.accepted).accepted[0].applicationID == "app-c"
    finally:
        stop.set()
        rm.close()
