"""The worker builds a partition's session with its shell inputs: the creation time (REST
``lastStateTransitionTime``), the group lookup, the stage timer and the compatibility switch."""

from __future__ import annotations

import time
from types import SimpleNamespace

from partition_worker.main import WorkerLoop
from partition_worker.os_groups import os_lookup
from partition_worker.session import PartitionSession

CONFIG = "partitions:\n  - name: default\n    queues:\n      - name: root\n"


class _Store:
    def load(self, rm_id: str):
        return SimpleNamespace(config=CONFIG, extra_config={"korral.compatibility": "1.8"}, build_info={})


def test_the_session_starts_at_the_worker_clock_with_the_os_group_lookup() -> None:
    loop = WorkerLoop(None, "unused", store=_Store(), name="w1")
    before = time.time_ns()
    session, resolver = loop._load_session("rm1", "default")
    assert isinstance(session, PartitionSession)
    assert resolver == ""  # no usergroupresolver: the worker's own lookup
    assert before <= session.core.state_time_ns <= time.time_ns()
    assert session.core.settings.group_lookup is os_lookup
    assert session.core.settings.stage_timer is not None
    assert session.core.settings.compat.text == "1.8"  # the RM's extraConfig switch
