"""The RM-side checks of scheduler decisions."""

from __future__ import annotations

import pytest

from rmproxy.sim.checks import Validator, queue_limits

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
