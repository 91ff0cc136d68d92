"""Rule-set lifecycle: initialisation, bad sets, updates keep or replace the rules."""

import pytest

from common.config import ConfigError
from common.config.model import PlacementRuleConfig as R
from partition_worker.placement import AppPlacementInfo, PlacementManager
from tests.placement.fake_queues import FakeQueueTree

TREE = FakeQueueTree.from_yaml(
    "partitions:\n  - queues:\n      - name: root\n        submitacl: '*'\n        queues:\n          - name: q1\n          - name: q2\n"
)
APP = AppPlacementInfo("a1", "", "alice", ("alice",), {})


def test_no_rules_means_not_initialised():
    manager = PlacementManager([])
    assert not manager.initialised


def test_uninitialised_manager_returns_the_apps_queue_qualified():
    manager = PlacementManager()
    assert manager.place(AppPlacementInfo("a", "Q1", "u"), TREE) == "root.q1"
    assert manager.place(AppPlacementInfo("a", "root.q2", "u"), TREE) == "root.q2"


BAD_SETS = [
    ("unknown rule", [R("primarygroup")], "unknown rule name specified primarygroup, failing placement rule config"),
    ("invalid rule name", [R("1user")], "invalid rule name 1user, a name must be a valid identifier"),
    ("fixed without value", [R("fixed")], "a fixed queue rule must have a queue name set"),
    ("tag without value", [R("tag")], "a tag queue rule must have a tag name set"),
    ("qualified fixed with parent", [R("fixed", value="root.x", parent=R("user"))],
     "cannot have a fixed queue rule with qualified queue name and a parent rule: root.x"),
    ("bad parent", [R("user", parent=R("bogus"))], "parent (bogus): unknown rule name specified bogus"),
]


@pytest.mark.parametrize("rules,message", [c[1:] for c in BAD_SETS], ids=[c[0] for c in BAD_SETS])
def test_bad_rule_set_is_a_config_error_naming_the_rule(rules, message):
    with pytest.raises(ConfigError) as err:
        PlacementManager([R("user")] + rules)
    assert len(err.value.errors) == 1
    assert err.value.errors[0].startswith("placement rule 2 (")
    assert message in err.value.errors[0]


def test_bad_update_keeps_the_old_rules_and_raises_for_the_caller_to_report():
    # the placement package does not log (it is part of the pure core); the worker's session
    # logs the rejected update (tests/core/test_session.py)
    manager = PlacementManager([R("fixed", value="q1")])
    with pytest.raises(ConfigError, match="a fixed queue rule must have a queue name set"):
        manager.update_rules([R("fixed")])
    assert manager.initialised
    assert manager.place(APP, TREE) == "root.q1"


def test_bad_update_leaves_an_uninitialised_manager_uninitialised():
    manager = PlacementManager()
    with pytest.raises(ConfigError):
        manager.update_rules([R("nope")])
    assert not manager.initialised


def test_good_update_replaces_the_rules():
    manager = PlacementManager([R("fixed", value="q1")])
    manager.update_rules([R("fixed", value="q2")])
    assert manager.place(APP, TREE) == "root.q2"


def test_update_to_no_rules_uninitialises():
    manager = PlacementManager([R("fixed", value="q1")])
    manager.update_rules([])
    assert not manager.initialised


def test_update_of_uninitialised_manager_initialises_it():
    manager = PlacementManager()
    manager.update_rules([R("fixed", value="q1")])
    assert manager.initialised and manager.place(APP, TREE) == "root.q1"
