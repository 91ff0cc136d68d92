"""YuniKorn's core benchmark scenario, in one place for `korral bench core` and `korral bench e2e`.

Two queues, ``root.a`` (guaranteed memory 100000, vcore 10000) and ``root.b`` (memory 1000000,
vcore 10000), one app in each, N nodes sized so that every ask of {memory: 10, vcore: 1} fits.
vcore is in milli-cores internally, as YuniKorn stores it; the YAML writes it with the ``m`` suffix.
"""

from __future__ import annotations

import yaml

from common import si_pb2
from common.config.model import NodeSortPolicyConfig, PartitionConfig, QueueConfig, ResourcesConfig

QUEUE_GUARANTEED = {"a": {"memory": 100_000, "vcore": 10_000}, "b": {"memory": 1_000_000, "vcore": 10_000}}
ASK = {"memory": 10, "vcore": 1}

# The scenario's queues.yaml, for an RM to register with (`bench e2e`)
CONFIG_YAML = yaml.safe_dump({"partitions": [{"name": "default", "queues": [{
    "name": "root", "submitacl": "*", "queues": [
        {"name": name, "resources": {"guaranteed": {"memory": g["memory"], "vcore": f"{g['vcore']}m"}}}
        for name, g in QUEUE_GUARANTEED.items()]}]}]}, sort_keys=False)


def partition_config(node_policy: str = "fair", app_policy: str = "fifo") -> PartitionConfig:
    """The scenario's partition, built directly (no YAML parsing on the benchmark's clock)."""
    props = {"application.sort.policy": app_policy}
    root = QueueConfig(name="root", submitacl="*", queues=tuple(
        QueueConfig(name=name, properties=props, resources=ResourcesConfig(guaranteed=guaranteed))
        for name, guaranteed in QUEUE_GUARANTEED.items()))
    return PartitionConfig(name="default", queues=(root,), nodesortpolicy=NodeSortPolicyConfig(type=node_policy))


def node_size(nodes: int, asks: int) -> dict[str, int]:
    """Each node holds its share of the asks and one more."""
    per_node = asks // nodes + 1
    return {name: q * per_node for name, q in ASK.items()}


def node_request(nodes: int, asks: int, attributes: dict[str, str] | None = None) -> si_pb2.NodeRequest:
    size = node_size(nodes, asks)
    req = si_pb2.NodeRequest()
    for i in range(nodes):
        n = req.nodes.add(nodeID=f"node-{i:06d}", action=si_pb2.NodeInfo.CREATE, attributes=attributes or {})
        for name, value in size.items():
            n.schedulableResource.resources[name].value = value
    return req
