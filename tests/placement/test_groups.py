"""Group resolution: given groups win, otherwise a cached pluggable lookup; unknown user -> (user,)."""

from partition_worker.placement import GroupResolver, no_lookup

S = 1_000_000_000


class CountingLookup:
    def __init__(self, table):
        self.table = table
        self.calls = 0

    def __call__(self, user):
        self.calls += 1
        return self.table.get(user)


def test_given_groups_are_used_as_is_without_lookup():
    lookup = CountingLookup({})
    assert GroupResolver(lookup).resolve("u", ["b", "a"], 0) == ("b", "a")
    assert lookup.calls == 0


def test_lookup_result_cached_for_positive_ttl():
    lookup = CountingLookup({"alice": ("staff", "dev")})
    r = GroupResolver(lookup, positive_ttl_s=300, negative_ttl_s=30)
    assert r.resolve("alice", [], 0) == ("staff", "dev")
    assert r.resolve("alice", [], 299 * S) == ("staff", "dev")
    assert lookup.calls == 1
    lookup.table["alice"] = ("ops",)
    assert r.resolve("alice", [], 301 * S) == ("ops",)
    assert lookup.calls == 2


def test_unknown_user_resolves_to_itself_and_is_cached_for_negative_ttl():
    lookup = CountingLookup({})
    r = GroupResolver(lookup, positive_ttl_s=300, negative_ttl_s=30)
    assert r.resolve("ghost", (), 0) == ("ghost",)
    assert r.resolve("ghost", (), 29 * S) == ("ghost",)
    assert lookup.calls == 1
    lookup.table["ghost"] = ("g",)
    assert r.resolve("ghost", (), 31 * S) == ("g",)


def test_cache_is_bounded():
    lookup = CountingLookup({})
    r = GroupResolver(lookup, max_entries=2)
    for user in ("a", "b", "c"):
        r.resolve(user, (), 0)
    r.resolve("a", (), 1)
    assert lookup.calls == 4  # "a" was evicted


def test_no_lookup_is_yunikorns_default():
    assert GroupResolver(no_lookup).resolve("u", (), 0) == ("u",)
