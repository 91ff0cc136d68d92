"""Kubernetes' node filters as node checks (core/feasibility.py, core/node_terms.py): taints and
tolerations, required node affinity, host ports, unsupported constraints, readiness; each with
Kubernetes' semantics, kube-scheduler's reason, whether waiting can help; bad values named.
"""

from __future__ import annotations

import json

import pytest

from common.constants import (NODE_LABELS, NODE_TAINTS, TAG_HOST_PORTS, TAG_NODE_AFFINITY, TAG_NODE_REQUIREMENTS,
                              TAG_NODE_SELECTOR_PREFIX, TAG_TOLERATIONS, TAG_UNSUPPORTED_CONSTRAINTS)
from common.resources import Resource
from partition_worker.core import AddNode, CoreSettings, ReleaseAlloc, UpdateNode
from partition_worker.core.commands import AddForeign, RecoveredAlloc, ReleaseForeign
from partition_worker.core.diagnosis import explain
from partition_worker.core.feasibility import (AFFINITY_REASON, CHAIN, HOST_PORTS, NODE_AFFINITY, TAINTS,
                                               Purpose, Rejection, gate, insufficient, is_plain)
from partition_worker.core.node import Node, NodeCollection
from partition_worker.core.node_terms import (BIND_ALL, HostPort, PortsInUse, Taint, Toleration,
                                              constraints_of, parse_taints)
from partition_worker.core.objects import Ask
from tests.core.harness import SECOND, Harness, partition_config, q

A, R = Purpose.ALLOCATE, Purpose.RESERVE
GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
UNTOLERATED_GPU = Rejection("taints", "node(s) had untolerated taint {dedicated: gpu}", False)
NO_MATCH = Rejection("node-affinity", AFFINITY_REASON, False)
PORTS_TAKEN = Rejection("host-ports", "node(s) didn't have free ports for the requested pod ports", True)


def _node(node_id="n1", attrs=None, memory=100) -> Node:
    n = Node(node_id=node_id, attributes={k: (v if isinstance(v, str) else json.dumps(v))
                                          for k, v in (attrs or {}).items()},
             capacity=Resource({"memory": memory, "vcore": 10}))
    n.apply_attributes()
    n.recompute_available()
    return n


def _ask(tags=None, memory=10) -> Ask:
    tags = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in (tags or {}).items()}
    selector = tuple(sorted((k[len(TAG_NODE_SELECTOR_PREFIX):], v) for k, v in tags.items()
                            if k.startswith(TAG_NODE_SELECTOR_PREFIX)))
    return Ask("k", "app1", Resource({"memory": memory, "vcore": 1}), 1, 1, 0, 0, 1, tags,
               selector=selector, constraints=constraints_of(tags))


def _first_rejection(node: Node, ask: Ask, purpose=A) -> Rejection | None:
    nodes = NodeCollection(gate)
    nodes.add(node)
    got = CHAIN.bind(ask, purpose, {}, nodes=nodes).first_rejection(node)
    assert got == CHAIN.bind(ask, purpose, {}).first_rejection(node)  # with or without the collection
    return got


# --------------------------------------------------------------------------- tolerations
TOLERATION_CASES = [
    # id, toleration, taint, tolerated
    ("Equal with the same key, value and effect", dict(key="k", operator="Equal", value="v", effect="NoSchedule"),
     Taint("k", "v", "NoSchedule"), True),
    ("no operator means Equal", dict(key="k", value="v"), Taint("k", "v", "NoSchedule"), True),
    ("Equal with another value", dict(key="k", operator="Equal", value="w"), Taint("k", "v", "NoSchedule"), False),
    ("Equal with no value matches only an empty value", dict(key="k", operator="Equal"), Taint("k", "", "NoExecute"), True),
    ("Exists ignores the value", dict(key="k", operator="Exists"), Taint("k", "anything", "NoSchedule"), True),
    ("Exists with another key", dict(key="other", operator="Exists"), Taint("k", "v", "NoSchedule"), False),
    ("empty key with Exists tolerates every taint", dict(operator="Exists"), Taint("k", "v", "NoExecute"), True),
    ("empty effect matches every effect", dict(key="k", operator="Exists"), Taint("k", "v", "NoExecute"), True),
    ("another effect does not match", dict(key="k", operator="Exists", effect="NoExecute"),
     Taint("k", "v", "NoSchedule"), False),
    ("an unknown operator tolerates nothing", dict(key="k", operator="Gt", value="v"), Taint("k", "v", "NoSchedule"), False),
    ("nothing tolerates unreadable taints", dict(operator="Exists"), parse_taints("not json")[0][0], False),
]


@pytest.mark.parametrize("toleration, taint, tolerated", [c[1:] for c in TOLERATION_CASES],
                         ids=[c[0] for c in TOLERATION_CASES])
def test_a_toleration_tolerates_a_taint_as_kubernetes_says(toleration, taint, tolerated) -> None:
    c = constraints_of({TAG_TOLERATIONS: json.dumps([toleration])})
    assert c.tolerations[0].tolerates(taint) is tolerated
    node = _node(attrs={NODE_TAINTS: [{"key": taint.key, "value": taint.value, "effect": taint.effect}]})
    if not taint.invalid:
        assert _first_rejection(node, _ask({TAG_TOLERATIONS: [toleration]})) == (
            None if tolerated else Rejection("taints", f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",
                                             False))


TAINT_CASES = [
    # id, node taints, ask tolerations, expected rejection
    ("an untolerated NoSchedule taint", [GPU], None, UNTOLERATED_GPU),
    ("a tolerated NoSchedule taint", [GPU], [{"key": "dedicated", "operator": "Exists"}], None),
    ("an untolerated NoExecute taint", [{"key": "evict", "effect": "NoExecute"}], None,
     Rejection("taints", "node(s) had untolerated taint {evict: }", False)),
    ("PreferNoSchedule is only a preference", [{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}], None, None),
    ("the first untolerated taint is named", [GPU, {"key": "zone", "value": "cold", "effect": "NoExecute"}],
     [{"key": "dedicated", "operator": "Exists"}],
     Rejection("taints", "node(s) had untolerated taint {zone: cold}", False)),
    ("every taint must be tolerated", [GPU, {"key": "b", "value": "1", "effect": "NoSchedule"}],
     [{"key": "dedicated", "value": "gpu"}], Rejection("taints", "node(s) had untolerated taint {b: 1}", False)),
    ("tolerate everything", [GPU, {"key": "b", "effect": "NoExecute"}], [{"operator": "Exists"}], None),
    ("no taints", [], [{"key": "dedicated", "operator": "Exists"}], None),
    ("unreadable taints keep every ask off", "{not json", [{"operator": "Exists"}],
     Rejection("taints", f"node(s) had unreadable taints ({NODE_TAINTS})", False)),
    ("taints that are not a list", {"key": "x"}, None,
     Rejection("taints", f"node(s) had unreadable taints ({NODE_TAINTS})", False)),
    ("bad tolerations are named", [GPU], "[{\"key\": 1}]",
     Rejection("taints", f"invalid tag {TAG_TOLERATIONS}[0].key must be a string, got 1", False)),
    ("tolerations that are not JSON are named", [], "nope",
     Rejection("taints", f"invalid tag {TAG_TOLERATIONS} is not JSON (Expecting value: line 1 column 1 (char 0)): nope",
               False)),
]


@pytest.mark.parametrize("taints, tolerations, expected", [c[1:] for c in TAINT_CASES],
                         ids=[c[0] for c in TAINT_CASES])
def test_taints_must_be_tolerated(taints, tolerations, expected) -> None:
    node = _node(attrs={NODE_TAINTS: taints} if taints != [] else {})
    ask = _ask({TAG_TOLERATIONS: tolerations} if tolerations is not None else {})
    assert _first_rejection(node, ask) == expected
    assert _first_rejection(node, ask, R) == expected  # reserving: the same


def test_an_unreadable_taints_attribute_is_reported_and_keeps_asks_off() -> None:
    h = Harness(partition_config(q("root", q("a"), submitacl="*")))
    h.do(AddNode("bad", Resource({"memory": 100, "vcore": 10}), attributes={NODE_TAINTS: "[{"}))
    events = [e.message for e in h.log.events if e.object_id == "bad"]
    assert any(m.startswith(f"node bad: attribute {NODE_TAINTS} is not JSON") for m in events), events
    h.app("app1", queue="root.a").ask("k", "app1", memory=10, vcore=1)
    h.step()
    assert not h.allocs_of("k")


# --------------------------------------------------------------------------- node affinity
def _affinity(*terms, raw=None):
    return {TAG_NODE_AFFINITY: raw if raw is not None else json.dumps({"nodeSelectorTerms": list(terms)})}


def _expr(key, op, *values):
    r = {"key": key, "operator": op}
    if values:
        r["values"] = list(values)
    return r


LABELS = {NODE_LABELS: {"zone": "a", "gen": "5", "disk": "ssd", "name": "x"}}
AFFINITY_CASES = [
    # id, node labels (attrs), affinity tags, expected
    ("In matches", LABELS, _affinity({"matchExpressions": [_expr("zone", "In", "a", "b")]}), None),
    ("In does not match", LABELS, _affinity({"matchExpressions": [_expr("zone", "In", "b")]}), NO_MATCH),
    ("In on a missing label", LABELS, _affinity({"matchExpressions": [_expr("rack", "In", "a")]}), NO_MATCH),
    ("NotIn matches another value", LABELS, _affinity({"matchExpressions": [_expr("zone", "NotIn", "b")]}), None),
    ("NotIn matches a missing label", LABELS, _affinity({"matchExpressions": [_expr("rack", "NotIn", "a")]}), None),
    ("NotIn rejects a listed value", LABELS, _affinity({"matchExpressions": [_expr("zone", "NotIn", "a")]}), NO_MATCH),
    ("Exists", LABELS, _affinity({"matchExpressions": [_expr("disk", "Exists")]}), None),
    ("Exists on a missing label", LABELS, _affinity({"matchExpressions": [_expr("gpu", "Exists")]}), NO_MATCH),
    ("DoesNotExist", LABELS, _affinity({"matchExpressions": [_expr("gpu", "DoesNotExist")]}), None),
    ("DoesNotExist on a present label", LABELS, _affinity({"matchExpressions": [_expr("disk", "DoesNotExist")]}),
     NO_MATCH),
    ("Gt", LABELS, _affinity({"matchExpressions": [_expr("gen", "Gt", "4")]}), None),
    ("Gt is strict", LABELS, _affinity({"matchExpressions": [_expr("gen", "Gt", "5")]}), NO_MATCH),
    ("Lt", LABELS, _affinity({"matchExpressions": [_expr("gen", "Lt", "6")]}), None),
    ("Lt with a negative value", LABELS, _affinity({"matchExpressions": [_expr("gen", "Lt", "-1")]}), NO_MATCH),
    ("Gt on a label that is not an integer", LABELS, _affinity({"matchExpressions": [_expr("zone", "Gt", "1")]}),
     NO_MATCH),
    ("expressions of a term are ANDed", LABELS,
     _affinity({"matchExpressions": [_expr("zone", "In", "a"), _expr("disk", "In", "hdd")]}), NO_MATCH),
    ("terms are ORed", LABELS, _affinity({"matchExpressions": [_expr("zone", "In", "b")]},
                                         {"matchExpressions": [_expr("disk", "In", "ssd")]}), None),
    ("matchFields on the node name", LABELS,
     _affinity({"matchFields": [_expr("metadata.name", "In", "n1")]}), None),
    ("matchFields on another node name", LABELS,
     _affinity({"matchFields": [_expr("metadata.name", "In", "n2")]}), NO_MATCH),
    ("matchFields NotIn", LABELS, _affinity({"matchFields": [_expr("metadata.name", "NotIn", "n2")]}), None),
    ("matchFields is not a label", LABELS, _affinity({"matchFields": [_expr("metadata.name", "In", "x")]}), NO_MATCH),
    ("expressions and fields are ANDed", LABELS,
     _affinity({"matchExpressions": [_expr("zone", "In", "a")], "matchFields": [_expr("metadata.name", "In", "n2")]}),
     NO_MATCH),
    ("an empty term list matches nothing", LABELS, _affinity(), NO_MATCH),
    ("an empty term matches nothing", LABELS, _affinity({}), NO_MATCH),
    ("a node without k8s labels is matched on its attributes", {"zone": "a"},
     _affinity({"matchExpressions": [_expr("zone", "In", "a")]}), None),
    ("a bad term matches nothing, the others still do", LABELS,
     _affinity({"matchExpressions": [_expr("gen", "Gt", "many")]}, {"matchExpressions": [_expr("zone", "In", "a")]}),
     None),
    ("a bad term is named when nothing matches", LABELS,
     _affinity({"matchExpressions": [_expr("gen", "Gt", "many")]}),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY}: nodeSelectorTerms[0]"
                                ".matchExpressions[0]: Gt needs exactly one integer value, got [\"many\"])", False)),
    ("an unknown operator is named", LABELS, _affinity({"matchExpressions": [_expr("zone", "Near", "a")]}),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY}: nodeSelectorTerms[0]"
                                ".matchExpressions[0].operator \"Near\" is not one of DoesNotExist, Exists, Gt, In, "
                                "Lt, NotIn)", False)),
    ("In without values is named", LABELS, _affinity({"matchExpressions": [_expr("zone", "In")]}),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY}: nodeSelectorTerms[0]"
                                ".matchExpressions[0]: In needs at least one value)", False)),
    ("Exists with values is named", LABELS, _affinity({"matchExpressions": [_expr("zone", "Exists", "a")]}),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY}: nodeSelectorTerms[0]"
                                ".matchExpressions[0]: Exists takes no values, got [\"a\"])", False)),
    ("a field other than the node name is named", LABELS,
     _affinity({"matchFields": [_expr("spec.unschedulable", "In", "false")]}),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY}: nodeSelectorTerms[0]"
                                ".matchFields[0].key \"spec.unschedulable\" is not a supported field (only "
                                "metadata.name))", False)),
    ("affinity that is not JSON is named", LABELS, _affinity(raw="{"),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY} is not JSON (Expecting "
                                "property name enclosed in double quotes: line 1 column 2 (char 1)): {)", False)),
    ("affinity that is not an object is named", LABELS, _affinity(raw="[]"),
     Rejection("node-affinity", f"{AFFINITY_REASON} (invalid tag {TAG_NODE_AFFINITY} must be a JSON object "
                                "(a NodeSelector), got [])", False)),
]


@pytest.mark.parametrize("attrs, tags, expected", [c[1:] for c in AFFINITY_CASES],
                         ids=[c[0] for c in AFFINITY_CASES])
def test_required_node_affinity_matches_as_kubernetes_does(attrs, tags, expected) -> None:
    assert _first_rejection(_node(attrs=attrs), _ask(tags)) == expected


def test_node_selector_and_affinity_must_both_match() -> None:
    node = _node(attrs=LABELS)
    both = {TAG_NODE_SELECTOR_PREFIX + "disk": "ssd", **_affinity({"matchExpressions": [_expr("zone", "In", "a")]})}
    assert _first_rejection(node, _ask(both)) is None
    wrong_selector = {**both, TAG_NODE_SELECTOR_PREFIX + "disk": "hdd"}
    assert _first_rejection(node, _ask(wrong_selector)) == Rejection("selector", AFFINITY_REASON, False)


# --------------------------------------------------------------------------- host ports
def _ports(*ports):
    return [dict(zip(("hostPort", "protocol", "hostIP"), p)) for p in ports]


PORT_CASES = [
    # id, used (port, protocol, ip), wanted, conflict
    ("the same port and IP", [(80, "TCP", "10.0.0.1")], [(80, "TCP", "10.0.0.1")], True),
    ("another port", [(80, "TCP", "10.0.0.1")], [(81, "TCP", "10.0.0.1")], False),
    ("another protocol", [(53, "UDP", "10.0.0.1")], [(53, "TCP", "10.0.0.1")], False),
    ("another IP", [(80, "TCP", "10.0.0.1")], [(80, "TCP", "10.0.0.2")], False),
    ("0.0.0.0 in use conflicts with every IP", [(80, "TCP", BIND_ALL)], [(80, "TCP", "10.0.0.2")], True),
    ("wanting 0.0.0.0 conflicts with any IP in use", [(80, "TCP", "10.0.0.1")], [(80, "TCP", BIND_ALL)], True),
    ("no IP means 0.0.0.0, no protocol TCP", [(80,)], [(80, "TCP", "10.0.0.9")], True),
    ("a host port of 0 is no host port", [(80,)], [(0,)], False),
    ("one of several wanted ports", [(443,)], [(80,), (443,)], True),
]


@pytest.mark.parametrize("used, wanted, conflict", [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES])
def test_host_ports_conflict_as_kube_scheduler_says(used, wanted, conflict) -> None:
    node = _node()
    nodes = NodeCollection(gate)
    nodes.add(node)
    assert nodes.track_ports(node, {TAG_HOST_PORTS: json.dumps(_ports(*used))}, 1) == ""
    ask = _ask({TAG_HOST_PORTS: _ports(*wanted)})
    assert CHAIN.bind(ask, A, {}, nodes=nodes).first_rejection(node) == (PORTS_TAKEN if conflict else None)


def test_ports_in_use_count_allocations_so_one_leaving_keeps_the_other_s_port() -> None:
    used = PortsInUse()
    port = (HostPort(BIND_ALL, 80, "TCP"),)
    used.add(port)
    used.add(port)
    used.remove(port)
    assert used.conflicts(port)
    used.remove(port)
    assert not used and not used.conflicts(port)


BAD_PORTS = [
    ("not JSON", "80", f"invalid tag {TAG_HOST_PORTS} must be a JSON list of {{hostIP, hostPort, protocol}}, got 80"),
    ("a port that is not a number", json.dumps([{"hostPort": "80"}]),
     f"invalid tag {TAG_HOST_PORTS}[0].hostPort must be a port number (0-65535), got \"80\""),
    ("a port out of range", json.dumps([{"hostPort": 70000}]),
     f"invalid tag {TAG_HOST_PORTS}[0].hostPort must be a port number (0-65535), got 70000"),
]


@pytest.mark.parametrize("raw, reason", [c[1:] for c in BAD_PORTS], ids=[c[0] for c in BAD_PORTS])
def test_a_bad_host_ports_tag_is_a_rejection_that_names_it(raw, reason) -> None:
    assert _first_rejection(_node(), _ask({TAG_HOST_PORTS: raw})) == Rejection("host-ports", reason, False)


def _k8s_harness(**settings) -> Harness:
    return Harness(partition_config(q("root", q("a"), submitacl="*")),
                   settings=CoreSettings(reservation_delay_ns=10**6 * SECOND, **settings))


def test_a_node_knows_the_ports_its_allocations_and_foreign_allocations_use() -> None:
    h = _k8s_harness()
    h.node("n1", memory=100, vcore=10).app("app1", queue="root.a")
    web = {TAG_HOST_PORTS: json.dumps(_ports((80,)))}
    h.ask("web-1", "app1", memory=10, vcore=1, tags=web)
    h.step()
    assert [a.node_id for a in h.allocs_of("web-1")] == ["n1"]
    h.ask("web-2", "app1", memory=10, vcore=1, tags=web)
    h.step()
    assert not h.allocs_of("web-2")  # port 80 is taken on the only node
    assert explain(h.p.nodes, h.p.apps, h.p.limits, h.p.apps["app1"], h.p.apps["app1"].asks["web-2"])["nodes"] == {PORTS_TAKEN.reason: 1}
    h.do(ReleaseAlloc("app1", h.allocs_of("web-1")[0].uuid))
    h.step()
    assert [a.node_id for a in h.allocs_of("web-2")] == ["n1"]  # freed by the release
    h.do(AddForeign("other-pod", "n1", Resource({"memory": 1}), tags={**web, "foreign": "default"}))
    h.node("n2", memory=100, vcore=10)
    h.do(AddForeign("dns", "n2", Resource({"memory": 1}), tags={TAG_HOST_PORTS: json.dumps(_ports((53, "UDP")))}))
    h.ask("web-3", "app1", memory=10, vcore=1, tags=web)
    h.step()
    assert [a.node_id for a in h.allocs_of("web-3")] == ["n2"]  # UDP 53 is no conflict
    h.do(ReleaseForeign("other-pod"))
    assert h.p.nodes.get("n1").ports.conflicts((HostPort(BIND_ALL, 80, "TCP"),))  # web-2 still holds it


def test_recovered_allocations_hold_their_host_ports() -> None:
    h = _k8s_harness()
    h.app("app1", queue="root.a")
    web = {TAG_HOST_PORTS: json.dumps(_ports((8080,)))}
    h.do(AddNode("n1", Resource({"memory": 100, "vcore": 10}), existing=(
        RecoveredAlloc("uuid-r", "running", "app1", Resource({"memory": 10}), node_id="n1", tags=web),)))
    h.ask("k", "app1", memory=10, vcore=1, tags=web)
    h.step()
    assert not h.allocs_of("k")


def test_a_bad_ports_tag_on_an_allocation_the_rm_reports_is_named_and_the_allocation_kept() -> None:
    h = _k8s_harness()
    h.app("app1", queue="root.a")
    bad = {TAG_HOST_PORTS: "[{\"hostPort\": -1}]"}
    h.do(AddNode("n1", Resource({"memory": 100, "vcore": 10}), existing=(
        RecoveredAlloc("uuid-r", "running", "app1", Resource({"memory": 10}), node_id="n1", tags=bad),)))
    h.do(AddForeign("other", "n1", Resource({"memory": 10}), tags=bad))
    assert h.p.nodes.get("n1").occupied == Resource({"memory": 10}) and "uuid-r" in h.p.allocations
    reason = f"tag {TAG_HOST_PORTS}[0].hostPort must be a port number (0-65535), got -1"
    assert [e.message for e in h.log.events if e.reason in ("InvalidAllocationTag", "ForeignTagIllegal")] == [
        f"allocation running on node n1: {reason}", f"foreign allocation other on node n1: {reason}"]


# --------------------------------------------------------------------------- unsupported, ready
@pytest.mark.parametrize("value, reason", [
    ("required pod anti-affinity", "unsupported constraint: required pod anti-affinity"),
    ("required pod affinity, topology spread (DoNotSchedule)",
     "unsupported constraints: required pod affinity, topology spread (DoNotSchedule)"),
], ids=["one", "two"])
def test_an_ask_with_unsupported_constraints_is_rejected_by_every_node_naming_them(value, reason) -> None:
    ask = _ask({TAG_UNSUPPORTED_CONSTRAINTS: value})
    expected = Rejection("unsupported", reason, False)
    assert _first_rejection(_node(), ask) == expected
    assert _first_rejection(_node(attrs={"ready": "false"}), ask) == expected  # named before anything else
    assert CHAIN.walker(ask, {}).never == expected


def test_a_node_that_is_not_ready_rejects_and_waiting_can_help() -> None:
    assert _first_rejection(_node(attrs={"ready": "false"}), _ask()) == Rejection("ready", "node(s) were not ready", True)
    h = _k8s_harness()
    h.node("n1", memory=100, vcore=10, attrs={"ready": "false"}).app("app1", queue="root.a")
    h.ask("k", "app1", memory=10, vcore=1)
    h.step()
    assert not h.allocs_of("k")
    h.do(UpdateNode("n1", attributes={"ready": "true"}))
    h.step()
    assert [a.node_id for a in h.allocs_of("k")] == ["n1"]


# --------------------------------------------------------------------------- in the partition
def _tainted_cluster() -> Harness:
    h = _k8s_harness()
    h.node("plain-1", memory=100, vcore=10, attrs={NODE_LABELS: json.dumps({"pool": "general"})})
    h.node("plain-2", memory=100, vcore=10, attrs={NODE_LABELS: json.dumps({"pool": "general"})})
    h.node("gpu-1", memory=100, vcore=10, attrs={NODE_TAINTS: json.dumps([GPU]),
                                                 NODE_LABELS: json.dumps({"pool": "gpu"})})
    h.node("master", memory=100, vcore=10, attrs={NODE_TAINTS: json.dumps(
        [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])})
    return h.app("app1", queue="root.a")


DEFAULT_TOLERATIONS = json.dumps([  # what the DefaultTolerationSeconds admission plugin adds to every pod
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}])


def test_pods_land_only_on_nodes_whose_taints_they_tolerate() -> None:
    h = _tainted_cluster()
    for i in range(6):
        h.ask(f"web-{i}", "app1", memory=30, vcore=1, tags={TAG_TOLERATIONS: DEFAULT_TOLERATIONS})
    gpu_tags = {TAG_TOLERATIONS: json.dumps([{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                              "effect": "NoSchedule"}]),
                **_affinity({"matchExpressions": [_expr("pool", "In", "gpu")]})}
    h.ask("train", "app1", memory=50, vcore=1, tags=gpu_tags)
    h.step()
    placed = {a.alloc.key: a.alloc.node_id for a in h.log.allocations}
    assert placed["train"] == "gpu-1"
    assert sorted(n for k, n in placed.items() if k.startswith("web-")) == ["plain-1"] * 3 + ["plain-2"] * 3
    h.ask("web-6", "app1", memory=30, vcore=1, tags={TAG_TOLERATIONS: DEFAULT_TOLERATIONS})
    h.step()
    ask = h.p.apps["app1"].asks["web-6"]
    why = explain(h.p.nodes, h.p.apps, h.p.limits, h.p.apps["app1"], ask)
    assert why["nodes"] == {"node(s) had untolerated taint {dedicated: gpu}": 1,
                            "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }": 1,
                            "Insufficient memory": 2}
    assert why["checks"] == {"taints": 2, "resources": 2}
    assert why["message"] == ("0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
                              "1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
                              "2 Insufficient memory.")
    assert ask.sched_state.value == "FAILED"
    assert ask.sched_reason == "request is waiting for cluster resources become available"  # a plain pod


def test_the_failed_reason_of_an_ask_with_node_terms_names_the_checks() -> None:
    h = _tainted_cluster()
    h.ask("zoned", "app1", memory=10, vcore=1,
          tags=_affinity({"matchExpressions": [_expr("pool", "In", "batch")]}))
    h.ask("unsupported", "app1", memory=10, vcore=1, tags={TAG_UNSUPPORTED_CONSTRAINTS: "required pod anti-affinity"})
    h.step()
    asks = h.p.apps["app1"].asks
    assert asks["zoned"].sched_reason == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }, 2 node(s) didn't match Pod's node affinity/selector.")
    assert asks["unsupported"].sched_reason == (
        "0/4 nodes are available: unsupported constraint: required pod anti-affinity.")
    states = [s for s in h.log.sched_states if s.allocation_key == "unsupported"]
    assert [(s.state.value, s.reason) for s in states] == [("FAILED", asks["unsupported"].sched_reason)]


def test_the_pods_of_one_workload_that_start_waiting_together_are_explained_once(monkeypatch) -> None:
    from partition_worker.core import diagnosis
    h = _tainted_cluster()
    tags = _affinity({"matchExpressions": [_expr("pool", "In", "batch")]})
    for i in range(50):
        h.ask(f"job-{i}", "app1", memory=10, vcore=1, tags=dict(tags))
    tallies = []
    tally = diagnosis._tally
    monkeypatch.setattr(diagnosis, "_tally", lambda nodes, apps, ask: tallies.append(ask.key) or tally(nodes, apps, ask))
    h.step()
    assert tallies == ["job-0"]
    reasons = {a.sched_reason for a in h.p.apps["app1"].asks.values()}
    assert len(reasons) == 1 and reasons.pop().startswith("0/4 nodes are available: ")


def test_a_tolerating_ask_walks_the_tainted_nodes_in_policy_order() -> None:
    h = _k8s_harness()
    h.node("busy", memory=100, vcore=10)
    h.node("tainted", memory=100, vcore=10, attrs={NODE_TAINTS: json.dumps([GPU])})
    h.app("app1", queue="root.a").ask("filler", "app1", memory=60, vcore=1, tags={"yunikorn.apache.org/requiredNode": "busy"})
    h.step()
    h.ask("k", "app1", memory=10, vcore=1, tags={TAG_TOLERATIONS: json.dumps([{"operator": "Exists"}])})
    h.step()
    assert [a.node_id for a in h.allocs_of("k")] == ["tainted"]  # fair: the emptier node first


def test_a_node_update_that_adds_an_untolerated_taint_drops_its_reservation() -> None:
    h = Harness(partition_config(q("root", q("a"), submitacl="*")), settings=CoreSettings(reservation_delay_ns=0))
    h.node("n1", memory=100, vcore=10).app("app1", queue="root.a")
    h.ask("filler", "app1", memory=80, vcore=1)
    h.step()
    h.ask("big", "app1", memory=50, vcore=1)
    h.step(SECOND)
    assert h.p.apps["app1"].asks["big"].reserved_node == "n1"
    h.do(UpdateNode("n1", attributes={NODE_TAINTS: json.dumps([GPU])}))
    assert h.p.apps["app1"].asks["big"].reserved_node == ""
    h.do(UpdateNode("n1", attributes={NODE_TAINTS: "[]"}))
    h.do(ReleaseAlloc("app1", h.allocs_of("filler")[0].uuid))
    h.step()
    assert [a.node_id for a in h.allocs_of("big")] == ["n1"]


def test_relabelling_a_node_changes_where_affinity_asks_go() -> None:
    h = _k8s_harness()
    h.node("n1", memory=100, vcore=10, attrs={NODE_LABELS: json.dumps({"zone": "a"})}).app("app1", queue="root.a")
    tags = _affinity({"matchExpressions": [_expr("zone", "In", "b")]})
    h.ask("k", "app1", memory=10, vcore=1, tags=tags)
    h.step()
    assert not h.allocs_of("k")
    h.do(UpdateNode("n1", attributes={NODE_LABELS: json.dumps({"zone": "b"})}))
    h.step()
    assert [a.node_id for a in h.allocs_of("k")] == ["n1"]


def test_checks_that_cannot_apply_are_not_bound() -> None:
    nodes = NodeCollection(gate)
    nodes.add(_node())
    plain = CHAIN.bind(_ask({TAG_TOLERATIONS: DEFAULT_TOLERATIONS}), A, {}, nodes=nodes)
    assert [b.check.name for b in plain.checks] == ["schedulable", "ready", "reservation", "resources"]
    nodes.add(_node("gpu", attrs={NODE_TAINTS: [GPU]}))
    tolerating_nothing_there = CHAIN.bind(_ask({TAG_TOLERATIONS: DEFAULT_TOLERATIONS}), A, {}, nodes=nodes)
    assert [b.ordinary for b in tolerating_nothing_there.checks if b.check is TAINTS] == [True]
    gpu = CHAIN.bind(_ask({TAG_TOLERATIONS: [{"key": "dedicated", "operator": "Exists"}]}), A, {}, nodes=nodes)
    assert [b.widens for b in gpu.checks if b.check is TAINTS] == [True]
    assert NODE_AFFINITY not in [b.check for b in plain.checks] and HOST_PORTS not in [b.check for b in plain.checks]


def test_what_tolerations_tolerate_is_looked_at_again_when_the_taints_change() -> None:
    nodes = NodeCollection(gate)
    nodes.add(_node("master", attrs={NODE_TAINTS: [{"key": "control-plane", "effect": "NoSchedule"}]}))
    ask = _ask({TAG_TOLERATIONS: [{"key": "dedicated", "operator": "Exists"}]})
    assert is_plain(ask, nodes)  # nothing it tolerates: checked like a pod without tolerations
    nodes.add(_node("gpu", attrs={NODE_TAINTS: [GPU]}))
    assert not is_plain(ask, nodes) and CHAIN.walker(ask, {}, nodes).widens
    assert nodes.wide == sorted([nodes.get("gpu").sort_key, nodes.get("master").sort_key])
    nodes.remove("gpu")
    assert is_plain(ask, nodes)
    nodes.remove("master")
    assert not nodes.taints and not nodes.wide


def test_constraints_are_parsed_once_per_distinct_value() -> None:
    tags = {TAG_TOLERATIONS: DEFAULT_TOLERATIONS, TAG_HOST_PORTS: json.dumps(_ports((80,)))}
    assert constraints_of(dict(tags)) is constraints_of(dict(tags))
    assert constraints_of({"kubernetes.io/meta/namespace": "default"}) is None
    assert constraints_of({TAG_TOLERATIONS: "[]"}) is None  # no tolerations: nothing to check


def test_the_resources_reason_names_the_resource_as_kube_scheduler_does() -> None:
    node = _node(memory=100)
    assert _first_rejection(node, _ask(memory=500)) == insufficient("memory", False)
    node.allocated = Resource({"memory": 95})
    node.recompute_available()
    assert _first_rejection(node, _ask(memory=10)) == Rejection("resources", "Insufficient memory", True)


# --------------------------------------------------------------------------- node requirements
def _requirements(*entries) -> dict[str, str]:
    return {TAG_NODE_REQUIREMENTS: json.dumps(list(entries))}


def _names(op: str, *nodes: str) -> dict:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": op, "values": list(nodes)}]}]}


def test_node_requirements_must_all_match_and_the_first_failing_one_names_the_reason() -> None:
    h = _tainted_cluster()
    volume = {"reason": "node(s) had volume node affinity conflict",
              "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [_expr("pool", "In", "general")]}]}}
    excluded = {"reason": "node(s) were excluded for a while: the volume was not bound in time",
                "nodeSelector": _names("NotIn", "plain-1"), "retry": True}
    h.ask("db", "app1", memory=10, vcore=1, tags=_requirements(volume, excluded))
    h.step()
    assert {a.alloc.key: a.alloc.node_id for a in h.log.allocations} == {"db": "plain-2"}

    h.ask("db-2", "app1", memory=10, vcore=1, tags={**_requirements(volume, excluded),
                                                     TAG_TOLERATIONS: DEFAULT_TOLERATIONS})
    h.ask("gpu-only", "app1", memory=10, vcore=1, tags=_requirements(
        {"reason": "cannot allocate all claims", "nodeSelector": _names("In", "gpu-1", "master")}))
    asks = h.p.apps["app1"].asks
    plain2 = h.p.nodes.get("plain-2")
    assert _first_rejection(h.p.nodes.get("plain-1"), asks["db"]) == Rejection(
        "node-requirements", excluded["reason"], True)
    assert _first_rejection(h.p.nodes.get("gpu-1"), asks["db"]).reason == "node(s) had untolerated taint {dedicated: gpu}"
    assert _first_rejection(_node("plain-9", {NODE_LABELS: {"pool": "other"}}), asks["db"]) == Rejection(
        "node-requirements", volume["reason"], False)
    assert _first_rejection(plain2, asks["gpu-only"]) == Rejection("node-requirements", "cannot allocate all claims", False)
    assert not is_plain(asks["db"])


@pytest.mark.parametrize("value, reason", [
    ("not json", "tag korral.io/node-requirements is not JSON"),
    ('{"reason": "x"}', "tag korral.io/node-requirements must be a JSON list"),
    ('[{"reason": "", "nodeSelector": {"nodeSelectorTerms": []}}]', "reason must be a non-empty string"),
    ('[{"reason": "r", "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "spec.x", '
     '"operator": "In", "values": ["a"]}]}]}}]', "is not a supported field"),
    ('[{"reason": "r", "retry": "yes", "nodeSelector": {}}]', "retry must be true or false"),
])
def test_a_bad_node_requirements_tag_rejects_every_node_naming_what_is_wrong(value, reason) -> None:
    got = _first_rejection(_node(), _ask({TAG_NODE_REQUIREMENTS: value}))
    assert got is not None and got.stage == "node-requirements" and reason in got.reason and not got.retry_can_help
