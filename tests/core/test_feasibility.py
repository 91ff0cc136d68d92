"""The feasibility chain (core/feasibility.py): each check's rejection, its reason and whether
waiting can help; and explain agreeing with the scheduler on clusters where each check fires.
(The Kubernetes checks: test_node_checks.py.)"""

from __future__ import annotations

import json
import random

import pytest

from common.constants import TAG_NODE_SELECTOR_PREFIX, TAG_REQUIRED_NODE
from common.resources import Resource
from partition_worker.core import (AddAsk, AddNode, CoreSettings, DrainNode, ReleaseAlloc,
                                   ReleaseAsk)
from partition_worker.core.application import Application
from partition_worker.core.diagnosis import explain
from partition_worker.core.feasibility import (AFFINITY_REASON, CHAIN, READY, RESERVATION, RESOURCES,
                                               SCHEDULABLE, SELECTOR, TAINTS, Purpose, Rejection,
                                               insufficient, open_for_asks)
from partition_worker.core.node import Node
from partition_worker.core.objects import Ask, Reservation
from partition_worker.core.queue import Queue
from tests.core.harness import SECOND, Harness, partition_config, q

A, R = Purpose.ALLOCATE, Purpose.RESERVE
NO_ROOM_NOW, NEVER_FITS = insufficient("memory", True), insufficient("memory", False)


def _node(node_id="n1", cap=(100, 10), used=(0, 0), occupied=(0, 0), schedulable=True, ready=True,
          attrs=None, reserved_by=None) -> Node:
    n = Node(node_id=node_id, attributes=dict(attrs or {}),
             capacity=Resource({"memory": cap[0], "vcore": cap[1]}),
             occupied=Resource({"memory": occupied[0], "vcore": occupied[1]}),
             allocated=Resource({"memory": used[0], "vcore": used[1]}),
             schedulable=schedulable, ready=ready)
    n.recompute_available()
    if reserved_by is not None:
        n.reservation = Reservation(node_id, reserved_by[0], reserved_by[1], 0)
    return n


def _ask(key="k", app_id="app1", memory=10, required="", selector=(), reserved="") -> Ask:
    return Ask(key=key, app_id=app_id, resource=Resource({"memory": memory, "vcore": 1}),
               max_allocations=1, pending=1, priority=0, create_time_ns=0, seq=1,
               required_node=required, selector=tuple(selector), reserved_node=reserved)


def _apps(**asks_by_app: list[Ask]) -> dict[str, Application]:
    leaf = Queue(name="a", path="root.a", parent=None, is_leaf=True)
    apps = {}
    for app_id, asks in asks_by_app.items():
        app = Application(app_id=app_id, queue=leaf, user="u", groups=(), tags={},
                          submission_time_ns=0, seq=0)
        for a in asks:
            app.asks[a.key] = a
        apps[app_id] = app
    return apps


ORDINARY_HOLDER = _apps(other=[_ask("held", "other")], app1=[_ask("mine", "app1")])
DAEMONSET_HOLDER = _apps(other=[_ask("ds", "other", required="n1")])
ZONE_A = (("zone", "a"),)
REJECTION_CASES = [
    # id, node, ask, purpose, apps, expected rejection (None = the node passes)
    ("drained node", _node(schedulable=False), _ask(), A, {},
     Rejection("schedulable", "node(s) were unschedulable", True)),
    ("node not ready", _node(ready=False), _ask(), A, {}, Rejection("ready", "node(s) were not ready", True)),
    ("node reserved by another ask", _node(reserved_by=("other", "held")), _ask(), A, ORDINARY_HOLDER,
     Rejection("reservation", "node(s) were reserved for another ask", True)),
    ("node reserved by the ask itself", _node(reserved_by=("app1", "k")), _ask(reserved="n1"), A, {}, None),
    ("daemon set ask takes an ordinary reservation", _node(reserved_by=("other", "held")),
     _ask(required="n1"), A, ORDINARY_HOLDER, None),
    ("daemon set ask does not take another daemon set's reservation",
     _node(reserved_by=("other", "ds")), _ask(required="n1"), A, DAEMONSET_HOLDER,
     RESERVATION.rejection),
    ("daemon set ask reserving spares its own app's reservation", _node(reserved_by=("app1", "mine")),
     _ask(required="n1"), R, ORDINARY_HOLDER, RESERVATION.rejection),
    ("another node is required", _node(), _ask(required="n2"), A, {},
     Rejection("required-node", "node(s) didn't match the requested node name", False)),
    ("node selector does not match", _node(attrs={"zone": "b"}), _ask(selector=ZONE_A), A, {},
     Rejection("selector", AFFINITY_REASON, False)),
    ("node selector matches a k8s label", _node(attrs={"si.io/nodelabels": json.dumps({"zone": "a"})}),
     _ask(selector=ZONE_A), A, {}, None),
    ("no free room now, but once allocations end", _node(used=(95, 1)), _ask(), A, {},
     Rejection("resources", "Insufficient memory", True)),
    ("capacity too small even when empty", _node(cap=(5, 10)), _ask(), A, {},
     Rejection("resources", "Insufficient memory", False)),
    ("the first resource that does not fit is named", _node(cap=(100, 0)), _ask(), A, {},
     Rejection("resources", "Insufficient vcore", False)),
    ("occupied leaves too little room for ever", _node(occupied=(95, 0)), _ask(), A, {}, NEVER_FITS),
    ("reserving needs no free room", _node(used=(95, 1)), _ask(), R, {}, None),
    ("reserving needs capacity - occupied", _node(occupied=(95, 0)), _ask(), R, {}, NEVER_FITS),
    ("the first stage that rejects names the reason", _node(schedulable=False, cap=(5, 10)), _ask(),
     A, {}, SCHEDULABLE.rejection),
    ("a node that passes every stage", _node(), _ask(selector=()), A, {}, None),
]


@pytest.mark.parametrize("node, ask, purpose, apps, expected", [c[1:] for c in REJECTION_CASES],
                         ids=[c[0] for c in REJECTION_CASES])
def test_each_stage_rejects_with_its_reason_and_says_whether_waiting_helps(node, ask, purpose, apps,
                                                                           expected) -> None:
    got = CHAIN.bind(ask, purpose, apps).first_rejection(node)
    assert got == expected
    assert CHAIN.bind(ask, purpose, apps).passes(node) is (expected is None)
    assert CHAIN.first_rejection(node, ask, purpose, apps) == expected


def test_the_chain_runs_cheap_checks_first_then_resources_then_the_inter_pod_checks() -> None:
    # kube-scheduler's order: NodeResourcesFit before PodTopologySpread and InterPodAffinity
    assert [c.name for c in CHAIN.checks] == ["unsupported", "schedulable", "ready", "reservation",
                                              "required-node", "gang-topology", "taints", "selector", "node-affinity", "node-requirements",
                                              "host-ports", "resources", "topology-spread", "pod-affinity",
                                              "pod-anti-affinity", "existing-anti-affinity"]
    assert NO_ROOM_NOW.retry_can_help and not NEVER_FITS.retry_can_help


def test_a_bound_chain_keeps_only_the_stages_that_can_reject_the_ask() -> None:
    plain = CHAIN.bind(_ask(), A, {})  # without the nodes: any node may be tainted
    assert [b.check for b in plain.checks] == [SCHEDULABLE, READY, RESERVATION, TAINTS, RESOURCES]
    fancy = CHAIN.bind(_ask(required="n1", selector=ZONE_A), A, {})
    assert len(fancy.checks) == 7
    assert len(CHAIN.bind(_ask(), A, {}, skip=(READY, SELECTOR)).checks) == 4


def test_open_for_asks_is_the_prefiltering_checks_for_an_ask_without_reservation() -> None:
    assert CHAIN.prefilters == (SCHEDULABLE, READY, RESERVATION, TAINTS)
    for node in (_node(), _node(schedulable=False), _node(ready=False),
                 _node(reserved_by=("other", "held"))):
        state_only = CHAIN.bind(_ask(), A, ORDINARY_HOLDER, skip=(RESOURCES,))
        assert open_for_asks(node) is state_only.passes(node)


# --------------------------------------------------------------------------- explain == scheduler
def _cluster(required: str = "", with_fitting_node: bool = True) -> Harness:
    """One node per stage for ask ``k`` (memory 50, selector zone=a) of app1, each rejected by
    that stage, plus ``fit`` that takes it."""
    h = Harness(partition_config(q("root", q("a"), submitacl="*")),
                settings=CoreSettings(reservation_delay_ns=10**6 * SECOND))
    zone_a = {"zone": "a"}
    h.node("full", memory=100, vcore=10, attrs=zone_a).app("filler", queue="root.a")
    h.ask("fill", "filler", memory=80, vcore=1)  # placed before the other nodes exist
    h.step()
    h.node("drained", memory=100, vcore=10, attrs=zone_a).do(DrainNode("drained"))
    h.node("notready", memory=100, vcore=10, attrs={**zone_a, "ready": "false"})
    h.node("reserved", memory=100, vcore=10, attrs=zone_a)
    h.node("zone-b", memory=100, vcore=10, attrs={"zone": "b"})
    h.node("small", memory=20, vcore=10, attrs=zone_a)
    if with_fitting_node:
        h.node("fit", memory=100, vcore=10, attrs=zone_a)
    h.ask("hold", "filler", memory=500, vcore=1)  # never fits: its reservation stays
    holder = h.p.apps["filler"]
    h.p.ledger.reserve(holder, holder.asks["hold"], h.p.nodes.get("reserved"), h.now)
    h.app("app1", queue="root.a")
    tags = {TAG_NODE_SELECTOR_PREFIX + "zone": "a"}
    if required:
        tags[TAG_REQUIRED_NODE] = required
    h.do(AddAsk("k", "app1", Resource({"memory": 50, "vcore": 1}), tags=tags))
    return h


DRAINED, NOT_READY = "node(s) were unschedulable", "node(s) were not ready"
OTHER_NODE = "node(s) didn't match the requested node name"
EVERY_STAGE = {DRAINED: 1, NOT_READY: 1, "node(s) were reserved for another ask": 1,
               AFFINITY_REASON: 1, "Insufficient memory": 2}
AGREEMENT_CASES = [
    ("a fitting node", dict(), {**EVERY_STAGE, "fits": 1}, "fit"),
    ("no fitting node", dict(with_fitting_node=False), EVERY_STAGE, None),
    # a daemon-set ask may take an ordinary ask's reservation: "reserved" is just another node
    ("required node that fits", dict(required="fit"),
     {DRAINED: 1, NOT_READY: 1, OTHER_NODE: 4, "fits": 1}, "fit"),
    ("required node reserved by an ordinary ask", dict(required="reserved"),
     {DRAINED: 1, NOT_READY: 1, OTHER_NODE: 4, "fits": 1}, "reserved"),
    ("required node too small", dict(required="small"),
     {DRAINED: 1, NOT_READY: 1, OTHER_NODE: 4, "Insufficient memory": 1}, None),
]


@pytest.mark.parametrize("kw, counts, placed_on", [c[1:] for c in AGREEMENT_CASES],
                         ids=[c[0] for c in AGREEMENT_CASES])
def test_explain_and_the_scheduler_agree_where_each_stage_fires(kw, counts, placed_on) -> None:
    h = _cluster(**kw)
    app = h.p.apps["app1"]
    assert explain(h.p.nodes, h.p.apps, h.p.limits, app, app.asks["k"])["nodes"] == counts
    h.step()
    assert [a.node_id for a in h.allocs_of("k")] == ([placed_on] if placed_on else [])
    if placed_on is None:
        assert app.asks["k"].sched_state.value == "FAILED"


@pytest.mark.parametrize("seed", range(8))
def test_explain_finds_a_fitting_node_exactly_when_the_scheduler_places_the_ask(seed) -> None:
    rnd = random.Random(seed)
    h = Harness(partition_config(q("root", q("a"), submitacl="*")),
                settings=CoreSettings(reservation_delay_ns=10**6 * SECOND))
    h.app("app1", queue="root.a")
    for i in range(12):
        attrs = {"zone": rnd.choice("ab"), "ready": rnd.choice(["true", "true", "false"])}
        h.do(AddNode(f"n{i}", Resource({"memory": rnd.randint(10, 100), "vcore": 10}),
                     Resource({"memory": rnd.choice([0, 0, 30])}), attrs))
        if rnd.random() < 0.2:
            h.do(DrainNode(f"n{i}"))
    for step in range(40):
        tags = {}
        if rnd.random() < 0.3:
            tags[TAG_NODE_SELECTOR_PREFIX + "zone"] = rnd.choice("ab")
        if rnd.random() < 0.2:
            tags[TAG_REQUIRED_NODE] = f"n{rnd.randrange(12)}"
        key = f"k{step}"
        h.do(AddAsk(key, "app1", Resource({"memory": rnd.randint(5, 60), "vcore": 1}), tags=tags))
        app = h.p.apps["app1"]
        fits = explain(h.p.nodes, h.p.apps, h.p.limits, app, app.asks[key])["nodes"].get("fits", 0)
        before = len(h.log.allocations)
        h.step()
        placed = len(h.log.allocations) > before
        assert placed is (fits > 0), (step, tags)
        if not placed:
            h.do(ReleaseAsk("app1", key))
        elif rnd.random() < 0.4:
            h.do(ReleaseAlloc("app1", rnd.choice(list(app.allocations))))

