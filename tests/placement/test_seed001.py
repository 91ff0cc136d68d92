"""Seed 001's worked examples give the stated queue or rejection (placement manager level)."""

import pytest
import yaml

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


def test_seed001_complex_1_parent_list_form_equals_mapping_form():
    from tests.placement.seed001_cases import COMPLEX_1

    doc = yaml.safe_load(COMPLEX_1)
    for rule in doc["partitions"][0]["placementrules"]:  # each one-rule parent list as a mapping
        if "parent" in rule:
            [rule["parent"]] = rule["parent"]
    a = load_config(COMPLEX_1).partition("default").placementrules
    b = load_config(yaml.safe_dump(doc)).partition("default").placementrules
    assert a == b
    assert a[0].parent.name == "tag" and a[1].parent.value == "root.namespaces"
