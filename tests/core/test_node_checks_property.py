"""The pre-filtered path and the full chain agree (core/feasibility.py, core/node_choice.py).

``find_node`` walks only the nodes the node order kept (``open_for_asks``, cached per node by
``NodeCollection``; tainted nodes in ``wide`` for asks that tolerate them) and evaluates the
checks that do not pre-filter (``Chain.walker``); reservations scan with the collection's cached
verdict (``BoundChain`` collapse); a plain ask (``is_plain``) binds fewer checks. Whatever the
nodes (drained, not ready, reserved, tainted, labelled, ports in use) and asks (selector,
required node, tolerations, affinity, host ports), each must say what the whole chain says.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.constants import (NODE_LABELS, NODE_TAINTS, TAG_HOST_PORTS, TAG_NODE_AFFINITY, TAG_TOLERATIONS,
                              TAG_UNSUPPORTED_CONSTRAINTS)
from common.resources import Resource
from partition_worker.core.application import Application
from partition_worker.core.cycle import Cycle
from partition_worker.core.feasibility import CHAIN, CLOSED, Purpose, gate, is_plain, open_for_asks
from partition_worker.core.node import Node, NodeCollection
from partition_worker.core.node_choice import find_node
from partition_worker.core.node_terms import constraints_of
from partition_worker.core.objects import Ask, Reservation
from partition_worker.core.queue import Queue

ZONES = ("a", "b")
GPU = [{"key": "gpu", "effect": "NoSchedule"}]
TAINTS = ([], [], GPU, GPU, GPU + [{"key": "spot", "value": "yes", "effect": "NoExecute"}],
          [{"key": "soft", "effect": "PreferNoSchedule"}])
TOLERATIONS = (None, [{"key": "gpu", "operator": "Exists"}], [{"key": "gpu", "operator": "Exists"}],
               [{"operator": "Exists"}], [{"key": "other", "operator": "Exists", "effect": "NoExecute"}])
AFFINITIES = (None, None, {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
              {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]},
                                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
PORTS = (None, [{"hostPort": 80}], [{"hostPort": 80, "hostIP": "10.0.0.1"}])


@st.composite
def node_specs(draw):
    return dict(
        cap=(draw(st.integers(0, 100)), draw(st.integers(0, 10))),
        used=(draw(st.integers(0, 60)), draw(st.integers(0, 6))),
        schedulable=draw(st.sampled_from([True] * 4 + [False])), ready=draw(st.sampled_from([True] * 4 + [False])),
        zone=draw(st.sampled_from(ZONES + (None,))), labelled=draw(st.booleans()),
        taints=draw(st.sampled_from(TAINTS)), ports=draw(st.sampled_from(PORTS)),
        reserved_by=draw(st.sampled_from([None] * 5 + [("other", "held"), ("other", "ds"), ("app1", "k")])))


@st.composite
def ask_specs(draw, n_nodes: int):
    return dict(
        memory=draw(st.integers(0, 60)), vcore=draw(st.integers(0, 3)),
        zone=draw(st.sampled_from(ZONES + (None,))),
        required=draw(st.sampled_from([""] * n_nodes + [f"n{i}" for i in range(n_nodes)])),
        tolerations=draw(st.sampled_from(TOLERATIONS)), affinity=draw(st.sampled_from(AFFINITIES)),
        ports=draw(st.sampled_from(PORTS)), unsupported=draw(st.sampled_from([""] * 7 + ["pod anti-affinity"])))


def _collection(specs, policy="fair") -> NodeCollection:
    from common.config.policies import parse_node_sort_policy
    nodes = NodeCollection(gate, parse_node_sort_policy(policy))
    for i, spec in enumerate(specs):
        labels = {"zone": spec["zone"]} if spec["zone"] else {}
        attrs = {NODE_LABELS: json.dumps(labels)} if spec["labelled"] else labels
        if spec["taints"]:
            attrs[NODE_TAINTS] = json.dumps(spec["taints"])
        n = Node(node_id=f"n{i}", attributes=attrs,
                 capacity=Resource({"memory": spec["cap"][0], "vcore": spec["cap"][1]}),
                 allocated=Resource({"memory": spec["used"][0], "vcore": spec["used"][1]}),
                 schedulable=spec["schedulable"], ready=spec["ready"])
        if spec["reserved_by"]:
            n.reservation = Reservation(n.node_id, *spec["reserved_by"], 0)
        n.apply_attributes()
        nodes.add(n)
        if spec["ports"]:
            nodes.track_ports(n, {TAG_HOST_PORTS: json.dumps(spec["ports"])}, 1)
    return nodes


def _apps() -> dict[str, Application]:
    leaf = Queue(name="a", path="root.a", parent=None, is_leaf=True)
    apps = {}
    for app_id, key, required in (("other", "held", ""), ("other", "ds", "n0"), ("app1", "k", "")):
        app = apps.setdefault(app_id, Application(app_id=app_id, queue=leaf, user="u", groups=(),
                                                   tags={}, submission_time_ns=0, seq=0))
        app.asks[key] = Ask(key, app_id, Resource({"memory": 1}), 1, 1, 0, 0, 0, required_node=required)
    return apps


def _ask(spec, nodes: NodeCollection, key="new") -> Ask:
    tags = {tag: json.dumps(spec[name]) for tag, name in ((TAG_TOLERATIONS, "tolerations"),
                                                          (TAG_NODE_AFFINITY, "affinity"), (TAG_HOST_PORTS, "ports"))
            if spec[name] is not None}
    if spec["unsupported"]:
        tags[TAG_UNSUPPORTED_CONSTRAINTS] = spec["unsupported"]
    return Ask(key, "app1", Resource({"memory": spec["memory"], "vcore": spec["vcore"]}), 1, 1, 0, 0, 0, tags,
               required_node=spec["required"], selector=(("zone", spec["zone"]),) if spec["zone"] else (),
               constraints=constraints_of(tags))


CASES = st.lists(node_specs(), min_size=1, max_size=12).flatmap(
    lambda nodes: st.tuples(st.just(nodes), st.lists(ask_specs(len(nodes)), min_size=1, max_size=6),
                            st.sampled_from(["fair", "binpacking"])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASES)
def test_the_prefiltered_walk_and_the_cached_verdicts_agree_with_the_whole_chain(case) -> None:
    node_specs_, ask_specs_, policy = case
    nodes = _collection(node_specs_, policy)
    apps = _apps()
    for spec in ask_specs_:
        ask = _ask(spec, nodes)
        for purpose in Purpose:
            chain = CHAIN.bind(ask, purpose, apps)
            cached = CHAIN.bind(ask, purpose, apps, nodes=nodes)
            for node in nodes.nodes.values():
                full = chain.passes(node)
                assert (chain.first_rejection(node) is None) is full
                assert cached.passes(node) is full, (purpose, node)
                assert cached.first_rejection(node) == chain.first_rejection(node)
                for check in CHAIN.prefilters:  # open for every ask: passes for this one
                    bound = check.bind(ask, purpose, apps, nodes)
                    assert not check.open(node) or bound is None or bound.passes(node)
                    if bound is not None and bound.ordinary:
                        assert bound.passes(node) is check.open(node)
            if is_plain(ask, nodes):  # binds fewer checks, says the same
                assert not ask.selector and not ask.required_node
        assert all(node.open is open_for_asks(node) for node in nodes.nodes.values())
        if ask.required_node:
            continue
        walker = CHAIN.walker(ask, apps, nodes)
        allocate = CHAIN.bind(ask, Purpose.ALLOCATE, apps, nodes=nodes)
        for node in nodes.nodes.values():
            if walker.never is not None:
                assert not allocate.passes(node)
            elif node.open:
                assert walker.in_order(node) is allocate.passes(node)
            elif allocate.passes(node):  # a node set aside that the ask passes: it tolerates its taints
                assert walker.widens and not node.gate == CLOSED
        # find_node takes the first node in policy order the whole chain passes
        fitting = sorted((n for n in nodes.nodes.values() if allocate.passes(n)), key=lambda n: n.sort_key)
        cycle = Cycle(0, nodes, apps, None, None, False)  # (no ledger: no required-node ask here)
        got = find_node(cycle, ask)
        walked = [n for n in fitting if n.node_id not in nodes.full]
        if walked:
            assert got is walked[0]
        elif fitting and nodes.needs_full_scan(ask.resource):
            assert got is fitting[0]
        else:
            assert got is None
