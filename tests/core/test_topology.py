"""Topology-aware gang placement (issue 35, ``partition_worker/core/topology.py``): levels from
the config, a gang's domain chosen best fit, pinned while its placeholders hold it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from common.config import load_config
from common.config.errors import ConfigError
from common.config.model import PreemptionConfig, TopologyConfig, TopologyLevelConfig
from common.constants import NODE_TAINTS, TAG_GANG_TOPOLOGY, TAG_TOLERATIONS
from partition_worker.core import AddApp, ReleaseAlloc
from partition_worker.core.commands import RemoveNode, UpdateNode
from partition_worker.core.dao import app_dao
from partition_worker.core.diagnosis import explain
from partition_worker.core.outcomes import SchedState, Termination
from tests.core.harness import Harness, partition_config, res

LEVELS = TopologyConfig((TopologyLevelConfig("block", "example.com/block"),
                         TopologyLevelConfig("rack", "example.com/rack")))


def _cluster(racks: dict[str, tuple[str, int]], per_node: int = 4, levels=LEVELS, **kw) -> Harness:
    """Nodes with ``per_node`` slots of 10 memory each; ``racks``: rack -> (block, nodes)."""
    h = Harness(config=replace(partition_config(), topology=levels), **kw)
    for rack, (block, n) in sorted(racks.items()):
        for i in range(n):
            h.node(f"{rack}-n{i}", memory=10 * per_node, vcore=per_node,
                   attrs={"example.com/block": block, "example.com/rack": rack})
    return h


def _gang(h: Harness, app: str, n: int, level: str = "rack", mode: str = "required", tag_on: str = "app",
          queue: str = "root.default") -> None:
    tag = {TAG_GANG_TOPOLOGY: json.dumps({"level": level, "mode": mode})}
    h.do(AddApp(app, queue, "alice", placeholder_ask=res(memory=10 * n, vcore=n),
                tags=tag if tag_on == "app" else {}))
    h.ask(f"{app}-ph", app, memory=10, vcore=1, repeat=n, placeholder=True, task_group="tg",
          tags=tag if tag_on == "ask" else {})


def _racks(h: Harness, app: str) -> set[str]:
    return {h.p.nodes.get(a.node_id).attributes["example.com/rack"] for a in h.allocs_of(f"{app}-ph")}


def test_a_gang_that_fits_one_rack_gets_the_fullest_rack_that_fits():
    h = _cluster({"r1": ("b1", 4), "r2": ("b1", 4), "r3": ("b2", 4)})
    h.ask("busy", "other", repeat=1)  # (no such app: rejected, nothing placed)
    h.app("other")
    h.ask("busy", "other", memory=10, vcore=1, repeat=6)
    h.step()
    # fill r2 a little so it is the tightest fit for a gang of 8
    used = {h.p.nodes.get(a.node_id).attributes["example.com/rack"] for a in h.allocs_of("busy")}
    _gang(h, "g1", 8)
    h.step(1)
    assert len(h.allocs_of("g1-ph")) == 8
    racks = _racks(h, "g1")
    assert len(racks) == 1
    pin = h.p.apps["g1"].topology.pin
    assert pin.path == {"block": h.p.nodes.get(h.allocs_of("g1-ph")[0].node_id).attributes["example.com/block"],
                        "rack": racks.pop()}
    assert h.events("GangTopologyPlaced")
    assert used  # the other app's pods went somewhere first
    detail = app_dao(h.p.apps["g1"], "default")["korralTopology"]
    assert detail == {"level": "rack", "mode": "required", "domain": pin.path, "pinned": True, "reason": ""}


def test_best_fit_prefers_the_rack_with_least_room_left():
    h = _cluster({"r1": ("b1", 4), "r2": ("b1", 4)})
    h.app("other")
    h.ask("busy", "other", memory=40, vcore=4, repeat=1, tags={"korral.io/node-selector/example.com/rack": "r2"})
    h.step()
    _gang(h, "g1", 8)
    h.step(1)
    assert _racks(h, "g1") == {"r2"}  # r2 has 12 slots left, r1 16: the tighter one


def test_a_required_gang_that_fits_only_across_racks_waits_and_says_why():
    h = _cluster({"r1": ("b1", 2), "r2": ("b1", 2), "r3": ("b2", 2)})  # 8 slots per rack
    _gang(h, "g1", 12)
    h.step()
    assert h.allocs_of("g1-ph") == []
    ask = h.p.apps["g1"].asks["g1-ph"]
    assert ask.sched_state is SchedState.FAILED
    assert ask.sched_reason == ("gang of application g1 waits for one rack (required): "
                                "rack: no rack fits 12 members; best rack r1 has room for 8")
    assert [e.message for e in h.events("GangTopologyWaiting")] == [ask.sched_reason]
    h.step(1)  # the same reason is not reported twice
    assert len(h.events("GangTopologyWaiting")) == 1
    assert app_dao(h.p.apps["g1"], "default")["korralTopology"]["reason"] == ask.sched_reason
    why = explain(h.p.nodes, h.p.apps, h.p.limits, h.p.apps["g1"], ask)
    assert why["gangTopology"] == why["reason"] == ask.sched_reason


def test_a_waiting_gang_fits_once_a_release_makes_room_in_one_rack():
    # r1's room is spread over its nodes so that the members of 20 fit on none (packing says so)
    h = _cluster({"r1": ("b1", 4), "r2": ("b1", 4)}, per_node=5)
    h.app("other")
    h.ask("busy", "other", memory=35, vcore=1, repeat=8)
    h.step()
    assert len({a.node_id for a in h.allocs_of("busy")}) == 8  # one per node: 15 left on each
    h.do(AddApp("g1", "root.default", "alice", placeholder_ask=res(memory=40, vcore=2),
                tags={TAG_GANG_TOPOLOGY: '{"level": "rack"}'}))
    h.ask("g1-ph", "g1", memory=20, vcore=1, repeat=2, placeholder=True, task_group="tg")
    h.step(1)
    ask = h.p.apps["g1"].asks["g1-ph"]
    assert h.allocs_of("g1-ph") == [] and ask.sched_reason.endswith("rack: no rack fits 2 members; best rack r1 fits 0")
    h.step(1)  # nothing changed: not chosen again
    busy = {a.node_id: a for a in h.allocs_of("busy")}
    h.do(ReleaseAlloc("other", busy["r2-n0"].uuid, Termination.STOPPED_BY_RM))
    h.step(1)
    assert {a.node_id for a in h.allocs_of("g1-ph")} == {"r2-n0"}


def test_required_block_takes_two_racks_of_one_block():
    h = _cluster({"r1": ("b1", 2), "r2": ("b1", 2), "r3": ("b2", 2)})
    _gang(h, "g1", 12, level="block")
    h.step()
    assert len(h.allocs_of("g1-ph")) == 12 and _racks(h, "g1") == {"r1", "r2"}


def test_fragmentation_aggregate_room_is_only_a_prefilter():
    # r1: 4 nodes with 3 free memory-slots of 10 each, but the members need 20: 0 fit there
    h = _cluster({"r1": ("b1", 4), "r2": ("b1", 4)}, per_node=4)
    h.app("other")
    h.ask("busy", "other", memory=10, vcore=1, repeat=4, tags={"korral.io/node-selector/example.com/rack": "r1"})
    h.step()
    assert len({a.node_id for a in h.allocs_of("busy")}) == 4  # (fair: one per node)
    h.do(AddApp("g1", "root.default", "alice", placeholder_ask=res(memory=120, vcore=6),
                tags={TAG_GANG_TOPOLOGY: '{"level": "rack"}'}))
    h.ask("g1-ph", "g1", memory=20, vcore=1, repeat=6, placeholder=True, task_group="tg")
    h.step(1)
    # r1 has 120 memory free in total but only 4 members of 20 fit its nodes: r2 it is
    assert len(h.allocs_of("g1-ph")) == 6 and _racks(h, "g1") == {"r2"}


def test_preferred_spreads_over_the_fewest_racks():
    h = _cluster({"r1": ("b1", 2), "r2": ("b1", 3), "r3": ("b1", 1), "r4": ("b2", 1)})
    _gang(h, "g1", 18, level="rack", mode="preferred")
    h.step()
    assert len(h.allocs_of("g1-ph")) == 18
    assert _racks(h, "g1") == {"r2", "r1"}  # 12 + 6: two racks of b1, not three
    assert h.p.apps["g1"].topology.pin.path == {"block": "b1"}


def test_preferred_falls_back_to_the_whole_partition():
    h = _cluster({"r1": ("b1", 1), "r2": ("b2", 1)})
    _gang(h, "g1", 8, mode="preferred")
    h.step()
    assert len(h.allocs_of("g1-ph")) == 8
    t = h.p.apps["g1"].topology
    assert t.pin is None and t.reason.startswith("placed without a domain (preferred): rack: no rack fits 8")


def test_pin_is_kept_while_placeholders_hold_it_and_chosen_again_when_none_does():
    h = _cluster({"r1": ("b1", 2), "r2": ("b2", 2)})
    _gang(h, "g1", 4)
    h.step()
    app = h.p.apps["g1"]
    first = app.topology.pin
    assert first is not None and len(h.allocs_of("g1-ph")) == 4
    # more placeholders of the same gang keep going to the pinned rack
    h.ask("g1-ph2", "g1", memory=10, vcore=1, repeat=2, placeholder=True, task_group="tg")
    h.step(1)
    assert app.topology.pin is first
    assert {h.p.nodes.get(a.node_id).attributes["example.com/rack"] for a in h.allocs_of("g1-ph2")} \
        == {first.name}
    # all placeholders gone: the pin is let go (REST still says where the gang went)
    for a in list(h.allocs_of("g1-ph")) + list(h.allocs_of("g1-ph2")):
        h.do(ReleaseAlloc("g1", a.uuid, Termination.STOPPED_BY_RM))
    assert app.topology.pin is None
    detail = app_dao(app, "default")["korralTopology"]
    assert detail["domain"] == first.path and detail["pinned"] is False
    # a real ask of the app is not held to the old rack any more
    h.ask("free", "g1", memory=10, vcore=1, repeat=1)
    h.step(1)
    assert h.allocs_of("free")


def test_a_pinned_gang_does_not_spill_out_of_its_rack():
    h = _cluster({"r1": ("b1", 1), "r2": ("b1", 1)})
    _gang(h, "g1", 4)
    h.step()
    rack = h.p.apps["g1"].topology.pin.name
    h.ask("g1-more", "g1", memory=10, vcore=1, repeat=1, placeholder=True, task_group="tg")
    h.step(1)
    assert h.allocs_of("g1-more") == []  # the rack is full; the other rack is not its domain
    assert _racks(h, "g1") == {rack}


def test_preemption_for_a_pinned_gang_takes_victims_in_its_domain_only():
    from tests.core.harness import q  # noqa: PLC0415
    root = q("root", q("low", guaranteed={"memory": 0}), q("high", guaranteed={"memory": 80, "vcore": 8}),
             submitacl="*")
    cfg = replace(partition_config(root), topology=LEVELS, preemption=PreemptionConfig(enabled=True))
    h = Harness(config=cfg)
    for rack in ("r1", "r2"):
        for i in range(2):
            h.node(f"{rack}-n{i}", memory=40, vcore=4, attrs={"example.com/block": "b1", "example.com/rack": rack})
    h.app("low", queue="root.low")
    rack = "korral.io/node-selector/example.com/rack"
    h.ask("lo1", "low", memory=10, vcore=1, repeat=4, tags={rack: "r1"})  # small pods in r1
    h.ask("lo2", "low", memory=40, vcore=1, repeat=2, tags={rack: "r2"})  # r2: one big pod per node
    h.step()
    _gang(h, "g1", 4, queue="root.high")  # r1 has the room
    h.step(1)
    assert _racks(h, "g1") == {"r1"}
    # two more members of 20: r1 must give two small victims each, r2 one big one (cheaper) -
    # but the gang is pinned to r1
    h.ask("g1-ph2", "g1", memory=20, vcore=1, repeat=2, placeholder=True, task_group="tg2")
    for _ in range(6):
        h.step(40 * 10**9)
    victims = [r for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]
    assert victims, "the gang preempted nothing"
    nodes_of = {a.uuid: a.node_id for a in h.allocs_of("lo1") + h.allocs_of("lo2")}
    assert {nodes_of[r.uuid][:2] for r in victims} == {"r1"}
    assert len(h.allocs_of("g1-ph2")) == 2 and _racks(h, "g1") == {"r1"}


def test_a_level_not_configured_waits_until_a_reload_adds_it():
    h = _cluster({"r1": ("b1", 2)}, levels=TopologyConfig((TopologyLevelConfig("block", "example.com/block"),)))
    _gang(h, "g1", 4, level="example.com/rack")  # by label key, as a PodGroup names it
    h.step()
    assert h.allocs_of("g1-ph") == []
    assert h.p.apps["g1"].asks["g1-ph"].sched_reason == \
        "topology level example.com/rack is not configured in partition default"
    h.p.update_config(replace(h.p.config, topology=LEVELS), h.now)
    h.step(1)
    assert len(h.allocs_of("g1-ph")) == 4 and h.p.apps["g1"].topology.pin.path == {"block": "b1", "rack": "r1"}


def test_the_tag_may_come_on_the_placeholder_ask():
    h = _cluster({"r1": ("b1", 1), "r2": ("b1", 1)})
    _gang(h, "g1", 4, tag_on="ask")
    h.step()
    assert len(_racks(h, "g1")) == 1 and h.p.apps["g1"].topology.pin is not None


@pytest.mark.parametrize("value, problem", [
    ("{not json", "not JSON"),
    ('{"level": "rack", "mode": "sometimes"}', "unknown mode 'sometimes' (required or preferred)"),
    ('["rack"]', 'must be a JSON object {"level": LEVEL, "mode": "required"|"preferred"}'),
])
def test_a_bad_tag_rejects_the_app_or_the_ask_naming_it(value, problem):
    h = _cluster({"r1": ("b1", 1)})
    h.do(AddApp("bad", "root.default", "alice", tags={TAG_GANG_TOPOLOGY: value}))
    reason = h.rejected_app_reasons()["bad"]
    assert reason.startswith(f"application bad: invalid tag {TAG_GANG_TOPOLOGY}: ") and problem in reason
    h.app("ok")
    h.ask("k", "ok", placeholder=True, task_group="tg", tags={TAG_GANG_TOPOLOGY: value})
    reason = h.rejected_ask_reasons()["k"]
    assert reason.startswith(f"ask k of application ok: invalid tag {TAG_GANG_TOPOLOGY}: ") and problem in reason


def test_apps_without_the_tag_are_unchanged():
    h = _cluster({"r1": ("b1", 1), "r2": ("b1", 1)})
    h.do(AddApp("g1", "root.default", "alice", placeholder_ask=res(memory=80, vcore=8)))
    h.ask("g1-ph", "g1", memory=10, vcore=1, repeat=8, placeholder=True, task_group="tg")
    h.step()
    assert _racks(h, "g1") == {"r1", "r2"} and h.p.apps["g1"].topology is None  # fair: spread


def test_domain_room_is_kept_as_allocations_land_and_leave():
    h = _cluster({"r1": ("b1", 2), "r2": ("b1", 2)})
    idx = h.p.nodes.topology
    assert idx.domains[1]["r1"].free == {"memory": 80, "vcore": 8}
    assert idx.domains[0]["b1"].free == {"memory": 160, "vcore": 16}
    h.app("a")
    h.ask("x", "a", memory=10, vcore=1, repeat=3, tags={"korral.io/node-selector/example.com/rack": "r1"})
    h.step()
    assert idx.domains[1]["r1"].free == {"memory": 50, "vcore": 5}
    for a in h.allocs_of("x"):
        h.do(ReleaseAlloc("a", a.uuid, Termination.STOPPED_BY_RM))
    assert idx.domains[1]["r1"].free == {"memory": 80, "vcore": 8}


def test_a_gang_that_tolerates_tainted_gpu_nodes_gets_a_rack_of_them():
    h = Harness(config=replace(partition_config(), topology=LEVELS))
    taint = json.dumps([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    for rack in ("r1", "r2"):
        for i in range(2):
            h.node(f"{rack}-n{i}", memory=40, vcore=4, attrs={"example.com/block": "b1", "example.com/rack": rack,
                                                             NODE_TAINTS: taint})
    tolerate = json.dumps([{"key": "nvidia.com/gpu", "operator": "Exists"}])
    h.do(AddApp("g1", "root.default", "alice", placeholder_ask=res(memory=60, vcore=6),
                tags={TAG_GANG_TOPOLOGY: '{"level": "rack"}'}))
    h.ask("g1-ph", "g1", memory=10, vcore=1, repeat=6, placeholder=True, task_group="tg",
          tags={TAG_TOLERATIONS: tolerate})
    h.step()
    assert len(h.allocs_of("g1-ph")) == 6 and len(_racks(h, "g1")) == 1


def test_a_gang_a_queue_max_holds_keeps_waiting_for_it_with_one_placed_event():
    from tests.core.harness import q  # noqa: PLC0415
    root = q("root", q("small", max={"memory": 40, "vcore": 40}), submitacl="*")
    h = Harness(config=replace(partition_config(root), topology=LEVELS))
    for i in range(4):
        h.node(f"r1-n{i}", memory=40, vcore=4, attrs={"example.com/block": "b1", "example.com/rack": "r1"})
    h.app("other", queue="root.small")
    h.ask("busy", "other", memory=40, vcore=1)
    h.step()
    _gang(h, "g1", 4, queue="root.small")
    for _ in range(3):
        h.step(1)
    assert h.allocs_of("g1-ph") == []  # the queue is full
    assert h.p.apps["g1"].asks["g1-ph"].sched_state is SchedState.SKIPPED
    assert len(h.events("GangTopologyPlaced")) == 1  # chosen each cycle, reported once
    h.do(ReleaseAlloc("other", h.allocs_of("busy")[0].uuid, Termination.STOPPED_BY_RM))
    h.step(1)
    assert len(h.allocs_of("g1-ph")) == 4 and len(_racks(h, "g1")) == 1


def test_the_domain_is_chosen_for_the_whole_gang_when_its_placeholders_arrive_one_by_one():
    # an RM (the k8s shim) sends one ask per placeholder pod: a domain chosen for the first would
    # be the tightest for one member (r1), not for the gang of 6 (r2)
    h = _cluster({"r1": ("b1", 1), "r2": ("b1", 2)})
    h.do(AddApp("g1", "root.default", "alice", placeholder_ask=res(memory=60, vcore=6),
                tags={TAG_GANG_TOPOLOGY: '{"level": "rack"}'}))
    for i in range(6):
        h.ask(f"g1-ph{i}", "g1", memory=10, vcore=1, placeholder=True, task_group="tg")
        h.step(1)
    assert not h.events("GangTopologyWaiting")  # (waiting for its members is not news)
    assert {h.p.nodes.get(a.alloc.node_id).attributes["example.com/rack"] for a in h.log.allocations
            if a.alloc.app_id == "g1"} == {"r2"}


def test_a_gang_whose_placeholders_never_all_arrive_is_placed_after_the_wait():
    h = _cluster({"r1": ("b1", 1), "r2": ("b1", 2)})
    h.do(AddApp("g1", "root.default", "alice", placeholder_ask=res(memory=60, vcore=6),
                tags={TAG_GANG_TOPOLOGY: '{"level": "rack"}'}))
    h.ask("g1-ph", "g1", memory=10, vcore=1, repeat=3, placeholder=True, task_group="tg")
    h.step(1)
    assert h.allocs_of("g1-ph") == []
    h.step(h.settings.gang_arrival_wait_ns)
    assert len(h.allocs_of("g1-ph")) == 3 and _racks(h, "g1") == {"r1"}


def test_a_node_relabelled_or_removed_moves_its_room():
    h = _cluster({"r1": ("b1", 2), "r2": ("b1", 2)})
    idx = h.p.nodes.topology
    h.do(UpdateNode("r1-n0", attributes={"example.com/rack": "r2"}))
    assert idx.domains[1]["r1"].free == {"memory": 40, "vcore": 4}
    assert idx.domains[1]["r2"].free == {"memory": 120, "vcore": 12}
    assert idx.domains[1]["r2"].nodes == {"r1-n0", "r2-n0", "r2-n1"}
    h.do(RemoveNode("r1-n1"))
    assert "r1" not in idx.domains[1] and idx.domains[0]["b1"].free == {"memory": 120, "vcore": 12}


@pytest.mark.parametrize("levels, message", [
    ("[{name: rack}]", "partition default: topology level 1 (rack): label is required"),
    ("[{name: rack, label: a}, {name: rack, label: b}]", "partition default: topology level 2 (rack): duplicate level name rack"),
    ("[{name: a, label: x}, {name: b, label: x}]", "partition default: topology level 2 (b): label x is already used"),
    ("[{name: host, label: x}]", "name host is reserved"),
    ("[{label: x}]", "partition default: topology level 1: name is required"),
    ("[{name: a, label: x, level: 1}]", "unknown key 'level' at partitions[0].topology.levels[0].level"),
])
def test_config_validation_names_the_partition_and_the_level(levels, message):
    with pytest.raises(ConfigError) as exc:
        load_config(f"partitions:\n  - name: default\n    queues: [{{name: root}}]\n    topology:\n      levels: {levels}\n")
    assert message in str(exc.value)
