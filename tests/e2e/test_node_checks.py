"""Kubernetes' node filters as the core's node checks, through a real stack (``korral up``) and
the stub-based RM: nodes report taints, labels, readiness and (through a foreign pod) used host
ports as attributes and tags; asks carry tolerations, node affinity, a nodeSelector, host ports
or an unsupported constraint. Every allocation lands on a node that passes every check, and
``explain`` (REST) names the check that keeps a waiting ask off each node."""

from __future__ import annotations

import json

from common.config.default import DEFAULT_CONFIG_TEXT
from common.constants import (NODE_LABELS, NODE_TAINTS, TAG_HOST_PORTS, TAG_NODE_AFFINITY,
                              TAG_NODE_SELECTOR_PREFIX, TAG_TOLERATIONS, TAG_UNSUPPORTED_CONSTRAINTS)
from common.netutil import http_get_json
from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.si_builders import allocation, app, ask, node

DEFAULT_TOLERATIONS = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                       {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}]
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
PORT_80 = json.dumps([{"hostPort": 80, "protocol": "TCP"}])


def _node(node_id: str, labels: dict, taints: list | None = None, **attrs: str):
    attributes = {NODE_LABELS: json.dumps(labels), **attrs}
    if taints:
        attributes[NODE_TAINTS] = json.dumps(taints)
    return node(node_id, memory=100, vcore=10, attributes=attributes)


def _ask(key: str, memory: int = 20, **tags):
    a = ask(key, "k8s-app", memory=memory, vcore=1)
    a.tags.update({TAG_TOLERATIONS: json.dumps(DEFAULT_TOLERATIONS), **tags})
    return a


def _explain(stack, rm_id: str, key: str) -> dict:
    url = (f"http://{stack.rest_address}/ws/v1/korral/partition/default/application/k8s-app/allocation/"
           f"{key}/explain?rmID={rm_id}")
    return http_get_json(url, timeout=10).body


def test_allocations_land_only_where_every_check_passes_and_explain_names_the_check(module_stack):
    plain_1 = _node("plain-1", {"pool": "general", "zone": "a"})
    plain_1.existingAllocations.append(allocation(  # another scheduler's pod holds port 80 there
        "ingress", "plain-1", app_id="", partition="", uuid="",
        tags={"foreign": "default", TAG_HOST_PORTS: PORT_80}, memory=5, vcore=1))
    nodes = [plain_1, _node("plain-2", {"pool": "general", "zone": "b"}),
             _node("gpu-1", {"pool": "gpu", "zone": "a"}, [GPU_TAINT]),
             _node("master", {"zone": "a"}, [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
             _node("sick", {"pool": "general", "zone": "a"}, ready="false")]
    rm = SIRM(module_stack.si_address, "rm-node-checks")
    try:
        rm.register(DEFAULT_CONFIG_TEXT)  # apps in root.<namespace>
        rm.open()
        rm.report(nodes=nodes, apps=(app("k8s-app"),))
        gpu_only = json.dumps({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["gpu"]}]}]})
        zone_b = json.dumps({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}]})
        rm.asks(
            _ask("train", **{TAG_TOLERATIONS: json.dumps(DEFAULT_TOLERATIONS + [{"key": "dedicated", "operator": "Exists"}]),
                             TAG_NODE_AFFINITY: gpu_only}),
            _ask("zonal", **{TAG_NODE_AFFINITY: zone_b}),
            _ask("selected", **{TAG_NODE_SELECTOR_PREFIX + "zone": "a"}),
            _ask("web", memory=10, **{TAG_HOST_PORTS: PORT_80}),
            _ask("anti", memory=1, **{TAG_UNSUPPORTED_CONSTRAINTS: "required pod anti-affinity"}))
        placed = {k: a.nodeID for k, a in rm.wait_allocated(["train", "zonal", "selected", "web"]).items()}
        assert placed == {"train": "gpu-1", "zonal": "plain-2", "selected": "plain-1", "web": "plain-2"}

        rm.asks(_ask("web-2", memory=10, **{TAG_HOST_PORTS: PORT_80}))  # port 80 is taken wherever it may go
        why = wait_until(lambda: (e := _explain(module_stack, "rm-node-checks", "web-2")).get("state") == "FAILED"
                         and e, 20, "web-2 waiting")
        assert why["nodes"] == {"node(s) were not ready": 1,
                                "node(s) had untolerated taint {dedicated: gpu}": 1,
                                "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }": 1,
                                "node(s) didn't have free ports for the requested pod ports": 2}
        assert why["checks"] == {"ready": 1, "taints": 2, "host-ports": 2}
        assert why["reason"] == why["message"] == (
            "0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated "
            "taint {node-role.kubernetes.io/control-plane: }, 1 node(s) were not ready, 2 node(s) didn't have free "
            "ports for the requested pod ports.")

        anti = _explain(module_stack, "rm-node-checks", "anti")
        assert anti["state"] == "FAILED" and anti["checks"] == {"unsupported": 5}
        assert anti["reason"] == "0/5 nodes are available: unsupported constraint: required pod anti-affinity."
    finally:
        rm.shutdown()
        rm.close()
