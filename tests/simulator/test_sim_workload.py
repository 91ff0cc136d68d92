"""Workload parsing (every fault named), seeded plans, presets."""

from __future__ import annotations

import pytest

from common.config.loader import load_config
from simulator.presets import PRESETS
from simulator.workload import WorkloadError, default_config_text, parse_workload, plan

GOOD = """
name: w
seed: 5
nodes:
  - {name: n, count: 3, resources: {vcore: 4, memory: 8Gi}}
  - {name: g, count: 2, partition: gpu, resources: {vcore: 8, memory: 16Gi}, attributes: {si/rackname: r2}}
apps:
  - {name: a, count: 4, queue: root.a, user: alice, groups: [dev], arrival: {interval: 1, jitter: 0.5},
     tasks: [2, 6], resources: {vcore: 500m, memory: 1Gi}, duration: [1, 2], priority: 3}
  - {name: b, count: 1, queue: b, partition: gpu, tasks: 2, resources: {vcore: 1}}
"""


def test_a_good_workload_parses_with_quantities_in_yunikorn_units():
    w = parse_workload(GOOD)
    assert w.nodes[0].resources == {"vcore": 4000, "memory": 8 * 2**30}
    assert w.apps[0].resources == {"vcore": 500, "memory": 2**30}
    assert w.apps[1].queue == "root.b" and w.apps[1].partition == "gpu"
    assert w.apps[0].tasks == (2, 6) and w.apps[0].duration == (1.0, 2.0)


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    w = parse_workload(GOOD)
    assert plan(w) == plan(w, 5)
    assert plan(w, 6) != plan(w, 5)


def test_plan_expands_counts_and_tags_non_default_partitions_on_nodes():
    p = plan(parse_workload(GOOD))
    assert [n.node_id for n in p.nodes] == ["n-0000", "n-0001", "n-0002", "g-0000", "g-0001"]
    assert "si/node-partition" not in p.nodes[0].attributes
    assert p.nodes[3].attributes["si/node-partition"] == "gpu"
    assert p.nodes[3].attributes["si/rackname"] == "r2"
    assert len(p.apps) == 5
    assert all(2 <= len(a.tasks) <= 6 for a in p.apps if a.template.name == "a")
    assert [a.submit_at for a in p.apps] == sorted(a.submit_at for a in p.apps)


@pytest.mark.parametrize("text, message", [
    ("nodes: []\napps: []", "'nodes' must be a non-empty list"),
    ("{nodes: [{name: n, resources: {vcore: 1}}], apps: [{name: a, resources: {vcore: 1}, colour: red}]}",
     "app template 'a': unknown key 'colour'"),
    ("{nodes: [{name: n, resources: {vcore: -1}}], apps: [{name: a, resources: {vcore: 1}}]}",
     "node group 'n': resources: resource vcore: invalid quantity '-1'"),
    ("{nodes: [{name: n, resources: {vcore: 1}}], apps: [{name: a, resources: {vcore: 1}, tasks: [5, 2]}]}",
     "app template 'a': tasks: max 2 is below min 5"),
    ("{nodes: [{name: n, resources: {vcore: 1}}], apps: [{name: a, partition: gpu, resources: {vcore: 1}}]}",
     "app template 'a': partition 'gpu' has no nodes"),
    ("{nodes: [{name: n, count: 0, resources: {vcore: 1}}], apps: [{name: a, resources: {vcore: 1}}]}",
     "node group 'n': count: must be an integer >= 1"),
    ("{nodes: [{name: n, resources: {vcore: 1}}, {name: n, resources: {vcore: 1}}], "
     "apps: [{name: a, resources: {vcore: 1}}]}", "node group 'n': name used twice"),
    ("{nodes: [{name: n, resources: {vcore: 1}}], apps: [{name: a}]}",
     "app template 'a': resources: must be a non-empty map"),
    ("nodes: [", "not valid YAML"),
], ids=["empty lists", "unknown key", "negative quantity", "inverted range", "partition without nodes",
        "zero count", "duplicate group", "missing resources", "broken yaml"])
def test_bad_workloads_are_refused_naming_the_object_at_fault(text, message):
    with pytest.raises(WorkloadError) as err:
        parse_workload(text, "w.yaml")
    assert any(message in e for e in err.value.errors), err.value.errors


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_parses_and_its_config_is_valid(name):
    w = parse_workload(PRESETS[name][0], name)
    load_config(w.config or default_config_text(w))
    assert plan(w).task_count > 0


def test_demo_preset_is_a_few_thousand_tasks_over_two_queues_and_two_partitions():
    p = plan(parse_workload(PRESETS["demo"][0]))
    assert 2000 <= p.task_count <= 5000
    assert {a.template.queue for a in p.apps} == {"root.a", "root.b"}
    assert {n.partition for n in p.nodes} == {"default", "edge"}


def test_default_config_lists_every_partition_with_the_provided_rule():
    cfg = load_config(default_config_text(parse_workload(GOOD)))
    assert [p.name for p in cfg.partitions] == ["default", "gpu"]
    assert all(p.placementrules[0].name == "provided" and p.placementrules[0].create for p in cfg.partitions)


def test_config_updates_and_foreign_allocations_are_read_and_checked():
    from simulator.workload import WorkloadError, parse_workload, plan
    w = parse_workload(PRESETS["quota"][0])
    assert [at for at, _ in w.config_updates] == [5.0] and "vcore: 20" in w.config_updates[0][1]
    nodes = plan(parse_workload(PRESETS["foreign"][0])).nodes
    assert nodes[0].foreign == {"vcore": 4000, "memory": 8 * 2**30}
    with pytest.raises(WorkloadError, match=r"config_updates\[0\]: must be a map with at"):
        parse_workload(PRESETS["small"][0] + "config_updates: [5]\n")
