"""Topology-aware gang placement (issue 35) through a real stack (``korral up``) and the
stub-based RM: labelled nodes in two blocks of two racks, a queues.yaml naming the levels, and a
gang tagged ``korral.io/gang-topology`` (rack, required) that lands in one rack, which REST app
detail shows as ``korralTopology``. A gang too big for any rack waits, saying why."""

from __future__ import annotations

import json

from common.constants import NODE_LABELS, TAG_GANG_TOPOLOGY
from common.netutil import http_get_json
from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node

CONFIG = """partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: default
    topology:
      levels:
        - {name: block, label: example.com/block}
        - {name: rack, label: example.com/rack}
"""
RACK_TAG = {TAG_GANG_TOPOLOGY: json.dumps({"level": "rack", "mode": "required"})}


def _detail(stack, app_id: str) -> dict:
    return http_get_json(f"http://{stack.rest_address}/ws/v1/partition/default/application/{app_id}"
                         f"?rmID=rm-topology", timeout=10).body


def test_a_tagged_gang_lands_in_one_rack_and_rest_shows_its_domain(module_stack):
    rm = SIRM(module_stack.si_address, "rm-topology")
    racks = {"r1": "b1", "r2": "b1", "r3": "b2", "r4": "b2"}
    # node IDs interleave the racks, so a topology-blind fair order spreads a gang over all of them
    nodes = [node(f"n{i}-{rack}", memory=40, vcore=4, attributes={NODE_LABELS: json.dumps(
        {"example.com/block": block, "example.com/rack": rack})})
        for i in range(2) for rack, block in racks.items()]
    try:
        rm.register(CONFIG)
        rm.open()
        rm.report(nodes=nodes, apps=(app("gang", tags=RACK_TAG), app("huge", tags=RACK_TAG)))
        rm.asks(*[ask(f"ph-{i}", "gang", memory=10, vcore=1, placeholder=True, task_group="tg") for i in range(6)])
        placed = rm.wait_allocated([f"ph-{i}" for i in range(6)])
        assert len({a.nodeID.split("-")[1] for a in placed.values()}) == 1  # one rack
        rack = next(iter(placed.values())).nodeID.split("-")[1]
        topo = wait_until(lambda: _detail(module_stack, "gang").get("korralTopology"), 10, "korralTopology")
        assert topo == {"level": "rack", "mode": "required", "domain": {"block": racks[rack], "rack": rack},
                        "pinned": True, "reason": ""}

        rm.asks(*[ask(f"big-{i}", "huge", memory=10, vcore=1, placeholder=True, task_group="tg") for i in range(9)])
        why = wait_until(lambda: (_detail(module_stack, "huge").get("korralTopology") or {}).get("reason"), 20,
                         "the huge gang's reason")
        assert why.startswith("gang of application huge waits for one rack (required): rack: no rack fits 9 members")
    finally:
        rm.shutdown()
        rm.close()
