"""Inter-pod constraints as the shim sends them to the core (``k8s_shim.translate.interpod``, the
SI contract of ``common.constants``): every pod's labels and namespace, our pods' and foreign
pods' pod (anti-)affinity with namespaces resolved, our pods' topology spread constraints, the
selectors as a 1.36 API server stores them (the pods of the recordings 04 and 14 read back), task
groups' terms on placeholders, and a bad selector named on the pod while nothing placed moves."""

from __future__ import annotations

import json

import pytest

from common.constants import (TAG_NAMESPACE, TAG_POD_AFFINITY, TAG_POD_LABELS, TAG_TOPOLOGY_SPREAD,
                              TAG_UNSUPPORTED_CONSTRAINTS)
from k8s_shim.translate.gang import ANNOTATION_TASK_GROUPS, read_gang
from k8s_shim.translate.interpod import affinity_tag, read_interpod, selector_matches
from k8s_shim.translate.model import App
from k8s_shim.translate.namespaces import read_namespace
from k8s_shim.translate.pods import PodRules, read_pod
from k8s_shim.writes.placeholders import PlaceholderSettings, app_gang, placeholder_pod
from tests.k8s_fake.wire import WIRE, load
from tests.k8s_shim.test_gang import gang_pod
from tests.k8s_shim.test_shim import OTHERS, World, raw_node, raw_pod, registered_node, run, sent, turn

RULES = PodRules()
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
V136 = WIRE / "v1.36"


def pod(name="p", ns="ns", labels=None, scheduler="yunikorn", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels or {}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "c"}], **spec}, "status": {"phase": "Pending"}}


def tags(raw: dict) -> dict:
    return read_pod(raw, RULES).tags


def anti(selector, key=HOST, **term) -> dict:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": key, **term}]}}


# ---------------------------------------------------------------------- each field
def test_every_pod_carries_its_labels_and_namespace_ours_and_foreign():
    for scheduler in ("yunikorn", "default-scheduler"):
        t = tags(pod(labels={"app": "web", "tier": "1"}, scheduler=scheduler))
        assert json.loads(t[TAG_POD_LABELS]) == {"app": "web", "tier": "1"} and t[TAG_NAMESPACE] == "ns"
    assert json.loads(tags(pod())[TAG_POD_LABELS]) == {}


def test_required_and_preferred_affinity_and_anti_affinity_with_weights():
    sel = {"matchLabels": {"app": "cache"}}
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": sel, "topologyKey": HOST}],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 30, "podAffinityTerm": {"labelSelector": sel, "topologyKey": ZONE}}]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                     "topologyKey": HOST}],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"topologyKey": ZONE}}]}}
    got = json.loads(tags(pod(affinity=affinity))[TAG_POD_AFFINITY])
    assert got == {
        "required": [{"selector": sel, "topologyKey": HOST, "namespaces": ["ns"]}],
        "requiredAnti": [{"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                          "topologyKey": HOST, "namespaces": ["ns"]}],
        "preferred": [{"weight": 30, "term": {"selector": sel, "topologyKey": ZONE, "namespaces": ["ns"]}}],
        "preferredAnti": [{"weight": 100, "term": {"selector": None, "topologyKey": ZONE, "namespaces": ["ns"]}}]}


def test_spread_constraints_both_kinds_with_min_domains_and_policies():
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "x"}}, "minDomains": 2, "nodeAffinityPolicy": "Honor",
               "nodeTaintsPolicy": "Ignore"},
              {"maxSkew": 3, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"}]
    p = read_pod(pod(topologySpreadConstraints=spread), RULES)
    assert json.loads(p.tags[TAG_TOPOLOGY_SPREAD]) == [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
         "selector": {"matchLabels": {"app": "x"}}, "minDomains": 2, "nodeAffinityPolicy": "Honor",
         "nodeTaintsPolicy": "Ignore"},
        {"maxSkew": 3, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "selector": None}]
    assert not p.problems


def test_a_foreign_pod_carries_its_affinity_for_the_symmetric_rule_but_no_spread():
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]
    t = tags(pod(scheduler="default-scheduler", affinity=anti({"matchLabels": {"app": "db"}}),
                 topologySpreadConstraints=spread, labels={"app": "db"}))
    assert json.loads(t[TAG_POD_AFFINITY])["requiredAnti"][0]["selector"] == {"matchLabels": {"app": "db"}}
    assert TAG_TOPOLOGY_SPREAD not in t and json.loads(t[TAG_POD_LABELS]) == {"app": "db"}


# ---------------------------------------------------------------------- namespaces
NS_LABELS = {"ns": {"team": "a"}, "other": {}, "prod": {"team": "a", "env": "prod"}, "dev": {"team": "b"}}


@pytest.mark.parametrize("term, expected", [
    ({}, ["ns"]),
    ({"namespaces": ["x", "y"]}, ["x", "y"]),
    ({"namespaceSelector": {}}, None),
    ({"namespaceSelector": {}, "namespaces": ["x"]}, None),
    ({"namespaceSelector": {"matchLabels": {"team": "a"}}}, ["ns", "prod"]),
    ({"namespaceSelector": {"matchLabels": {"team": "a"}}, "namespaces": ["other"]}, ["ns", "other", "prod"]),
    ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}},
     ["dev", "other"]),
    ({"namespaceSelector": {"matchLabels": {"team": "z"}}}, []),
], ids=["own namespace", "the list", "empty selector: all", "empty selector wins over a list", "by labels",
        "by labels and the list", "NotIn", "no namespace matches"])
def test_a_terms_namespaces_are_resolved(term, expected):
    interpod, _, bad = read_interpod({"affinity": anti({"matchLabels": {"a": "b"}}, **term)}, {})
    assert bad is None
    [got] = json.loads(affinity_tag(interpod, "ns", NS_LABELS))["requiredAnti"]
    assert got["namespaces"] == (sorted(expected) if expected is not None else None)


def test_a_namespace_keeps_its_labels():
    assert read_namespace({"metadata": {"name": "n", "labels": {"team": "a"}}}).labels == {"team": "a"}


def test_a_pending_ask_is_sent_again_when_a_namespaces_labels_change_its_namespaces():
    async def main():
        w = World()
        w.shim.namespace_changed(None, read_namespace({"metadata": {"name": "ns", "labels": {"team": "a"}}}))
        w.shim.namespace_changed(None, read_namespace({"metadata": {"name": "other", "labels": {}}}))
        raw = raw_pod("p", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST,
             "namespaceSelector": {"matchLabels": {"team": "a"}}}]}})
        w.pod(raw)
        await w.accept_apps("app-1")
        await turn()
        [ask] = sent(w.api.take(), "allocations")
        assert json.loads(ask.allocationTags[TAG_POD_AFFINITY])["required"][0]["namespaces"] == ["ns"]
        old = w.shim.namespaces["other"]
        w.shim.namespace_changed(old, read_namespace({"metadata": {"name": "other", "annotations": {"x": "y"}}}))
        await turn()
        assert not sent(w.api.take(), "allocations")  # not its labels: nothing to send
        w.shim.namespace_changed(w.shim.namespaces["other"],
                                 read_namespace({"metadata": {"name": "other", "labels": {"team": "a"}}}))
        await turn()
        [ask] = sent(w.api.take(), "allocations")  # the same key: it replaces the pending ask
        assert ask.allocationKey == "uid-p"
        assert json.loads(ask.allocationTags[TAG_POD_AFFINITY])["required"][0]["namespaces"] == ["ns", "other"]
    run(main())


# ---------------------------------------------------------------------- what a 1.36 server stores
def _recorded_pod(file: str, exchange: int) -> dict:
    path = next(V136.glob(f"{file}-*.json"), None)
    if path is None:
        pytest.skip(f"no recordings under {V136}")
    return load(path)["exchanges"][exchange]["response"]["body"]


def test_selectors_merged_by_the_server_are_taken_as_stored_not_merged_again():
    stored = _recorded_pod("14", 0)  # anti: matchLabelKeys and mismatchLabelKeys merged by the server
    stored["spec"]["schedulerName"] = "yunikorn"
    got = json.loads(tags(stored)[TAG_POD_AFFINITY])
    terms = stored["spec"]["affinity"]["podAntiAffinity"]
    assert got["requiredAnti"][0]["selector"] == \
        terms["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
    assert got["preferredAnti"][0]["term"]["selector"] == \
        terms["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["labelSelector"]
    spread = _recorded_pod("14", 2)
    spread["spec"]["schedulerName"] = "yunikorn"
    got = json.loads(tags(spread)[TAG_TOPOLOGY_SPREAD])
    assert [c["selector"] for c in got] == [c["labelSelector"] for c in spread["spec"]["topologySpreadConstraints"]]
    assert got[0]["minDomains"] == 3 and "nodeAffinityPolicy" not in got[1]


def test_match_label_keys_an_older_server_did_not_merge_are_merged_here():
    labels = {"app": "web", "pod-template-hash": "abc123", "tenant": "t1"}
    affinity = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}},
                                                            "topologyKey": HOST,
                                                            "matchLabelKeys": ["pod-template-hash", "absent"]}],
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
            "topologyKey": ZONE, "mismatchLabelKeys": ["tenant"]}}]}}
    got = json.loads(tags(pod(labels=labels, affinity=affinity))[TAG_POD_AFFINITY])
    recorded = _recorded_pod("14", 0)["spec"]["affinity"]["podAntiAffinity"]  # what 1.36 stores for the same
    assert got["requiredAnti"][0]["selector"] == \
        recorded["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]
    assert got["preferredAnti"][0]["term"]["selector"] == \
        recorded["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["labelSelector"]


def test_the_recorded_namespace_selector_and_list_pod_waits_for_the_namespaces_labels():
    stored = _recorded_pod("14", 1)  # podAffinity with namespaceSelector {team: a} and namespaces [other]
    p = read_pod({**stored, "spec": {**stored["spec"], "schedulerName": "yunikorn"}}, RULES)
    assert TAG_POD_AFFINITY not in p.tags and p.interpod.by_labels  # resolved by the shim, per namespace labels
    [term] = json.loads(affinity_tag(p.interpod, "aff", {"aff": {"team": "a"}, "b": {}}))["required"]
    assert term["namespaces"] == ["aff", "other"] and term["topologyKey"] == ZONE


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("spec, field", [
    ({"affinity": anti({"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]})},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
     ".matchExpressions[0].operator"),
    ({"affinity": anti({"matchExpressions": [{"key": "app", "operator": "In"}]})},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
     ".matchExpressions[0].values"),
    ({"affinity": anti({"matchLabels": ["app"]})},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels"),
    ({"affinity": anti({}, namespaceSelector={"matchExpressions": [{"key": "t", "operator": "Exists",
                                                                    "values": ["x"]}]})},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector"
     ".matchExpressions[0].values"),
    ({"affinity": anti({}, key="")},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
    ({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]},
     "spec.topologySpreadConstraints[0].maxSkew"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Maybe"}]},
     "spec.topologySpreadConstraints[0].whenUnsatisfiable"),
    ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                     "labelSelector": {"matchExpressions": "app"}}]},
     "spec.topologySpreadConstraints[0].labelSelector.matchExpressions"),
], ids=["operator", "In without values", "matchLabels", "Exists with values", "topologyKey", "maxSkew",
        "whenUnsatisfiable", "matchExpressions"])
def test_a_selector_or_term_that_cannot_be_read_blocks_the_pod_naming_the_field(spec, field):
    p = read_pod(pod(**spec), RULES)
    assert p.blocked is not None and p.blocked.field == field
    assert TAG_POD_AFFINITY not in p.tags and TAG_TOPOLOGY_SPREAD not in p.tags


def test_a_bad_selector_gets_a_warning_naming_pod_and_field_the_pod_waits_and_placed_pods_stay():
    async def main():
        w = World()
        await registered_node(w)
        w.pod(raw_pod("running", node="n1", phase="Running", affinity=anti({"matchLabels": {"app": "x"}})))
        bad = anti({"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]})
        w.pod(raw_pod("bad", affinity=bad))
        await w.accept_apps("app-1")
        await turn()
        [placed] = sent(w.api.take(), "allocations")  # the running pod only: the bad one is not asked for
        assert placed.allocationKey == "uid-running" and placed.nodeID == "n1"
        assert json.loads(placed.allocationTags[TAG_POD_AFFINITY])["requiredAnti"][0]["topologyKey"] == HOST
        [(name, _, note)] = w.notes("FailedScheduling")
        assert name == "bad" and "ns/bad" in note
        assert ("spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
                ".matchExpressions[0].operator") in note
        assert not sent(w.api.take(), "releases")
    run(main())


def test_asks_placed_and_foreign_allocations_carry_labels_namespace_and_affinity():
    async def main():
        w = World()
        await registered_node(w)
        raw = raw_pod("db", node="n1", scheduler="default-scheduler", phase="Running",
                      affinity=anti({"matchLabels": {"applicationId": "app-1"}}))
        w.shim.foreign_changed(None, OTHERS(raw, None))
        spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"applicationId": "app-1"}}}]
        w.pod(raw_pod("web", topologySpreadConstraints=spread, affinity=anti({"matchLabels": {"x": "y"}})))
        await w.accept_apps("app-1")
        await turn()
        by_key = {a.allocationKey: a for a in sent(w.api.take(), "allocations")}
        foreign, ask = by_key["uid-db"], by_key["uid-web"]
        assert foreign.allocationTags[TAG_NAMESPACE] == "ns" and foreign.nodeID == "n1"
        assert json.loads(foreign.allocationTags[TAG_POD_LABELS]) == {"applicationId": "app-1"}
        assert TAG_POD_AFFINITY in foreign.allocationTags and TAG_TOPOLOGY_SPREAD not in foreign.allocationTags
        assert json.loads(ask.allocationTags[TAG_TOPOLOGY_SPREAD])[0]["topologyKey"] == ZONE
        assert TAG_POD_AFFINITY in ask.allocationTags and TAG_UNSUPPORTED_CONSTRAINTS not in ask.allocationTags
        assert not w.notes("FailedScheduling")
    run(main())


# ---------------------------------------------------------------------- placeholders
GROUP_TERMS = {"affinity": anti({"matchLabels": {"team": "ml"}}),
               "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"team": "ml"}}}]}


def test_a_placeholder_carries_its_task_groups_labels_affinity_and_spread():
    groups = [{"name": "workers", "minMember": 2, "minResource": {"cpu": "500m"}, "labels": {"team": "ml"},
               **GROUP_TERMS}]
    spec = read_pod(gang_pod("driver", groups=groups), RULES)
    app = App("gang-1", "ns", "root.ml", "u", (), {}, gang=app_gang(spec))
    body = placeholder_pod("tg-gang-1-workers-abc", app, app.gang.groups[0], PlaceholderSettings(), "yunikorn", [])
    back = read_pod({**body, "metadata": {**body["metadata"], "uid": "ph-1"}}, RULES)
    assert json.loads(back.tags[TAG_POD_LABELS])["team"] == "ml"
    assert json.loads(back.tags[TAG_POD_AFFINITY])["requiredAnti"][0]["selector"] == {"matchLabels": {"team": "ml"}}
    assert json.loads(back.tags[TAG_TOPOLOGY_SPREAD])[0]["selector"] == {"matchLabels": {"team": "ml"}}


def test_a_task_group_with_a_term_that_cannot_be_read_is_named():
    groups = [{"name": "workers", "minMember": 1, "minResource": {"cpu": "1"},
               "affinity": anti({"matchExpressions": [{"key": "team", "operator": "Near", "values": ["a"]}]})}]
    g = read_gang({ANNOTATION_TASK_GROUPS: json.dumps(groups)})
    (where, message), = g.problems
    assert g.groups == () and where == f"metadata.annotations[{ANNOTATION_TASK_GROUPS}]"
    assert "[0].affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector" \
           ".matchExpressions[0].operator of task group workers" in message


def test_selector_matching():
    labels = {"a": "1", "b": "2"}
    assert selector_matches({}, labels) and not selector_matches(None, labels)
    assert selector_matches({"matchLabels": {"a": "1"}, "matchExpressions": [
        {"key": "b", "operator": "In", "values": ["2", "3"]}, {"key": "c", "operator": "DoesNotExist"},
        {"key": "a", "operator": "Exists"}, {"key": "b", "operator": "NotIn", "values": ["9"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "c", "operator": "Exists"}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["1"]}]}, labels)


def test_a_foreign_pods_namespace_selector_is_resolved_when_it_is_reported():
    async def main():
        w = World()
        w.shim.namespace_changed(None, read_namespace({"metadata": {"name": "ns", "labels": {"team": "a"}}}))
        w.shim.namespace_changed(None, read_namespace({"metadata": {"name": "b", "labels": {"team": "a"}}}))
        await registered_node(w)
        raw = raw_pod("db", node="n1", scheduler="default-scheduler", phase="Running",
                      affinity=anti({"matchLabels": {"app": "x"}}, namespaceSelector={"matchLabels": {"team": "a"}}))
        w.shim.foreign_changed(None, OTHERS(raw, None))
        await turn()
        [fa] = sent(w.api.take(), "allocations")
        assert json.loads(fa.allocationTags[TAG_POD_AFFINITY])["requiredAnti"][0]["namespaces"] == ["b", "ns"]
    run(main())
