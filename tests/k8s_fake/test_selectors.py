"""Label and field selectors: Kubernetes' grammar and semantics (file 11's cases and more)."""

from __future__ import annotations

import pytest

from k8s_shim.fake.selectors import SelectorError, parse_fields, parse_labels

LABELS = {"app": "web", "tier": "front", "n": "7"}


@pytest.mark.parametrize("selector, matches", [
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("app!=db", True),
    ("missing!=x", True),  # != matches objects without the key
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("app in (web,db)", True),
    ("app in (db)", False),
    ("app notin (db)", True),
    ("missing notin (x)", True),  # notin too
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("app=web, tier in (front)", True),
    ("n>5", True),
    ("n<5", False),
    ("missing>1", False),
], ids=lambda v: str(v))
def test_a_label_selector_matches_as_kubernetes_does(selector, matches):
    assert parse_labels(selector).matches(LABELS) is matches


@pytest.mark.parametrize("selector", ["applicationId==(", "app in web", "app in (a", "=x", "app=web,", "a b",
                                      "app=-bad-"])
def test_a_malformed_label_selector_is_an_error(selector):
    with pytest.raises(SelectorError):
        parse_labels(selector)


def test_the_recorded_parse_error_text_is_kept():
    with pytest.raises(SelectorError, match=r"^unable to parse requirement: found '\(', expected: identifier$"):
        parse_labels("applicationId==(")


FIELDS = {"spec.nodeName": "", "spec.schedulerName": "yunikorn", "status.phase": "Pending"}


@pytest.mark.parametrize("selector, matches", [
    ("spec.nodeName=", True),  # unassigned
    ("spec.nodeName!=", False),
    ("spec.schedulerName=yunikorn,spec.nodeName=", True),
    ("status.phase!=Succeeded,status.phase!=Failed", True),
    ("status.phase==Running", False),
])
def test_a_field_selector_matches_as_kubernetes_does(selector, matches):
    assert parse_fields(selector, lambda f: f in FIELDS).matches(FIELDS) is matches


def test_an_unsupported_field_is_named():
    with pytest.raises(SelectorError, match="^field label not supported: spec.priority$"):
        parse_fields("spec.priority=0", lambda f: f in FIELDS)
