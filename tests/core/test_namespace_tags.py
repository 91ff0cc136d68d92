"""The namespace annotations the k8s shim sends as app tags (core/namespace_tags.py):
``namespace.resourcequota`` (max), ``namespace.resourceguaranteed`` (guaranteed) and
``namespace.resourcemaxapps`` (maxapplications) set on the dynamic leaf an app is placed in, as
YuniKorn 1.9's core does; bad values named in an event, the app placed all the same."""

from __future__ import annotations

import json

import pytest

from common.config.default import DEFAULT_CONFIG_TEXT
from common.resources import Resource
from tests.core.harness import Harness, harness_from_yaml

QUOTA, GUARANTEED, MAX_APPS = "namespace.resourcequota", "namespace.resourceguaranteed", "namespace.resourcemaxapps"
CONFIG = DEFAULT_CONFIG_TEXT + """\
        queues:
          - name: managed
"""


def si(**values: int) -> str:
    return json.dumps({"resources": {k: {"value": v} for k, v in values.items()}})


def _h() -> Harness:
    return harness_from_yaml(CONFIG)


def _events(h: Harness) -> list[str]:
    return [e.message for e in h.log.events if e.reason == "InvalidNamespaceTag"]


def test_a_dynamic_leaf_takes_max_guaranteed_and_max_applications_from_the_tags() -> None:
    h = _h()
    h.app("a1", tags={"namespace": "team", QUOTA: si(memory=100, vcore=10), GUARANTEED: si(memory=40),
                      MAX_APPS: "2"})
    leaf = h.p.queues.find("root.team")
    assert (leaf.max, leaf.guaranteed, leaf.max_apps) == (Resource({"memory": 100, "vcore": 10}),
                                                           Resource({"memory": 40}), 2)
    assert h.app_state("a1") == "New" and not _events(h)


def test_the_tags_are_applied_again_by_each_app_added() -> None:
    h = _h()
    h.app("a1", tags={"namespace": "team", QUOTA: si(memory=100), MAX_APPS: "2"})
    h.app("a2", tags={"namespace": "team", QUOTA: si(memory=300), MAX_APPS: "5"})
    leaf = h.p.queues.find("root.team")
    assert (leaf.max, leaf.max_apps) == (Resource({"memory": 300}), 5)


def test_one_resource_tag_sets_both_the_other_is_cleared_as_yunikorn_does() -> None:
    h = _h()
    h.app("a1", tags={"namespace": "team", QUOTA: si(memory=100), GUARANTEED: si(memory=10)})
    h.app("a2", tags={"namespace": "team", GUARANTEED: si(memory=20)})
    leaf = h.p.queues.find("root.team")
    assert (leaf.max, leaf.guaranteed) == (None, Resource({"memory": 20}))
    h.app("a3", tags={"namespace": "team", MAX_APPS: "3"})  # no resource tag: resources stay
    assert (leaf.max, leaf.guaranteed, leaf.max_apps) == (None, Resource({"memory": 20}), 3)


def test_a_queue_from_the_config_keeps_its_own_settings() -> None:
    h = _h()
    h.app("a1", tags={"namespace": "managed", QUOTA: si(memory=100), GUARANTEED: si(memory=10), MAX_APPS: "1"})
    leaf = h.p.queues.find("root.managed")
    assert (leaf.max, leaf.guaranteed, leaf.max_apps) == (None, None, 0)
    assert h.app_state("a1") == "New"
    h.app("a2", tags={"namespace": "managed", MAX_APPS: "x"})  # a bad value is named all the same
    assert _events(h) == [f"application a2: tag {MAX_APPS} ignored (not an unsigned integer): x"]


BAD = [
    # id, tag, value, why
    ("quota not JSON", QUOTA, "lots", "not JSON"),
    ("quota not an object", QUOTA, "[1]", "not a JSON object"),
    ("quota not an integer", QUOTA, json.dumps({"resources": {"memory": {"value": "10"}}}),
     "quantity of memory is not an integer"),
    ("quota negative", QUOTA, si(memory=-5, vcore=2), "a quantity is negative"),
    ("quota zero", QUOTA, si(memory=0), "no quantity is greater than zero"),
    ("guaranteed negative", GUARANTEED, si(memory=-1), "a quantity is negative"),
    ("max apps negative", MAX_APPS, "-1", "not an unsigned integer"),
    ("max apps not an integer", MAX_APPS, "1.5", "not an unsigned integer"),
    ("max apps not a number", MAX_APPS, "many", "not an unsigned integer"),
]


@pytest.mark.parametrize("tag, value, why", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_value_is_named_in_an_event_and_the_app_is_placed_all_the_same(tag, value, why) -> None:
    h = _h()
    h.app("a1", tags={"namespace": "team", tag: value})
    leaf = h.p.queues.find("root.team")
    assert h.app_state("a1") == "New" and leaf.apps.keys() == {"a1"}
    assert (leaf.max, leaf.guaranteed, leaf.max_apps) == (None, None, 0)
    assert _events(h) == [f"application a1: tag {tag} ignored ({why}): {value}"]


def test_a_bad_value_does_not_stop_the_good_ones() -> None:
    h = _h()
    h.app("a1", tags={"namespace": "team", QUOTA: "oops", GUARANTEED: si(memory=10), MAX_APPS: "4"})
    leaf = h.p.queues.find("root.team")
    assert (leaf.max, leaf.guaranteed, leaf.max_apps) == (None, Resource({"memory": 10}), 4)
    assert _events(h) == [f"application a1: tag {QUOTA} ignored (not JSON): oops"]


def test_max_applications_from_the_tag_holds_the_next_app_back() -> None:
    h = _h()
    h.node("n1", memory=1000, vcore=100)
    for app_id in ("a1", "a2"):
        h.app(app_id, tags={"namespace": "team", MAX_APPS: "1"})
        h.ask(f"{app_id}-k", app_id, memory=10, vcore=1)
    h.step()
    assert [a.alloc.key for a in h.log.allocations] == ["a1-k"]
    held = h.p.apps["a2"].asks["a2-k"]
    assert held.sched_state.value == "SKIPPED" and "root.team" in held.sched_reason


def test_the_quota_tag_caps_the_namespace() -> None:
    h = _h()
    h.node("n1", memory=1000, vcore=100)
    h.app("a1", tags={"namespace": "team", QUOTA: si(memory=25, vcore=10)})
    for i in range(3):
        h.ask(f"k{i}", "a1", memory=10, vcore=1)
    h.step()
    assert len(h.log.allocations) == 2
