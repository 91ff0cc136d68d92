"""ACL parsing and matching, YuniKorn v1.2 semantics (YUNIKORN_BEHAVIOUR.md 1.5)."""

import pytest

from common.acl import ACL

PARSE_CASES = [
    # id, text, allow_all, users, groups
    ("empty denies all", "", False, set(), set()),
    ("single space denies all", " ", False, set(), set()),
    ("star allows all", "*", True, set(), set()),
    ("star with surrounding spaces allows all", "  * ", True, set(), set()),
    ("user list", "user1,user2", False, {"user1", "user2"}, set()),
    ("users and groups", "user1,user2 group1,group2", False, {"user1", "user2"}, {"group1", "group2"}),
    ("leading space means groups only", " group1", False, set(), {"group1"}),
    ("user list exactly star", "* group1", True, set(), {"group1"}),
    ("group list exactly star", "user1 *", True, {"user1"}, set()),
    ("star inside a list is dropped", "user1,* group1", False, {"user1"}, {"group1"}),
    ("duplicates collapse", "a,a,b b,b", False, {"a", "b"}, {"b"}),
    ("empty entries skipped", ",a,,b,", False, {"a", "b"}, set()),
    ("invalid user dropped", "1bad,good", False, {"good"}, set()),
    ("user may end with dollar", "machine$", False, {"machine$"}, set()),
    ("user may contain dot and at", "first.last@corp", False, {"first.last@corp"}, set()),
    ("group may not contain dot", " grp.x,grp_y", False, set(), {"grp_y"}),
    ("trailing space gives empty group list", "user1 ", False, {"user1"}, set()),
]


@pytest.mark.parametrize("text,allow_all,users,groups", [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES])
def test_parse(text, allow_all, users, groups):
    acl = ACL.parse(text)
    assert acl.allow_all is allow_all
    assert set(acl.users) == users
    assert set(acl.groups) == groups


@pytest.mark.parametrize("text", ["a b c", "a  b", "  a", "user1 group1 "])
def test_more_than_two_fields_is_an_error_naming_the_acl(text):
    with pytest.raises(ValueError) as err:
        ACL.parse(text)
    assert str(err.value) == f"multiple spaces found in ACL: '{text}'"


def test_non_string_is_an_error():
    with pytest.raises(ValueError, match="ACL must be a string"):
        ACL.parse(42)  # type: ignore[arg-type]


def test_invalid_names_are_reported_as_dropped():
    assert ACL.parse("1bad,ok g.x").dropped == ("1bad", "g.x")


MATCH_CASES = [
    # id, acl, user, groups, expected
    ("empty denies", "", "alice", ["dev"], False),
    ("star allows anyone", "*", "anyone", [], True),
    ("listed user allowed", "alice,bob", "bob", [], True),
    ("unlisted user denied", "alice,bob", "carol", ["alice"], False),
    ("group grants", "alice dev,ops", "carol", ["x", "ops"], True),
    ("group only acl grants by group", " dev", "carol", ["dev"], True),
    ("group only acl does not grant by user", " dev", "dev", [], False),
    ("matching is case-sensitive for users", "Alice", "alice", [], False),
    ("matching is case-sensitive for groups", " Dev", "x", ["dev"], False),
    ("group wildcard grants", "alice *", "zed", [], True),
    ("none matching", "alice dev", "bob", ["ops"], False),
]


@pytest.mark.parametrize("text,user,groups,expected", [c[1:] for c in MATCH_CASES], ids=[c[0] for c in MATCH_CASES])
def test_allows(text, user, groups, expected):
    assert ACL.parse(text).allows(user, groups) is expected


def test_default_acl_denies_all():
    assert ACL().denies_all
    assert not ACL().allows("root", ["root"])


from hypothesis import given
from hypothesis import strategies as st

NAMES = st.from_regex(r"[_a-zA-Z][a-zA-Z0-9_-]{0,8}", fullmatch=True)


@given(st.lists(NAMES, max_size=5), st.lists(NAMES, max_size=5), NAMES, st.lists(NAMES, max_size=3))
def test_listed_users_and_groups_are_allowed_others_not(users, groups, user, user_groups):
    acl = ACL.parse(",".join(users) + " " + ",".join(groups))
    expected = user in users or any(g in groups for g in user_groups)
    assert acl.allows(user, user_groups) is expected


@given(st.text(max_size=30))
def test_parse_either_succeeds_or_names_the_acl(text):
    try:
        acl = ACL.parse(text)
    except ValueError as exc:
        assert f"'{text}'" in str(exc)
    else:
        assert acl.text == text
