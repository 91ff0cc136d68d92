"""Rule filters: allow/deny, user then groups one at a time, lists vs one regexp (seed 001)."""

import pytest

from common.config import ConfigError
from common.config.model import FilterConfig as F
from partition_worker.placement import Filter

CASES = [
    # id, filter config, user, groups, allowed
    ("no filter allows all", F(), "anyone", (), True),
    ("deny type with no lists denies all", F("deny"), "anyone", (), False),
    ("allow listed user", F(users=("alice", "bob")), "bob", (), True),
    ("allow filter stops unlisted user", F(users=("alice", "bob")), "carol", (), False),
    ("deny listed user", F("deny", users=("alice",)), "alice", (), False),
    ("deny filter lets unlisted user through", F("deny", users=("alice",)), "bob", (), True),
    ("type is case-insensitive", F("DENY", users=("alice",)), "alice", (), False),
    ("user match is case-sensitive", F(users=("alice",)), "Alice", (), False),
    ("single entry regexp user", F(users=("^dev_.*",)), "dev_x", (), True),
    ("regexp is searched, not anchored", F(users=("ev",)), "dev", (), False),
    ("regexp with special char is searched", F(users=("ev.*",)), "dev", (), True),
    ("group list matches one group", F(groups=("g1", "g2")), "u", ("x", "g2"), True),
    ("group regexp matched one group at a time", F(groups=("^dev$",)), "u", ("devops", "dev"), True),
    ("group regexp never sees the joined list", F(groups=("^a,b$",)), "u", ("a", "b"), False),
    ("seed group dev* matches dev_app", F(groups=("dev*",)), "sarah", ("sarah", "test_app", "dev_app"), True),
    ("seed group dev* does not match bob", F(groups=("dev*",)), "bob", ("bob",), False),
    ("user checked before groups", F("deny", users=("alice",), groups=("admins",)), "bob", ("admins",), False),
    ("duplicates in a list are ignored", F(users=("alice", "alice")), "alice", (), True),
    ("invalid entries in a list are dropped", F(users=("alice", "b*b")), "b*b", (), False),
    ("ignored regexp leaves an allow filter matching nobody", F(users=("[oops",)), "anyone", (), False),
    ("ignored regexp leaves a deny filter stopping nobody", F("deny", users=("[oops",)), "anyone", (), True),
    ("invalid single name is ignored too", F(users=("1abc",)), "1abc", (), False),
    ("dollar makes a single entry a regexp", F(users=("host$",)), "myhost", (), True),
    ("name valid only as a user is a regexp for groups when special", F(groups=("^ops$",)), "u", ("ops",), True),
    ("single valid name is exact, not a regexp", F(users=("bob",)), "bobby", (), False),
]


@pytest.mark.parametrize("config,user,groups,allowed", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_filter(config, user, groups, allowed):
    assert Filter.from_config(config).allows(user, groups) is allowed


def test_unknown_filter_type_is_a_config_error():
    with pytest.raises(ConfigError, match="invalid rule filter type maybe"):
        Filter.from_config(F("maybe"))
