"""Reconnect backoff: capped, jittered, reproducible from its seed."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from si_client import Backoff


@given(attempt=st.integers(min_value=0, max_value=10_000), seed=st.integers())
def test_every_delay_stays_within_zero_and_the_cap(attempt, seed):
    b = Backoff(base=0.05, cap=2.0, rng=random.Random(seed))
    assert 0.0 <= b.delay(attempt) <= 2.0


def test_the_first_retry_waits_between_half_and_one_base():
    b = Backoff(base=0.1, cap=1.0, rng=random.Random(3))
    assert all(0.05 <= b.delay(0) <= 0.1 for _ in range(100))


def test_the_ceiling_doubles_per_attempt_until_the_cap():
    b = Backoff(base=0.1, cap=1.0, rng=random.Random(3))
    assert max(b.delay(2) for _ in range(500)) <= 0.4
    assert max(b.delay(20) for _ in range(500)) > 0.8


def test_the_same_seed_gives_the_same_delays():
    one, two = Backoff(rng=random.Random(9)), Backoff(rng=random.Random(9))
    assert [one.delay(i) for i in range(10)] == [two.delay(i) for i in range(10)]


@pytest.mark.parametrize("base, cap", [(0, 1), (-1, 1), (2, 1)], ids=["zero base", "negative base", "cap below base"])
def test_nonsense_settings_are_refused(base, cap):
    with pytest.raises(ValueError, match="backoff"):
        Backoff(base=base, cap=cap)
