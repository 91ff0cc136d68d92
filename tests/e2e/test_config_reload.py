"""Configuration through the SI: update in place, add and remove partitions, reject an invalid config whole."""

from __future__ import annotations

import grpc
import pytest
import yaml

from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node


def config(a_max: int, other: str, *more_partitions: dict) -> str:
    """Partition default with an open root over queue a (max memory ``a_max``) and queue
    ``other``, then ``more_partitions``."""
    default = {"name": "default", "queues": [{"name": "root", "submitacl": "*", "queues": [
        {"name": "a", "resources": {"max": {"memory": a_max}}}, {"name": other}]}]}
    return yaml.safe_dump({"partitions": [default, *more_partitions]}, sort_keys=False)


ONE = config(100, "b")
GPU = {"name": "gpu", "queues": [{"name": "root", "submitacl": "*", "queues": [{"name": "x"}]}]}
LOWER_MAX_ADD_QUEUE_AND_PARTITION = config(30, "c", GPU)


@pytest.mark.parametrize("stack_options", [{"workers": 3}])
def test_hot_reload_lowers_max_adds_queue_and_partition(stack):
    rm = SIRM(stack.si_address, "rm-reload")
    try:
        rm.start(node("n1", memory=1000, vcore=100), config=ONE)
        rm.apps(app("app-a", queue="root.a"))
        rm.wait_accepted("application", {"app-a"})
        rm.asks(*[ask(f"k{i}", "app-a", memory=10) for i in range(3)])
        rm.wait_allocated({"k0", "k1", "k2"})

        rm.update_config(LOWER_MAX_ADD_QUEUE_AND_PARTITION)
        # root.a now has max 30 and holds 30: the next ask stays pending
        rm.asks(ask("over", "app-a", memory=10))
        with pytest.raises(TimeoutError):
            rm.wait_for("allocation", lambda r: r.new, timeout=2)
        # the new queue takes apps; the new partition takes nodes and apps
        rm.apps(app("app-c", queue="root.c"), app("app-x", queue="root.x", partition="gpu"))
        rm.wait_accepted("application", {"app-c", "app-x"})
        rm.nodes(node("g1", partition="gpu", memory=100, vcore=10))
        assert [n.nodeID for n in rm.wait_for("node", lambda r: r.accepted or r.rejected).accepted] == ["g1"]
        rm.asks(ask("gx", "app-x", partition="gpu", memory=5))
        assert rm.wait_for("allocation", lambda r: r.new).new[0].nodeID == "g1"

        # removing the gpu partition fails its app and frees its worker
        rm.update_config(ONE)
        failed = rm.wait_for("application", lambda r: any(u.applicationID == "app-x" and u.state == "Failing"
                                                          for u in r.updated), timeout=10)
        assert failed
        rm.asks(ask("gone", "app-x", partition="gpu", memory=5))
        rejected = rm.wait_for("allocation", lambda r: r.rejected)
        assert "Failed to find partition gpu" in rejected.rejected[0].reason
    finally:
        rm.close()


def test_invalid_config_update_is_rejected_whole_and_the_old_stays(stack):
    rm = SIRM(stack.si_address, "rm-badupdate")
    try:
        rm.register(ONE)
        rm.open()
        with pytest.raises(grpc.RpcError) as info:
            rm.update_config(config(-1, "b"))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "update of configuration failed" in info.value.details()
        rm.nodes(node("n1", memory=1000, vcore=100))
        rm.wait_for("node", lambda r: r.accepted)
        rm.apps(app("app-b", queue="root.b"))  # root.b still exists
        assert rm.wait_for("application", lambda r: r.accepted or r.rejected).accepted
    finally:
        rm.close()


def test_update_for_an_unregistered_rm_is_refused(stack):
    with SIRM(stack.si_address, "nobody") as rm, pytest.raises(grpc.RpcError) as info:
        rm.update_config(ONE)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "RM nobody has no active partitions" in info.value.details()
