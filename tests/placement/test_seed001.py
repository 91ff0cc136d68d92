"""Seed 001's worked examples give the stated queue or rejection (placement manager level)."""

import pytest

from common.config import load_config
from partition_worker.placement import AppPlacementInfo, PlacementError, PlacementManager
from tests.placement.fake_queues import FakeQueueTree
from tests.placement.seed001_cases import SEED001_CASES


@pytest.mark.parametrize("case", SEED001_CASES, ids=[c.id for c in SEED001_CASES])
def test_seed001_example(case):
    partition = load_config(case.config).partition("default")
    manager = PlacementManager(partition.placementrules)
    queues = FakeQueueTree(partition)
    app = AppPlacementInfo("app-1", case.queue, case.user, case.groups, case.tags)
    if case.expected is None:
        with pytest.raises(PlacementError) as err:
            manager.place(app, queues)
        assert err.value.reason == case.reason
    else:
        assert manager.place(app, queues) == case.expected


MAPPING_FORM_RULES = """
    placementrules:
      - name: user
        create: true
        filter:
          type: allow
          groups:
            - dev*
        parent:
          name: tag
          value: namespace
      - name: tag
        value: namespace
        create: true
        parent:
          name: fixed
          value: root.namespaces
          filter:
            type: allow
            users:
              - john
      - name: fixed
        value: root.default
"""


def test_seed001_complex_1_parent_list_form_equals_mapping_form():
    from tests.placement.seed001_cases import COMPLEX_1

    head = COMPLEX_1[: COMPLEX_1.index("    placementrules:")]
    a = load_config(COMPLEX_1).partition("default").placementrules
    b = load_config(head + MAPPING_FORM_RULES.lstrip("\n")).partition("default").placementrules
    assert a == b
    assert a[0].parent.name == "tag" and a[1].parent.value == "root.namespaces"
