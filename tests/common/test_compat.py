"""The compatibility switch (``common.compat``): the values it takes and how an RM's is chosen."""

from __future__ import annotations

import pytest

from common.compat import NEWEST, SEEDS, Compat, choose, declared_release, parse_compat
from common.si_revision import Revision

KEY = "korral.compatibility"


@pytest.mark.parametrize("raw, want", [("1.2", (1, 2)), (" 1.8 ", (1, 8)), ("1.4", (1, 4)), ("1.9", (1, 9))])
def test_the_switch_reads_released_yunikorn_versions(raw, want):
    assert parse_compat({KEY: raw}) == Compat(want)


@pytest.mark.parametrize("extra", [None, {}, {KEY: ""}, {KEY: "  "}])
def test_no_value_is_no_explicit_switch(extra):
    assert parse_compat(extra) is None


@pytest.mark.parametrize("raw", ["1.11", "2.0", "latest", "1.1", "1.9.0", "v1.9"])
def test_an_unknown_value_names_the_key_and_the_values(raw):
    with pytest.raises(ValueError, match=r"extraConfig korral.compatibility: unknown value .*, use one of "
                                         r"1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9 \(a released YuniKorn version"):
        parse_compat({KEY: raw})
    with pytest.raises(ValueError, match="unknown value"):
        choose({KEY: raw}, {"buildVersion": "1.9.0"}, Revision.V18)  # nothing else hides it


def test_1_10_which_older_docs_offered_is_read_as_1_9_with_a_warning():
    choice = choose({KEY: "1.10"}, {}, Revision.SEED)
    assert choice.compat == Compat((1, 9)) and choice.source == "explicit"
    assert choice.detail == "extraConfig korral.compatibility=1.10"
    assert choice.warnings == ("extraConfig korral.compatibility: '1.10' is read as 1.9: YuniKorn 1.10 is not "
                               "released; older Korral docs used '1.10' for a master commit whose behaviour Korral "
                               "has under 1.9",)


@pytest.mark.parametrize("extra, build, revision, version, source, detail", [
    # explicit wins over everything
    ({KEY: "1.6"}, {"buildVersion": "1.9.0"}, Revision.V18, (1, 6), "explicit", "extraConfig korral.compatibility=1.6"),
    ({KEY: "1.2"}, {}, Revision.V18, (1, 2), "explicit", "extraConfig korral.compatibility=1.2"),
    # a build of today's YuniKorn: the newest release, whatever SI it speaks
    ({}, {"buildVersion": "1.9.0"}, Revision.SEED, NEWEST, "buildInfo", "buildInfo buildVersion=1.9.0"),
    ({}, {"buildVersion": "v1.6.3"}, None, NEWEST, "buildInfo", "buildInfo buildVersion=v1.6.3"),
    ({}, {"buildVersion": "1.12.0-rc1"}, None, NEWEST, "buildInfo", "buildInfo buildVersion=1.12.0-rc1"),
    # an older build or none that reads as a release: the SI revision decides
    ({}, {"buildVersion": "1.5.2"}, Revision.SEED, (1, 2), "SI revision", "seed"),
    ({}, {"buildVersion": "latest"}, Revision.V18, NEWEST, "SI revision", "v1.8"),
    ({}, {}, Revision.V18, NEWEST, "SI revision", "v1.8"),
    ({}, {"si.revision": "v1.8"}, None, NEWEST, "SI revision", "v1.8"),  # declared at registration
    ({}, {}, Revision.SEED, (1, 2), "SI revision", "seed"),
    ({}, {"si.revision": "seed"}, None, (1, 2), "SI revision", "seed"),
    # nothing decided yet: the seeds'
    ({}, {}, None, (1, 2), "default", None),
    (None, None, None, (1, 2), "default", None),
], ids=["explicit over all", "explicit 1.2 for a v1.8 RM", "build 1.9 of a seed RM", "build v1.6.3", "future build",
        "build 1.5 seed", "dev build v1.8", "v1.8", "v1.8 declared", "seed", "seed declared", "undecided", "nothing"])
def test_the_switch_follows_the_rm(extra, build, revision, version, source, detail):
    choice = choose(extra, build, revision)
    assert (choice.compat.version, choice.source) == (version, source)
    if detail is not None:
        assert choice.detail == detail
    assert choice.as_dict() == {"version": f"{version[0]}.{version[1]}", "source": source, "detail": choice.detail}
    assert choice.describe() == f"{version[0]}.{version[1]} ({source}: {choice.detail})"


@pytest.mark.parametrize("text, release", [("1.9.0", (1, 9)), ("v1.8.1", (1, 8)), (" 1.6 ", (1, 6)),
                                           ("latest", None), ("", None), ("1", None), ("x1.9", None)])
def test_a_declared_release_is_read_from_build_version(text, release):
    assert declared_release({"buildVersion": text}) == release


def test_what_each_version_turns_on():
    seeds, v14, v16, v18 = SEEDS, Compat((1, 4)), Compat((1, 6)), Compat((1, 8))
    assert not seeds.preemption_on_by_default and not seeds.recovery_rule and not seeds.no_starting_state
    assert v14.preemption_on_by_default and v14.recovery_rule and not v14.placement_fallback
    assert v16.no_starting_state and v16.placement_fallback and not v16.preemption_per_resource_type
    assert v18.preemption_per_resource_type
