"""Queue tree: config, ACLs, placement integration, dynamic queues, config update and draining."""

import pytest

from common.config import DEFAULT_CONFIG_TEXT
from partition_worker.core import ObjectState, ReleaseAlloc, RemoveApp
from tests.core.harness import Harness, harness_from_yaml, partition_config, q, res

# YuniKorn's default (the tag rule on namespace, create) with a configured queue below root
TAG_RULE = DEFAULT_CONFIG_TEXT + """\
        queues:
          - name: fixed
            properties:
              application.sort.policy: fair
"""


def test_app_queue_must_name_an_existing_leaf_without_placement_rules(h: Harness) -> None:
    h.app("a1", queue="root.missing").app("a2", queue="default").app("a3", queue="root")
    reasons = h.rejected_app_reasons()
    assert reasons["a1"] == "application 'a1' rejected, cannot create queue 'root.missing' without placement rules"
    assert "a2" not in reasons  # root. prefix is optional
    assert reasons["a3"] == "failed to find queue root for application a3"


def test_submit_acl_is_checked_up_to_root() -> None:
    root = q("root", q("open", submitacl="bob"), q("closed"), submitacl="")
    h = Harness(partition_config(root))
    h.app("a1", queue="root.open", user="bob").app("a2", queue="root.closed", user="bob")
    h.app("a3", queue="root.open", user="eve")
    assert set(h.rejected_app_reasons()) == {"a2", "a3"}
    assert h.rejected_app_reasons()["a2"] == "failed to find queue root.closed for application a2"


def test_admin_acl_also_grants_submit() -> None:
    root = q("root", q("leaf", adminacl=" admins"))
    h = Harness(partition_config(root))
    h.app("a1", queue="root.leaf", user="carol", groups=("admins",))
    assert h.rejected_app_reasons() == {}


def test_empty_user_is_rejected(h: Harness) -> None:
    h.app("a1", user="")
    assert h.rejected_app_reasons()["a1"] == "empty user cannot resolve"


def test_duplicate_app_is_rejected_and_the_first_kept(h: Harness) -> None:
    h.app("a1").app("a1")
    assert h.rejected_app_reasons()["a1"] == \
        "adding application a1 to partition [rm1]default, but application already existed"
    assert h.app_state("a1") == "New"


def test_tag_rule_creates_a_dynamic_leaf_and_it_is_removed_when_empty() -> None:
    h = harness_from_yaml(TAG_RULE)
    h.node("n1").app("a1", tags={"namespace": "team-x"}).ask("k", "a1")
    leaf = h.p.queues.find("root.team-x")
    assert leaf is not None and leaf.dynamic and leaf.is_leaf
    assert h.events("QueueAdded")[-1].object_id == "root.team-x"
    h.step()
    h.do(RemoveApp("a1"))
    h.step()
    assert h.p.queues.find("root.team-x") is None
    assert h.events("QueueRemoved")[-1].object_id == "root.team-x"


def test_placement_without_a_match_rejects_with_the_rule_message() -> None:
    h = harness_from_yaml(TAG_RULE)
    h.app("a1")  # no namespace tag
    assert h.rejected_app_reasons()["a1"] == \
        "failed to place application a1: application rejected: no placement rule matched"


def test_task_group_app_on_a_fair_leaf_is_rejected() -> None:
    h = harness_from_yaml(TAG_RULE)
    h.app("a1", tags={"namespace": "root.fixed"}, placeholder_ask=res(memory=5))
    assert h.rejected_app_reasons()["a1"] == \
        "queue root.fixed cannot run application a1 with task group request: unsupported sort type"


def test_task_group_larger_than_queue_max_is_rejected() -> None:
    root = q("root", q("leaf", max={"memory": 10}), submitacl="*")
    h = Harness(partition_config(root))
    h.app("a1", queue="root.leaf", placeholder_ask=res(memory=50))
    assert h.rejected_app_reasons()["a1"].startswith(
        "queue root.leaf cannot fit application a1: task group request")


def test_properties_are_inherited_except_priority_settings() -> None:
    root = q("root", q("p", q("c"), props={"application.sort.policy": "fair",
                                          "priority.offset": "5", "x": "y"}), submitacl="*")
    h = Harness(partition_config(root))
    child = h.p.queues.find("root.p.c")
    assert child.sort_policy.value == "fair" and child.properties["x"] == "y"
    assert child.priority_offset == 0 and h.p.queues.find("root.p").priority_offset == 5


def test_queue_removed_from_config_drains_and_goes_when_empty() -> None:
    h = Harness(partition_config(q("root", q("a"), q("b"), submitacl="*")))
    h.node("n1").app("a1", queue="root.b").ask("k", "a1")
    h.step()
    h.p.update_config(partition_config(q("root", q("a"), submitacl="*")), h.now)
    h._collect()
    b = h.p.queues.find("root.b")
    assert b.state is ObjectState.DRAINING
    h.ask("k2", "a1")
    h.step()
    assert len(h.allocs_of("k2")) == 1  # existing work continues
    h.app("a2", queue="root.b")
    assert h.rejected_app_reasons()["a2"] == "queue root.b is draining, cannot add application a2"
    h.do(RemoveApp("a1"))
    h.step()
    assert h.p.queues.find("root.b") is None


def test_config_update_changes_max_at_once() -> None:
    h = Harness(partition_config(q("root", q("a", max={"memory": 10}), submitacl="*")))
    h.node("n1").app("a1", queue="root.a").ask("k", "a1", memory=10, repeat=3)
    assert h.step() == 1
    h.p.update_config(partition_config(q("root", q("a", max={"memory": 30}), submitacl="*")), h.now)
    assert h.step() == 2


def test_a_bad_node_sort_policy_in_an_update_keeps_the_old_config(h: Harness) -> None:
    from common.config.errors import ConfigError
    with pytest.raises(ConfigError, match="undefined policy: nope"):
        h.p.update_config(partition_config(policy="nope"), h.now)
    assert h.p.nodes.policy.value == "fair"


def test_queue_tree_find_is_case_insensitive(h: Harness) -> None:
    assert h.p.queues.find("ROOT.Default") is h.p.queues.find("root.default")
    assert h.p.queues.find("root.default").check_submit_access("anyone", ())


def test_release_updates_queue_usage_at_every_level() -> None:
    h = Harness(partition_config(q("root", q("p", q("c")), submitacl="*")))
    h.node("n1").app("a1", queue="root.p.c").ask("k", "a1", memory=7)
    h.step()
    for path in ("root", "root.p", "root.p.c"):
        assert h.p.queues.find(path).allocated == res(memory=7, vcore=1)
    h.do(ReleaseAlloc("a1", h.allocs_of("k")[0].uuid))
    for path in ("root", "root.p", "root.p.c"):
        assert h.p.queues.find(path).allocated.is_zero()


def test_a_bad_acl_in_an_update_is_refused_naming_the_queue_and_changes_nothing(h: Harness) -> None:
    from common.config.errors import ConfigError
    bad = partition_config(q("root", q("default"), q("new", submitacl="a b c"), submitacl="*"))
    with pytest.raises(ConfigError, match="queue root.new: multiple spaces found in ACL"):
        h.p.update_config(bad, h.now)
    assert h.p.queues.find("root.new") is None


def test_an_unknown_command_is_refused_naming_its_type(h: Harness) -> None:
    with pytest.raises(TypeError, match="unknown command str"):
        h.p.handle("add node please", h.now)


@pytest.mark.parametrize("raw, expected", [
    ('{"resources": {"memory": {"value": 20}}}', {"memory": 20}),
    ('{"memory": 20, "vcore": 3}', {"memory": 20, "vcore": 3}),
    ('not json', None),
    ('{"memory": "lots"}', None),
], ids=["si resource", "plain map", "not json", "not a number"])
def test_namespace_quota_tag_sets_the_max_of_a_dynamic_leaf(raw, expected) -> None:
    h = harness_from_yaml(TAG_RULE)
    h.app("a1", tags={"namespace": "ns1", "namespace.resourcequota": raw})
    leaf = h.p.queues.find("root.ns1")
    assert (leaf.max.as_dict() if leaf.max else None) == expected


def test_config_update_can_switch_the_node_sort_policy() -> None:
    h = Harness(partition_config())
    h.node("busy", memory=100, vcore=100).node("empty", memory=100, vcore=100).app("app1")
    h.ask("filler", "app1", memory=50, vcore=50, tags={"yunikorn.apache.org/requiredNode": "busy"})
    h.step()
    h.p.update_config(partition_config(policy="binpacking"), h.now)
    h.ask("k", "app1", memory=10, vcore=10)
    h.step()
    assert h.allocs_of("k")[0].node_id == "busy"


USER_RULE = """
partitions:
  - name: default
    placementrules:
      - name: user
        create: true
        parent:
          name: fixed
          value: {parent}
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: leafy
          - name: closed
            parent: true
            submitacl: ' '
"""


def test_placement_under_a_leaf_is_rejected_with_yunikorn_reason() -> None:
    h = harness_from_yaml(USER_RULE.format(parent="leafy"))
    h.app("a1", user="bob")
    assert h.rejected_app_reasons()["a1"] == \
        "failed to place application a1: parent rule returned a leaf queue: root.leafy"


def test_placement_creates_the_user_queue_under_a_fixed_parent() -> None:
    h = harness_from_yaml(USER_RULE.format(parent="closed"))
    h.app("a1", user="bob")
    assert h.p.apps["a1"].queue.path == "root.closed.bob"


def test_dynamic_parents_and_leaf_get_created_and_inherit(h: Harness) -> None:
    leaf, created = h.p.queues.create_dynamic("root.x.y.z", "alice", ())
    assert created == ["root.x", "root.x.y", "root.x.y.z"]
    assert leaf.is_leaf and leaf.dynamic and not h.p.queues.find("root.x").is_leaf


@pytest.mark.parametrize("path, message", [
    ("root.default.sub", "creation of queue root.default failed parent is already a leaf: root.default.sub"),
    ("root.bad name", "failed to create rule based queue root.bad name: invalid queue name bad name"),
], ids=["parent is a leaf", "invalid name"])
def test_dynamic_queue_creation_errors(h: Harness, path, message) -> None:
    from partition_worker.core.queue import QueueCreateError
    with pytest.raises(QueueCreateError) as exc:
        h.p.queues.create_dynamic(path, "alice", ())
    assert str(exc.value) == message


def test_dynamic_queue_creation_checks_submit_access_on_the_deepest_existing_queue() -> None:
    from partition_worker.core.queue import QueueCreateError
    h = Harness(partition_config(q("root", q("p", parent=True, submitacl="bob"))))
    h.p.queues.create_dynamic("root.p.x", "bob", ())
    with pytest.raises(QueueCreateError, match="submit access to queue root.p denied during create of: root.p.y"):
        h.p.queues.create_dynamic("root.p.y", "eve", ())
