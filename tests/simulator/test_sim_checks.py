"""The RM-side checks of scheduler decisions."""

from __future__ import annotations

import pytest

from simulator.checks import Validator, queue_limits

CONFIG = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: a
            resources: {max: {vcore: 2}}
          - name: b
"""


def validator():
    v = Validator({"n1": {"vcore": 4000, "memory": 100}}, queue_limits(CONFIG))
    for key in ("k1", "k2", "k3"):
        v.ask_added(key)
    return v


def test_queue_limits_are_read_from_the_config_in_milli_vcores():
    assert queue_limits(CONFIG) == {("default", "root.a"): {"vcore": 2000}}


def test_allocations_within_every_limit_raise_nothing():
    v = validator()
    assert v.allocated_to("k1", "n1", ("default", "root.a"), {"vcore": 1000, "memory": 10}, 1.0) == []
    assert v.allocated_to("k2", "n1", ("default", "root.a"), {"vcore": 1000, "memory": 10}, 1.0) == []


@pytest.mark.parametrize("key, node, queue, res, kind", [
    ("zz", "n1", ("default", "root.b"), {"vcore": 1}, "unknown-ask"),
    ("k1", "n9", ("default", "root.b"), {"vcore": 1}, "unknown-node"),
    ("k1", "n1", ("default", "root.b"), {"vcore": 5000}, "node-overcommit"),
    ("k1", "n1", ("default", "root.b"), {"gpu": 1}, "node-overcommit"),
    ("k1", "n1", ("default", "root.a"), {"vcore": 3000}, "queue-max-exceeded"),
], ids=["unknown ask", "unknown node", "node over capacity", "resource the node lacks", "queue over max"])
def test_each_kind_of_bad_allocation_is_a_violation(key, node, queue, res, kind):
    found = validator().allocated_to(key, node, queue, res, 2.0)
    assert [f.kind for f in found] == [kind]
    assert key in found[0].message


def test_a_key_allocated_twice_is_beyond_max_allocations():
    v = validator()
    v.allocated_to("k1", "n1", None, {"vcore": 1}, 1.0)
    found = v.allocated_to("k1", "n1", None, {"vcore": 1}, 2.0)
    assert [f.kind for f in found] == ["beyond-max-allocations"]


def test_a_release_frees_node_and_queue_capacity():
    v = validator()
    v.allocated_to("k1", "n1", ("default", "root.a"), {"vcore": 2000}, 1.0)
    v.released("k1", "n1", ("default", "root.a"), {"vcore": 2000})
    assert v.allocated_to("k2", "n1", ("default", "root.a"), {"vcore": 2000}, 2.0) == []
    assert v.violations == []


LIMITS = """
partitions:
  - name: default
    limits:
      - {limit: everyone, users: ["*"], maxapplications: 3}
    queues:
      - name: root
        queues:
          - name: a
            limits:
              - {limit: alice, users: [alice], maxresources: {vcore: 2}}
              - {limit: others, users: ["*"], maxresources: {vcore: 1}}
              - {limit: science, groups: [science], maxresources: {memory: 100}}
              - {limit: any group, groups: ["*"], maxapplications: 1}
            queues:
              - name: deep
"""


def ugm_validator():
    from simulator.checks import ugm_limits
    v = Validator({"n1": {"vcore": 100_000, "memory": 10_000}}, ugm=ugm_limits(LIMITS))
    for i in range(20):
        v.ask_added(f"k{i}")
    return v


def kinds(found):
    return [f.kind for f in found]


def test_user_limits_named_then_wildcard_at_every_level_and_release_frees():
    from simulator.checks import Owner
    v = ugm_validator()
    deep, alice, bob = ("default", "root.a.deep"), Owner("app1", "alice", ()), Owner("app2", "bob", ())
    assert v.allocated_to("k1", "n1", deep, {"vcore": 1000}, 1.0, alice) == []
    assert v.allocated_to("k2", "n1", deep, {"vcore": 1000}, 1.0, alice) == []
    found = v.allocated_to("k3", "n1", deep, {"vcore": 1000}, 1.0, alice)  # alice's own entry: 2
    assert kinds(found) == ["user-limit-exceeded"]
    assert "user alice over its limit in queue root.a of partition default after k3: vcore 3000 > 2000" \
        in found[0].message
    v.released("k3", "n1", deep, {"vcore": 1000}, alice)
    assert v.allocated_to("k4", "n1", deep, {"vcore": 1000}, 1.0, bob) == []  # bob: the * entry, 1
    assert kinds(v.allocated_to("k5", "n1", deep, {"vcore": 1000}, 1.0, bob)) == ["user-limit-exceeded"]
    assert v.limit_peaks()["default:root.a user alice"] == {"vcore": 3000}


def test_group_is_the_first_named_group_else_the_first_group_under_a_wildcard():
    from simulator.checks import Owner
    v = ugm_validator()
    a = ("default", "root.a")
    sci = Owner("app1", "carol", ("dev", "science"))  # science is named: it is carol's group
    assert v.allocated_to("k1", "n1", a, {"memory": 60}, 1.0, sci) == []
    found = v.allocated_to("k2", "n1", a, {"memory": 60}, 1.0, Owner("app1", "dave", ("science",)))
    assert kinds(found) == ["group-limit-exceeded"] and "group science" in found[0].message
    # dev is not named: under the * group entry (maxapplications 1) dev is the group
    assert v.allocated_to("k3", "n1", a, {"memory": 1}, 1.0, Owner("app3", "erin", ("dev",))) == []
    found = v.allocated_to("k4", "n1", a, {"memory": 1}, 1.0, Owner("app4", "frank", ("dev",)))
    assert kinds(found) == ["group-limit-exceeded"] and "runs 2 apps" in found[0].message
    # no groups: not checked against group limits (the scheduler may look them up)
    assert v.allocated_to("k5", "n1", a, {"memory": 1000}, 1.0, Owner("app5", "gina", ())) == []


def test_partition_limits_hold_at_root_per_user_for_the_wildcard():
    from simulator.checks import Owner
    v = ugm_validator()
    b = ("default", "root.b")
    for i in range(3):
        assert v.allocated_to(f"k{i}", "n1", b, {"vcore": 1}, 1.0, Owner(f"app{i}", "hal", ())) == []
    found = v.allocated_to("k9", "n1", b, {"vcore": 1}, 1.0, Owner("app9", "hal", ()))
    assert kinds(found) == ["user-limit-exceeded"] and "maxapplications 3" in found[0].message
    assert v.allocated_to("k10", "n1", b, {"vcore": 1}, 1.0, Owner("app10", "ivy", ())) == []  # per user
