"""Each rule's behaviour: _dot_, qualification, parents (nested, leaf parent), create, filters."""

import pytest

from common.config import load_config
from common.config.model import FilterConfig, PlacementRuleConfig as R
from partition_worker.placement import NO_RULE_MATCHED, AppPlacementInfo, PlacementError, PlacementManager, RULES, replace_dot
from common.config.placement_rules import RULE_NAMES as PLACEMENT_RULE_NAMES
from tests.placement.fake_queues import FakeQueueTree
from tests.queues_yaml import open_root, queues_yaml

OPEN = queues_yaml(open_root("""
- name: leafq
- name: parentq
  parent: true
  queues:
    - name: child
- name: team
  parent: true
- name: locked
  parent: true
  submitacl: ' admins'
- name: a
  queues:
    - name: b
      parent: true
"""))
CLOSED_ROOT = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: open
            parent: true
            submitacl: '*'
          - name: admins_only
            adminacl: ' admins'
          - name: locked
            parent: true
            submitacl: ' admins'
"""


def app(user="alice", queue="", groups=(), **tags):
    return AppPlacementInfo("app-1", queue, user, tuple(groups), tags)


def place(rules, a, config=OPEN):
    return PlacementManager(rules).place(a, FakeQueueTree.from_yaml(config))


def test_registry_knows_exactly_the_rules_the_validator_accepts():
    assert sorted(RULES) == sorted(PLACEMENT_RULE_NAMES)


@pytest.mark.parametrize(
    "name,expected",
    [("user", "user"), ("first.last", "first_dot_last"), ("a.b.c", "a_dot_b_dot_c"), ("", "")],
    ids=["no dot", "one dot", "many dots", "empty"],
)
def test_replace_dot(name, expected):
    assert replace_dot(name) == expected


CASES = [
    # id, rules, app, expected (str path or None for no match)
    ("provided unqualified goes below root", [R("provided", create=True)], app(queue="q1"), "root.q1"),
    ("provided with dots replaced", [R("provided", create=True)], app(queue="a.b"), "root.a_dot_b"),
    ("provided qualified kept with its hierarchy", [R("provided")], app(queue="root.parentq.child"), "root.parentq.child"),
    ("provided qualified in upper case", [R("provided")], app(queue="ROOT.LEAFQ"), "root.leafq"),
    ("provided empty queue does not match", [R("provided", create=True)], app(queue=""), None),
    ("provided without create and missing queue", [R("provided")], app(queue="nope"), None),
    ("provided naming a parent queue does not match", [R("provided")], app(queue="root.parentq"), None),
    ("user below root", [R("user", create=True)], app(user="bob"), "root.bob"),
    ("user name lower-cased", [R("user", create=True)], app(user="Bob"), "root.bob"),
    ("user with invalid queue characters does not match", [R("user", create=True)], app(user="bob smith"), None),
    ("user below a fixed parent", [R("user", create=True, parent=R("fixed", value="team"))], app(user="x.y"), "root.team.x_dot_y"),
    ("fixed hierarchy keeps dots", [R("fixed", value="parentq.child")], app(), "root.parentq.child"),
    ("fixed qualified", [R("fixed", value="root.leafq")], app(), "root.leafq"),
    ("fixed value lower-cased", [R("fixed", value="LeafQ")], app(), "root.leafq"),
    ("fixed missing without create", [R("fixed", value="ghost")], app(), None),
    ("fixed missing with create", [R("fixed", value="ghost", create=True)], app(), "root.ghost"),
    ("fixed rootbeer is a child of root", [R("fixed", value="rootbeer", create=True)], app(), "root.rootbeer"),
    ("tag value", [R("tag", value="namespace", create=True)], app(namespace="ns1"), "root.ns1"),
    ("tag key case-insensitive", [R("tag", value="NameSpace", create=True)], app(namespace="ns1"), "root.ns1"),
    ("tag value with dots", [R("tag", value="namespace", create=True)], app(namespace="a.b"), "root.a_dot_b"),
    ("tag value qualified skips parent", [R("tag", value="ns", parent=R("fixed", value="team"))], app(ns="root.leafq"), "root.leafq"),
    ("tag empty value no match", [R("tag", value="namespace", create=True)], app(namespace=""), None),
    ("first matching rule wins", [R("fixed", value="ghost"), R("fixed", value="leafq"), R("user", create=True)], app(), "root.leafq"),
    ("leaf cannot become a parent", [R("fixed", value="leafq.sub", create=True)], app(), None),
    ("leaf cannot become a parent then next rule", [R("fixed", value="leafq.sub", create=True), R("fixed", value="leafq")], app(), "root.leafq"),
]


@pytest.mark.parametrize("rules,a,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(rules, a, expected):
    if expected is None:
        with pytest.raises(PlacementError, match=NO_RULE_MATCHED):
            place(rules, a)
    else:
        assert place(rules, a) == expected


def test_nested_parents_execute_last_first():
    # user < tag < fixed: the last parent (fixed) makes the queue directly below root.
    rule = R("user", create=True, parent=R("tag", value="namespace", create=True, parent=R("fixed", value="team")))
    assert place([rule], app(user="u1", namespace="ns")) == "root.team.ns.u1"


def test_nested_parent_that_does_not_match_fails_the_rule():
    rule = R("user", create=True, parent=R("tag", value="namespace", create=True, parent=R("fixed", value="ghost")))
    with pytest.raises(PlacementError, match=NO_RULE_MATCHED):
        place([rule], app(user="u1", namespace="ns"))


def test_parent_rule_returning_a_leaf_fails_the_placement():
    rules = [R("user", create=True, parent=R("fixed", value="leafq")), R("fixed", value="leafq")]
    with pytest.raises(PlacementError) as err:
        place(rules, app())
    assert err.value.reason == "parent rule returned a leaf queue: root.leafq"


def test_qualified_parent_result_is_not_prefixed_again():
    rule = R("user", create=True, parent=R("provided"))
    assert place([rule], app(user="u", queue="root.team")) == "root.team.u"


def test_unqualified_parent_result_gets_root_prefix():
    rule = R("user", create=True, parent=R("tag", value="ns", create=True))
    assert place([rule], app(user="u", ns="deep.name")) == "root.deep_dot_name.u"


def test_closed_root_refuses_creation_below_root():
    with pytest.raises(PlacementError, match=NO_RULE_MATCHED):
        place([R("user", create=True)], app(), CLOSED_ROOT)


def test_open_parent_allows_creation_below_it():
    assert place([R("user", create=True, parent=R("fixed", value="open"))], app(), CLOSED_ROOT) == "root.open.alice"


def test_acl_denying_the_ancestor_of_a_new_queue_makes_the_next_rule_run():
    rules = [R("fixed", value="locked.x", create=True), R("user", create=True, parent=R("fixed", value="open"))]
    assert place(rules, app(user="eve"), CLOSED_ROOT) == "root.open.eve"
    assert place(rules, app(user="eve", groups=["admins"]), CLOSED_ROOT) == "root.locked.x"


def test_admin_acl_grants_submit():
    rule = R("fixed", value="admins_only")
    assert place([rule], app(user="x", groups=["admins"]), CLOSED_ROOT) == "root.admins_only"
    with pytest.raises(PlacementError):
        place([rule], app(user="x", groups=["users"]), CLOSED_ROOT)


def test_created_queue_is_found_on_the_next_placement():
    tree = FakeQueueTree.from_yaml(OPEN)
    manager = PlacementManager([R("user", create=True)])
    path = manager.place(app(user="newbie"), tree)
    tree.create(path)
    assert PlacementManager([R("user")]).place(app(user="newbie"), tree) == "root.newbie"


def test_filter_runs_before_the_rule():
    rules = [R("user", create=True, filter=FilterConfig("deny", users=("alice",))), R("fixed", value="leafq")]
    assert place(rules, app(user="alice")) == "root.leafq"
    assert place(rules, app(user="bob")) == "root.bob"


def test_filter_on_a_parent_rule_stops_the_child():
    rule = R("user", create=True, parent=R("fixed", value="team", filter=FilterConfig(users=("carol",))))
    assert place([rule], app(user="carol")) == "root.team.carol"
    with pytest.raises(PlacementError):
        place([rule], app(user="dave"))


def test_rule_names_are_case_insensitive():
    assert place([R("FIXED", value="leafq")], app()) == "root.leafq"


def test_config_rules_round_trip_through_loader():
    config = load_config(OPEN + "    placementrules:\n      - name: Tag\n        value: NameSpace\n        create: true\n")
    rules = config.partition("default").placementrules
    assert place(rules, app(namespace="prod")) == "root.prod"


def test_draining_queue_is_skipped_and_the_next_rule_runs():
    tree = FakeQueueTree.from_yaml(OPEN)
    tree.find("root.leafq").accepts_new_work = False
    tree.find("root.team").accepts_new_work = False
    rules = [R("fixed", value="leafq"), R("user", create=True, parent=R("fixed", value="team")), R("user", create=True)]
    assert PlacementManager(rules).place(app(user="zoe"), tree) == "root.zoe"
