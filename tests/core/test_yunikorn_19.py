"""Today's YuniKorn (1.9) on the pure core and a worker's session: the compatibility switch
chosen by the RM (its extraConfig, its build, its SI revision) and what follows from it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common import si_internal_pb2 as si
from common.compat import NEWEST, Compat
from common.config.errors import ConfigError
from common.config.model import PreemptionConfig
from common.si_revision import Revision
from partition_worker.core.settings import CoreSettings
from tests.core.harness import SECOND, START, Harness, partition_config, q
from tests.si_builders import internal
from tests.si_session import SISession

TODAY = Compat(NEWEST)
KEY = "korral.compatibility"


def _session(extra=None, build=None, root=None, preemption: bool | None = None) -> SISession:
    cfg = partition_config(root or q("root", q("a"), submitacl="*"))
    if preemption is not None:
        cfg = replace(cfg, preemption=PreemptionConfig(enabled=preemption))
    s = SISession("rm1", "default", cfg)
    s.follow_rm(extra, build)
    return s


# ------------------------------------------------------------------------------ the switch, per RM
def test_an_undecided_rm_has_the_seeds_switch_until_its_revision_says_v1_8():
    s = _session()
    assert s.compatibility.source == "default" and s.core.settings.compat.text == "1.2"
    assert not s.core.preemption_enabled  # preemption.enabled unset: off, as v1.2
    s.set_revision(Revision.V18)
    assert s.compatibility.as_dict() == {"version": "1.9", "source": "SI revision", "detail": "v1.8"}
    assert s.core.settings.compat == TODAY
    assert s.core.preemption_enabled  # unset means on since YuniKorn 1.4


def test_a_seed_rm_keeps_the_seeds_switch():
    s = _session()
    s.set_revision(Revision.SEED)
    assert s.compatibility.describe() == "1.2 (SI revision: seed)"
    assert not s.core.preemption_enabled


def test_a_build_of_today_chooses_the_newest_release_at_once_and_an_explicit_value_beats_everything():
    assert _session(build={"buildVersion": "1.7.0"}).core.settings.compat == TODAY
    s = _session(extra={KEY: "1.2"}, build={"buildVersion": "1.9.0"})
    s.set_revision(Revision.V18)
    assert s.core.settings.compat.text == "1.2" and s.compatibility.source == "explicit"


@pytest.mark.parametrize("configured, compat, on", [(None, "1.2", False), (None, "1.4", True), (None, "1.9", True),
                                                    (False, "1.9", False), (True, "1.2", True)])
def test_preemption_enabled_unset_follows_the_switch_and_a_configured_value_stays(configured, compat, on):
    s = _session(extra={KEY: compat}, preemption=configured)
    assert s.core.preemption_enabled is on


def test_an_unknown_switch_value_is_refused_naming_the_rm_and_a_config_update_keeps_the_old_one():
    with pytest.raises(ConfigError, match=r"RM rm1: extraConfig korral.compatibility: unknown value '2.0'"):
        _session(extra={KEY: "2.0"})
    s = _session(extra={KEY: "1.8"})
    with pytest.raises(ConfigError, match=r"RM rm1: extraConfig korral.compatibility: unknown value '1.11'"):
        s.update_config(s.core.config, START, {KEY: "1.11"})
    assert s.core.settings.compat.text == "1.8" and s.compatibility.source == "explicit"
    s.update_config(s.core.config, START, {})  # the key removed: chosen by the RM again
    assert s.compatibility.source == "default"
    s.set_revision(Revision.V18)
    assert s.core.settings.compat == TODAY


def test_a_v1_8_rm_never_sees_starting():
    s = _session()
    s.set_revision(Revision.V18)
    s.apply_node_request(si.NodeRequest(nodes=[internal.node("n1", memory=100, vcore=None)]), START)
    s.apply_application_request(si.ApplicationRequest(new=[internal.app("app1", "root.a", tags={})]), START)
    s.apply_allocation_request(si.AllocationRequest(allocations=[
        internal.allocation("k1", "", "app1", uuid="", memory=10, vcore=None)]), START)
    states = []
    for i in range(3):
        out = s.step(START + i * SECOND)
        if out.application is not None:
            states += [u.state for u in out.application.updated]
    assert "Running" in states and "Starting" not in states


# ------------------------------------------------------------------------------ the core follows at once
def test_the_core_follows_a_new_switch_at_once():
    h = Harness(config=partition_config(q("root", q("a", props={"application.sort.policy": "stateaware"}),
                                          submitacl="*")), settings=CoreSettings())
    assert not h.p.preemption_enabled and not h.p.queues.stateaware_fifo
    h.p.set_compat(TODAY)
    assert h.p.preemption_enabled and h.p.queues.stateaware_fifo and h.p.changed
