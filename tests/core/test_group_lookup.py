"""Groups of a user whose application names none come from the injected lookup (the worker shell's OS lookup)."""

from __future__ import annotations

from common import si_pb2
from common.config import load_config
from partition_worker.core.settings import CoreSettings
from partition_worker.session import PartitionSession
from tests.si_builders import app

CONFIG = """
partitions:
  - name: default
    placementrules: [{name: provided, create: true}]
    queues: [{name: root, submitacl: ' devs'}]
"""


def _add(session: PartitionSession) -> si_pb2.ApplicationResponse:
    session.apply_application_request(si_pb2.ApplicationRequest(new=[app("app-1", "root.team", user="alice")]), 1)
    return session.step(2).application


def test_groups_from_the_lookup_grant_submit_access():
    looked_up = []

    def lookup(user: str):
        looked_up.append(user)
        return ("devs",)

    config = load_config(CONFIG).partitions[0]
    resp = _add(PartitionSession("rm", "default", config, CoreSettings(group_lookup=lookup)))
    assert [a.applicationID for a in resp.accepted] == ["app-1"] and looked_up == ["alice"]


def test_without_a_lookup_the_user_is_its_only_group_as_in_yunikorn():
    resp = _add(PartitionSession("rm", "default", load_config(CONFIG).partitions[0]))
    assert [r.applicationID for r in resp.rejected] == ["app-1"]
