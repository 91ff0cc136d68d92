"""Resource arithmetic: YuniKorn semantics, int64 saturation, hypothesis properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.resources import (MAX_INT64, MIN_INT64, NegativeResourceError, Resource,
                              compare_shares)

names = st.sampled_from(["memory", "vcore", "gpu", "pods"])
small = st.integers(min_value=-(10**12), max_value=10**12)
resources = st.dictionaries(names, small, max_size=4).map(Resource)
nonneg = st.dictionaries(names, st.integers(0, 10**12), max_size=4).map(Resource)


@given(resources, resources)
def test_add_is_commutative(a, b) -> None:
    assert a + b == b + a


@given(resources, resources, resources)
def test_add_is_associative(a, b, c) -> None:
    assert (a + b) + c == a + (b + c)


@given(resources, resources)
def test_a_minus_b_plus_b_is_a(a, b) -> None:
    assert ((a - b) + b).prune() == a.prune()


@given(nonneg, nonneg)
def test_fits_in_is_consistent_with_subtraction(a, b) -> None:
    diff = b - a
    assert a.fits_in(b) == all(diff[k] >= 0 for k in a)


@given(nonneg, nonneg, nonneg)
def test_fits_in_is_monotone_in_the_larger_side(a, b, extra) -> None:
    if a.fits_in(b):
        assert a.fits_in(b + extra)


@given(nonneg, nonneg)
def test_fits_in_max_undef_is_weaker_than_fits_in(a, b) -> None:
    if a.fits_in(b):
        assert a.fits_in_max_undef(b)


@given(st.integers(MIN_INT64, MAX_INT64), st.integers(MIN_INT64, MAX_INT64))
def test_arithmetic_saturates_instead_of_wrapping(x, y) -> None:
    s = Resource({"m": x}) + Resource({"m": y})
    assert s["m"] == max(MIN_INT64, min(MAX_INT64, x + y))
    d = Resource({"m": x}) - Resource({"m": y})
    assert d["m"] == max(MIN_INT64, min(MAX_INT64, x - y))


def test_missing_names_count_as_zero() -> None:
    assert Resource.of(memory=5)["vcore"] == 0
    assert not Resource.of(vcore=1).fits_in(Resource.of(memory=5))
    assert Resource.of(vcore=1).fits_in_max_undef(Resource.of(memory=5))


def test_sub_checked_names_the_objects_involved() -> None:
    with pytest.raises(NegativeResourceError, match="node n1 allocated.*memory"):
        Resource.of(memory=5).sub_checked(Resource.of(memory=6), "node n1 allocated")


@pytest.mark.parametrize("a, b, expected", [
    ({"m": 2, "v": 2}, {"m": 1, "v": 2}, True),
    ({"m": 1, "v": 2}, {"m": 1, "v": 2}, False),
    ({"m": 3}, {"m": 1, "v": 2}, False),
    ({"m": 1, "v": 3}, {"m": 1}, True),
], ids=["bigger in one", "equal", "smaller in one", "extra type"])
def test_strictly_greater_than(a, b, expected) -> None:
    assert Resource(a).strictly_greater_than(Resource(b)) is expected


@pytest.mark.parametrize("values, expected", [
    ({}, False), ({"m": 0}, False), ({"m": 1}, True), ({"m": 1, "v": -1}, False),
], ids=["empty", "zero", "positive", "one negative"])
def test_strictly_greater_than_zero(values, expected) -> None:
    assert Resource(values).strictly_greater_than_zero() is expected


def test_component_wise_min_max_and_permissive_min() -> None:
    a, b = Resource.of(m=1, v=5), Resource.of(m=3)
    assert a.component_wise_min(b) == Resource.of(m=1, v=0)
    assert a.component_wise_max(b) == Resource.of(m=3, v=5)
    assert a.component_wise_min_permissive(b) == Resource.of(m=1, v=5)


def test_shares_and_compare_shares() -> None:
    assert Resource.of(m=5, v=1).shares(Resource.of(m=10, v=10)) == [0.1, 0.5]
    assert Resource.of(m=5).shares(None) == [5.0]
    assert compare_shares([0.1, 0.5], [0.5]) == 1
    assert compare_shares([0.5], [0.1, 0.5]) == -1
    assert compare_shares([0.2], [0.2]) == 0


def test_multiply_and_fit_in_score() -> None:
    assert Resource.of(m=3) * 4 == Resource.of(m=12)
    assert Resource.of(m=5).fit_in_score(Resource.of(m=10)) == 0.5


def test_bad_values_are_rejected_naming_the_resource() -> None:
    with pytest.raises(ValueError, match="memory"):
        Resource({"memory": 1.5})
    with pytest.raises(ValueError, match="non-empty"):
        Resource({"": 1})
