"""The thin path through every process: an RM registers, adds a node, an app and an ask, and gets an allocation."""

from __future__ import annotations

import uuid

from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node


def test_register_node_app_ask_gives_an_allocation(stack):
    rm = SIRM(stack.si_address, "rm-thin")
    try:
        rm.register()  # empty config -> the default partition
        rm.open()
        rm.nodes(node("node-1", memory=1000, vcore=1000))
        assert [n.nodeID for n in rm.next("node").accepted] == ["node-1"]

        rm.apps(app("app-1"))
        assert [a.applicationID for a in rm.next("application").accepted] == ["app-1"]

        rm.asks(ask("ask-1", "app-1", memory=10, vcore=1))
        resp = rm.wait_for("allocation", lambda r: r.new)
        [alloc] = resp.new
        assert alloc.allocationKey == "ask-1" and alloc.applicationID == "app-1"
        assert alloc.nodeID == "node-1"
        uuid.UUID(alloc.UUID)  # a real UUID
        assert {k: v.value for k, v in alloc.resourcePerAlloc.resources.items()} == {"memory": 10, "vcore": 1}

        accepted = rm.wait_for("application", lambda r: any(u.state == "Accepted" for u in r.updated))
        assert accepted.updated[0].applicationID == "app-1"
    finally:
        rm.close()
