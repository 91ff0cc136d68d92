"""Inter-pod constraints in the core (core/interpod.py, the inter-pod checks of
core/feasibility.py): label selectors, required pod affinity and anti-affinity, the symmetric rule
of existing pods' anti-affinity, topology spread (DoNotSchedule), counted from every allocation
(placed, foreign, earlier in the same cycle) by the pod index; preemption and explain."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from common.config.model import PreemptionConfig
from common.constants import (NODE_LABELS, NODE_TAINTS, TAG_NAMESPACE, TAG_NODE_AFFINITY, TAG_NODE_SELECTOR_PREFIX,
                              TAG_POD_AFFINITY, TAG_POD_LABELS, TAG_TOPOLOGY_SPREAD)
from common.resources import Resource
from partition_worker.core.commands import (AddForeign, AddNode, RecoveredAlloc, ReleaseAlloc, ReleaseForeign,
                                            RemoveNode, UpdateNode)
from partition_worker.core.diagnosis import explain
from partition_worker.core.feasibility import is_plain, signature
from partition_worker.core.interpod import Counts, PodIndex, parse_selector
from partition_worker.core.outcomes import Termination
from tests.core.harness import SECOND, Harness, partition_config, q

HOST, ZONE = "kubernetes.io/hostname", "zone"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
AFFINITY = "node(s) didn't match pod affinity rules"
SPREAD = "node(s) didn't match pod topology spread constraints"


def _h(preemption: bool = False, root=None) -> Harness:
    root = root or q("root", q("a"), submitacl="*")
    cfg = partition_config(root)
    if preemption:
        cfg = replace(cfg, preemption=PreemptionConfig(enabled=True))
    h = Harness(cfg)
    return h


def _node(h: Harness, nid: str, zone: str | None = "a", memory: int = 100, **labels) -> None:
    lbl = {HOST: nid, **labels}
    if zone is not None:
        lbl[ZONE] = zone
    attrs = {NODE_LABELS: json.dumps(lbl)}
    if "taints" in labels:
        attrs[NODE_TAINTS] = labels.pop("taints")
        lbl.pop("taints")
        attrs[NODE_LABELS] = json.dumps(lbl)
    h.node(nid, memory=memory, vcore=100, attrs=attrs)


def _tags(labels=None, ns="apps", anti=None, affinity=None, spread=None, **extra) -> dict[str, str]:
    tags = {TAG_NAMESPACE: ns, TAG_POD_LABELS: json.dumps(labels or {})}
    aff = {}
    if anti is not None:
        aff["requiredAnti"] = anti
    if affinity is not None:
        aff["required"] = affinity
    if aff:
        tags[TAG_POD_AFFINITY] = json.dumps(aff)
    if spread is not None:
        tags[TAG_TOPOLOGY_SPREAD] = json.dumps(spread)
    tags.update(extra)
    return tags


def _term(match: dict | None, key: str = HOST, namespaces=("apps",)) -> dict:
    return {"selector": None if match is None else {"matchLabels": match}, "topologyKey": key,
            "namespaces": None if namespaces is None else list(namespaces)}


def _spread(match: dict, key: str = ZONE, skew: int = 1, **kw) -> dict:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "selector": {"matchLabels": match}, **kw}


def _where(h: Harness, key: str) -> str:
    allocs = h.allocs_of(key)
    return allocs[0].node_id if allocs else ""


def _explain(h: Harness, key: str, app: str = "app1") -> dict:
    return explain(h.p.nodes, h.p.apps, h.p.limits, h.p.apps[app], h.p.apps[app].asks[key])


# --------------------------------------------------------------------------- label selectors
SELECTOR_CASES = [
    ("a null selector matches nothing", None, {"app": "web"}, False),
    ("an empty selector matches everything", {}, {}, True),
    ("matchLabels", {"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"}, True),
    ("matchLabels, another value", {"matchLabels": {"app": "web"}}, {"app": "db"}, False),
    ("In", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, {"tier": "b"}, True),
    ("In without the label", {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}, {}, False),
    ("NotIn without the label", {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ("NotIn with a listed value", {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]},
     {"t": "a"}, False),
    ("Exists", {"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
    ("DoesNotExist", {"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": "x"}, False),
    ("labels and expressions ANDed", {"matchLabels": {"app": "web"},
                                      "matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"app": "web"}, False),
]


@pytest.mark.parametrize("selector, labels, matches", [c[1:] for c in SELECTOR_CASES],
                         ids=[c[0] for c in SELECTOR_CASES])
def test_a_label_selector_matches_as_kubernetes_says(selector, labels, matches) -> None:
    assert parse_selector(selector, "selector").matches(labels) is matches


def test_a_bad_selector_names_its_field() -> None:
    with pytest.raises(ValueError, match=r"selector.matchExpressions\[0\].operator \"Gt\" is not one of"):
        parse_selector({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}, "selector")


# --------------------------------------------------------------------------- anti-affinity
def test_required_anti_affinity_places_one_per_node_and_the_next_waits_naming_it() -> None:
    h = _h()
    for nid in ("n1", "n2", "n3"):
        _node(h, nid)
    h.app("app1", queue="root.a")
    web = _tags({"app": "web"}, anti=[_term({"app": "web"})])
    for i in range(4):  # in one cycle: each decision counts for the next
        h.ask(f"web-{i}", "app1", tags=web)
    h.step()
    assert sorted(_where(h, f"web-{i}") for i in range(3)) == ["n1", "n2", "n3"]
    assert not h.allocs_of("web-3")
    got = _explain(h, "web-3")
    assert got["checks"]["pod-anti-affinity"] == 3
    assert got["nodes"] == {ANTI: 3}
    assert got["message"] == f"0/3 nodes are available: 3 {ANTI}."
    assert h.p.apps["app1"].asks["web-3"].sched_reason == got["message"]
    h.do(ReleaseAlloc("app1", h.allocs_of("web-1")[0].uuid))  # waiting helps
    h.step()
    assert _where(h, "web-3") == _where(h, "web-1")


def test_an_earlier_decision_of_the_same_cycle_counts() -> None:
    h = _h()
    _node(h, "n1")
    _node(h, "n2")
    h.app("app1", queue="root.a")
    web = _tags({"app": "web"}, anti=[_term({"app": "web"})])
    h.ask("web-0", "app1", tags=web)
    h.ask("web-1", "app1", tags=web)
    h.ask("web-2", "app1", tags=web)
    assert h.step() == 2
    assert {_where(h, "web-0"), _where(h, "web-1")} == {"n1", "n2"}


def test_existing_pods_anti_affinity_keeps_a_matching_pod_out_of_their_domain() -> None:
    h = _h()
    _node(h, "n1", zone="a")
    _node(h, "n2", zone="a")
    _node(h, "n3", zone="b")
    h.app("app1", queue="root.a")
    # a "loner" in zone b that wants no "batch" pod in its zone; the batch pod has no terms itself
    h.ask("loner", "app1", tags=_tags({"app": "loner"}, anti=[_term({"app": "batch"}, key=ZONE)],
                                      **{TAG_NODE_SELECTOR_PREFIX + HOST: "n3"}))
    for nid in ("n1", "n2"):  # n3 stays the emptiest: fair ordering alone would pick it
        h.ask(f"fill-{nid}", "app1", memory=50, tags=_tags({"app": "fill"}, **{TAG_NODE_SELECTOR_PREFIX + HOST: nid}))
    h.step()
    loner_node = _where(h, "loner")
    assert loner_node == "n3"
    batch = _tags({"app": "batch"})
    assert not is_plain(h.p.apps["app1"].asks["loner"], h.p.nodes)
    h.ask("batch-0", "app1", tags=batch)
    h.step()
    assert _where(h, "batch-0") in ("n1", "n2")
    other = _tags({"app": "other"})  # not matched by the loner's term: plain, may go to zone b
    h.ask("other", "app1", tags=other)
    assert is_plain(h.p.apps["app1"].asks["other"], h.p.nodes)
    h.step()
    assert _where(h, "other") == "n3"


def test_the_symmetric_rule_is_told_in_explain() -> None:
    h = _h()
    _node(h, "n1")
    _node(h, "n2")
    h.app("app1", queue="root.a")
    h.ask("loner", "app1", tags=_tags({"app": "loner"}, anti=[_term({"app": "batch"})]))
    h.step()
    h.ask("big", "app1", memory=95, tags=_tags({"app": "x"}))  # fills the other node
    h.step()
    assert {_where(h, "loner"), _where(h, "big")} == {"n1", "n2"}
    h.ask("batch", "app1", tags=_tags({"app": "batch"}))
    h.step()
    got = _explain(h, "batch")
    assert got["nodes"] == {EXISTING: 1, "Insufficient memory": 1}
    assert got["checks"]["existing-anti-affinity"] == 1 and got["checks"]["resources"] == 1


def test_anti_affinity_counts_only_the_terms_namespaces() -> None:
    h = _h()
    _node(h, "n1")
    h.app("app1", queue="root.a")
    h.ask("other-ns", "app1", tags=_tags({"app": "web"}, ns="elsewhere"))
    h.step()
    h.ask("web", "app1", tags=_tags({"app": "web"}, anti=[_term({"app": "web"})]))
    h.step()
    assert _where(h, "web") == "n1"  # the pod in another namespace does not count
    h.ask("web-all", "app1", tags=_tags({"app": "web"}, anti=[_term({"app": "web"}, namespaces=None)]))
    h.step()
    assert not h.allocs_of("web-all")  # null namespaces: every namespace


def test_foreign_allocations_labels_are_counted() -> None:
    h = _h()
    _node(h, "n1", memory=1000)
    _node(h, "n2")
    h.app("app1", queue="root.a")
    h.do(AddForeign("kube-system/web", "n1", Resource({"memory": 1}),
                    tags={**_tags({"app": "web"}), "foreign": "default"}))
    web = _tags({"app": "web"}, anti=[_term({"app": "web"})])
    h.ask("web", "app1", tags=web)
    h.step()
    assert _where(h, "web") == "n2"  # n1 (the emptier) holds a foreign web pod
    h.ask("web-2", "app1", tags=web)
    h.step()
    assert not h.allocs_of("web-2")
    h.do(ReleaseForeign("kube-system/web"))
    h.step()
    assert _where(h, "web-2") == "n1"


def test_a_foreign_pods_anti_affinity_keeps_matching_pods_off_its_node() -> None:
    h = _h()
    _node(h, "n1", memory=1000)
    _node(h, "n2")
    h.app("app1", queue="root.a")
    h.do(AddForeign("other/loner", "n1", Resource({"memory": 1}),
                    tags=_tags({"app": "loner"}, anti=[_term({"app": "batch"})])))
    h.ask("filler", "app1", memory=50, tags=_tags({"app": "x"}, **{TAG_NODE_SELECTOR_PREFIX + HOST: "n2"}))
    h.step()
    h.ask("batch", "app1", tags=_tags({"app": "batch"}))
    h.step()
    assert _where(h, "batch") == "n2"  # n1 is the emptier
    h.do(ReleaseForeign("other/loner"))
    h.ask("batch-2", "app1", tags=_tags({"app": "batch"}))
    assert is_plain(h.p.apps["app1"].asks["batch-2"], h.p.nodes)  # no anti-affinity against it now
    h.step()
    assert _where(h, "batch-2") == "n1"


# --------------------------------------------------------------------------- affinity
def test_the_first_pod_of_a_self_affine_group_may_go_anywhere_then_the_rest_follow() -> None:
    h = _h()
    for nid in ("n1", "n2", "n3"):
        _node(h, nid)
    h.app("app1", queue="root.a")
    group = _tags({"app": "cache"}, affinity=[_term({"app": "cache"})])
    for i in range(3):
        h.ask(f"c-{i}", "app1", tags=group)
    h.step()
    nodes = {_where(h, f"c-{i}") for i in range(3)}
    assert len(nodes) == 1 and "" not in nodes  # all with the first, wherever that went


def test_affinity_to_pods_that_do_not_exist_waits_unless_it_matches_itself() -> None:
    h = _h()
    _node(h, "n1")
    h.app("app1", queue="root.a")
    h.ask("follower", "app1", tags=_tags({"app": "web"}, affinity=[_term({"app": "cache"})]))
    h.step()
    assert not h.allocs_of("follower")
    assert _explain(h, "follower")["nodes"] == {AFFINITY: 1}
    h.ask("cache", "app1", tags=_tags({"app": "cache"}))
    h.step()  # the follower was tried first in this cycle; the cache pod landing is a change
    assert h.p.changed
    h.step()
    assert _where(h, "follower") == "n1" == _where(h, "cache")


def test_affinity_follows_the_pod_to_its_node_against_fair_ordering() -> None:
    h = _h()
    _node(h, "n1")
    _node(h, "n2")
    h.app("app1", queue="root.a")
    h.ask("cache", "app1", memory=60, tags=_tags({"app": "cache"}))
    h.step()
    cache_node = _where(h, "cache")
    for i in range(2):
        h.ask(f"f-{i}", "app1", tags=_tags({"app": "f"}, affinity=[_term({"app": "cache"})]))
    h.step()
    assert _where(h, "f-0") == _where(h, "f-1") == cache_node


# --------------------------------------------------------------------------- topology spread
def test_spread_max_skew_over_zones_of_unequal_size() -> None:
    h = _h()
    for nid, zone in (("n1", "a"), ("n2", "a"), ("n3", "a"), ("n4", "b")):
        _node(h, nid, zone=zone)
    h.app("app1", queue="root.a")
    tags = _tags({"app": "web"}, spread=[_spread({"app": "web"})])
    for i in range(6):
        h.ask(f"w-{i}", "app1", tags=tags)
    h.step()
    zones = [("a" if _where(h, f"w-{i}") in ("n1", "n2", "n3") else "b") for i in range(6)]
    assert sorted(zones) == ["a", "a", "a", "b", "b", "b"]


def test_spread_min_domains_holds_pods_back_while_domains_are_too_few() -> None:
    h = _h()
    _node(h, "n1", zone="a")
    _node(h, "n2", zone="b")
    h.app("app1", queue="root.a")
    tags = _tags({"app": "web"}, spread=[_spread({"app": "web"}, minDomains=3)])
    for i in range(4):
        h.ask(f"w-{i}", "app1", tags=tags)
    h.step()
    # two eligible domains < minDomains 3: the global minimum is 0, so one pod per zone
    assert sorted(_where(h, f"w-{i}") for i in range(4) if _where(h, f"w-{i}")) == ["n1", "n2"]
    waiting = next(f"w-{i}" for i in range(4) if not _where(h, f"w-{i}"))
    assert _explain(h, waiting)["nodes"] == {SPREAD: 2}
    _node(h, "n3", zone="c")  # a third domain: the minimum is read from the domains again
    h.step()
    placed = [_where(h, f"w-{i}") for i in range(4)]
    assert placed.count("n3") == 1 and placed.count("") == 0


def test_without_min_domains_the_same_pods_all_place() -> None:
    h = _h()
    _node(h, "n1", zone="a")
    _node(h, "n2", zone="b")
    h.app("app1", queue="root.a")
    tags = _tags({"app": "web"}, spread=[_spread({"app": "web"})])
    for i in range(4):
        h.ask(f"w-{i}", "app1", tags=tags)
    h.step()
    assert sorted(_where(h, f"w-{i}") for i in range(4)) == ["n1", "n1", "n2", "n2"]


def test_a_node_without_the_spread_key_is_rejected_for_a_missing_label() -> None:
    h = _h()
    _node(h, "n1", zone=None)
    h.app("app1", queue="root.a")
    h.ask("w", "app1", tags=_tags({"app": "web"}, spread=[_spread({"app": "web"})]))
    h.step()
    assert _explain(h, "w")["nodes"] == {f"{SPREAD} (missing required label)": 1}


def test_spread_node_affinity_policy_honor_counts_only_the_pods_nodes() -> None:
    h = _h()
    _node(h, "n1", zone="a", pool="gpu")
    _node(h, "n2", zone="b", pool="cpu")
    _node(h, "n3", zone="c", pool="cpu")
    h.app("app1", queue="root.a")
    affinity = json.dumps({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "pool", "operator": "In", "values": ["cpu"]}]}]})
    for honor in ("Honor", "Ignore"):
        tags = _tags({"app": honor}, spread=[_spread({"app": honor}, nodeAffinityPolicy=honor)],
                     **{TAG_NODE_AFFINITY: affinity})
        for i in range(4):
            h.ask(f"{honor}-{i}", "app1", tags=tags)
    h.step()
    honored = sorted(_where(h, f"Honor-{i}") for i in range(4))
    assert honored == ["n2", "n2", "n3", "n3"]  # zone a is not a domain of the pod: ignored
    ignored = [_where(h, f"Ignore-{i}") for i in range(4)]
    assert sorted(n for n in ignored if n) == ["n2", "n3"]  # zone a counts at 0: no more than one each


def test_spread_node_taints_policy_honor_leaves_out_tainted_domains() -> None:
    h = _h()
    taint = json.dumps([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    _node(h, "n1", zone="a", taints=taint)
    _node(h, "n2", zone="b")
    h.app("app1", queue="root.a")
    for policy in ("Honor", "Ignore"):
        tags = _tags({"app": policy}, spread=[_spread({"app": policy}, nodeTaintsPolicy=policy)])
        for i in range(2):
            h.ask(f"{policy}-{i}", "app1", tags=tags)
    h.step()
    assert [_where(h, f"Honor-{i}") for i in range(2)] == ["n2", "n2"]
    assert sorted(_where(h, f"Ignore-{i}") for i in range(2)) == ["", "n2"]  # zone a (0) holds it back


# --------------------------------------------------------------------------- bad tags
@pytest.mark.parametrize("tag, value, reason", [
    (TAG_POD_AFFINITY, "{not json", f"{AFFINITY} (invalid tag {TAG_POD_AFFINITY} is not JSON"),
    (TAG_POD_AFFINITY, json.dumps({"requiredAnti": [{"selector": {}, "topologyKey": ""}]}),
     f"{AFFINITY} (invalid tag {TAG_POD_AFFINITY}: requiredAnti[0].topologyKey must be a non-empty string)"),
    (TAG_POD_LABELS, "[1]", f"{AFFINITY} (invalid tag {TAG_POD_LABELS} must be a JSON object of strings"),
    (TAG_TOPOLOGY_SPREAD, json.dumps([{"maxSkew": 0, "topologyKey": ZONE}]),
     f"{SPREAD} (invalid tag {TAG_TOPOLOGY_SPREAD}[0].maxSkew must be an integer greater than zero, got 0)"),
])
def test_a_bad_tag_rejects_every_node_naming_it(tag, value, reason) -> None:
    h = _h()
    _node(h, "n1")
    _node(h, "n2")
    h.app("app1", queue="root.a")
    h.ask("bad", "app1", tags={**_tags({"app": "x"}), tag: value})
    h.step()
    assert not h.allocs_of("bad")
    message = _explain(h, "bad")["message"]
    assert message.startswith(f"0/2 nodes are available: {reason}"), message


# --------------------------------------------------------------------------- plain asks, signatures
def test_plain_asks_stay_plain_and_inter_pod_asks_are_not_memoised_across_pods() -> None:
    h = _h()
    _node(h, "n1")
    h.app("app1", queue="root.a")
    h.ask("plain", "app1", tags=_tags({"app": "x"}))
    h.ask("anti", "app1", tags=_tags({"app": "web"}, anti=[_term({"app": "web"})]))
    asks = h.p.apps["app1"].asks
    assert is_plain(asks["plain"], h.p.nodes) and signature(asks["plain"], h.p.nodes) is None
    before = signature(asks["anti"], h.p.nodes)
    h.step()
    assert h.allocs_of("anti")
    assert signature(asks["anti"], h.p.nodes) != before  # a pod came: what failed may pass


# --------------------------------------------------------------------------- the index
def test_the_index_kept_incrementally_equals_one_made_from_scratch() -> None:
    """Random pods land and leave on relabelled nodes; every count kept as they go equals the
    count made afresh from the pods."""
    rng = random.Random(7)
    h = _h()
    for i in range(8):
        _node(h, f"n{i}", zone="abc"[i % 3], memory=10_000)
    h.app("app1", queue="root.a")
    apps = ["web", "db", "cache"]
    terms = [_term({"app": a}, key=k, namespaces=ns) for a in apps for k in (HOST, ZONE) for ns in (("apps",), None)]
    index: PodIndex = h.p.nodes.pods
    for step in range(60):
        r = rng.random()
        if r < 0.5:
            app = rng.choice(apps)
            h.ask(f"p-{step}", "app1", memory=1, tags=_tags({"app": app}, ns=rng.choice(["apps", "other"]),
                                                           anti=[rng.choice(terms)] if rng.random() < 0.3 else None))
        elif r < 0.8 and h.p.allocations:
            victim = rng.choice(sorted(h.p.allocations))
            h.do(ReleaseAlloc("app1", victim))
        elif r < 0.9:
            h.do(AddForeign(f"f-{step}", f"n{rng.randrange(8)}", Resource({"memory": 1}),
                            tags=_tags({"app": rng.choice(apps)})))
        elif r < 0.95:
            h.do(UpdateNode(f"n{rng.randrange(8)}", attributes={NODE_LABELS: json.dumps(
                {HOST: f"n{rng.randrange(8)}", ZONE: rng.choice("abcd")})}))
        else:  # a node goes (its pods with it) and comes back empty
            nid = f"n{rng.randrange(8)}"
            if h.p.nodes.get(nid) is not None:
                h.do(RemoveNode(nid))
                _node(h, nid, zone=rng.choice("abc"), memory=10_000)
        h.step(1)
        from partition_worker.core.interpod import parse_pod_affinity
        for raw in terms:
            term = parse_pod_affinity(json.dumps({"required": [raw]}), "apps")[0].required[0]
            kept = index.counts(term)
            fresh = Counts()
            for nid, pod, n in index.pods():
                if term.counts(pod):
                    fresh.add(nid, h.p.nodes.get(nid).label_map().get(term.topology_key), n)
            assert (kept.by_node, kept.by_domain, kept.total) == (fresh.by_node, fresh.by_domain, fresh.total)
        for term, kept in index.anti.items():
            fresh = Counts()
            for nid, pod, n in index.pods():
                if term in pod.anti:
                    fresh.add(nid, h.p.nodes.get(nid).label_map().get(term.topology_key), n)
            assert kept.by_domain == fresh.by_domain and kept.by_node == fresh.by_node


def test_recovered_allocations_are_counted() -> None:
    h = _h()
    h.app("app1", queue="root.a")
    web = _tags({"app": "web"}, anti=[_term({"app": "web"})])
    h.do(AddNode("n1", Resource({"memory": 1000, "vcore": 1000}), attributes={NODE_LABELS: json.dumps({HOST: "n1"})},
                 existing=(RecoveredAlloc("uuid-r", "web-r", "app1", Resource({"memory": 10}), node_id="n1",
                                          tags=web),)))
    _node(h, "n2")
    h.ask("filler", "app1", memory=50, tags=_tags({"app": "x"}, **{TAG_NODE_SELECTOR_PREFIX + HOST: "n2"}))
    h.step()
    h.ask("web", "app1", tags=web)
    h.step()
    assert _where(h, "web") == "n2"  # n1, the emptier, runs the recovered web pod


# --------------------------------------------------------------------------- preemption

def _preempting(nodes: int):
    """A harness preempting for queue guarantees (high: 60 memory guaranteed, low: none), with
    nodes n1..nN."""
    root = q("root", q("high", guaranteed={"memory": 60}), q("low", guaranteed={"memory": 0}), submitacl="*")
    h = _h(preemption=True, root=root)
    for i in range(1, nodes + 1):
        _node(h, f"n{i}")
    return h


def test_preemption_never_picks_a_node_where_anti_affinity_still_fails() -> None:
    h = _preempting(2)
    h.app("lo", "root.low", "bob")
    # n1: a victim next to a web pod of high priority (not a victim); n2: a victim too. Either
    # frees the room; n1 comes first, but the preemptor's anti-affinity to web rules it out
    h.ask("web-pinned", "lo", memory=10, priority=100, tags=_tags({"app": "web"}, **{
        TAG_NODE_SELECTOR_PREFIX + HOST: "n1"}))
    h.step(1)
    h.ask("big", "lo", memory=80, tags={**_tags({"app": "x"}), TAG_NODE_SELECTOR_PREFIX + HOST: "n1"})
    h.step(1)
    for i in range(2):
        h.ask(f"small-{i}", "lo", memory=45, tags={**_tags({"app": "x"}), TAG_NODE_SELECTOR_PREFIX + HOST: "n2"})
        h.step(1)
    assert _where(h, "big") == "n1" and _where(h, "small-1") == "n2"
    h.app("hi", "root.high", "alice")
    h.ask("web", "hi", memory=50, tags=_tags({"app": "web"}, anti=[_term({"app": "web"})]))
    h.step(1)
    h.step(31 * SECOND)
    victims = [r.uuid for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]
    assert victims == [h.allocs_of("small-1")[0].uuid]  # the younger on n2; big on n1 stays
    for _ in range(3):
        h.step(1)
    assert _where(h, "web") == "n2"


def test_preemption_does_not_take_the_pod_an_affinity_needs() -> None:
    h = _preempting(1)
    h.app("lo", "root.low", "bob")
    h.ask("cache", "lo", memory=90, tags=_tags({"app": "cache"}))
    h.step(1)
    h.app("hi", "root.high", "alice")
    h.ask("follower", "hi", memory=50, tags=_tags({"app": "f"}, affinity=[_term({"app": "cache"})]))
    h.step(1)
    h.step(31 * SECOND)
    # the only victim is the pod its affinity needs: removing it would not let it run
    assert not [r for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]


def test_preemption_may_take_the_pod_an_anti_affinity_objects_to() -> None:
    h = _preempting(1)
    h.app("lo", "root.low", "bob")
    h.ask("web-low", "lo", memory=60, tags=_tags({"app": "web"}))
    h.step(1)
    h.ask("other", "lo", memory=40, tags=_tags({"app": "x"}))
    h.step(1)
    h.app("hi", "root.high", "alice")
    h.ask("web", "hi", memory=50, tags=_tags({"app": "web"}, anti=[_term({"app": "web"})]))
    h.step(1)
    h.step(31 * SECOND)
    victims = [r.uuid for r in h.log.released if r.termination is Termination.PREEMPTED_BY_SCHEDULER]
    assert victims == [h.allocs_of("web-low")[0].uuid]  # room and the conflict both gone with it
    for _ in range(3):
        h.step(1)
    assert _where(h, "web") == "n1"


def test_a_pod_leaves_the_index_even_when_its_tags_were_parsed_again() -> None:
    from partition_worker.core import interpod
    h = _h()
    _node(h, "n1")
    h.app("app1", queue="root.a")
    h.ask("web", "app1", tags=_tags({"app": "web"}))
    h.step()
    interpod._pod_info.cache_clear()  # (as when many distinct label sets pushed it out)
    interpod.parse_pod_labels.cache_clear()
    h.do(ReleaseAlloc("app1", h.allocs_of("web")[0].uuid))
    assert not h.p.nodes.pods.on_node and not list(h.p.nodes.pods.pods())
