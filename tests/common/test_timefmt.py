"""Durations and times in Go's text, as YuniKorn's REST answers show them."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.timefmt import go_duration, rfc3339_nano

S = 1_000_000_000


@pytest.mark.parametrize("ns,text", [
    (0, "0s"), (1, "1ns"), (1_500, "1.5µs"), (2_500_000, "2.5ms"), (500_000_000, "500ms"), (30 * S, "30s"),
    (90 * S, "1m30s"), (120 * S, "2m0s"), (3600 * S, "1h0m0s"), (1_500_000_000, "1.5s"),
    (3723 * S + 1, "1h2m3.000000001s"), (-30 * S, "-30s"),
], ids=lambda v: str(v))
def test_durations_read_as_go_writes_them(ns: int, text: str) -> None:
    assert go_duration(ns) == text


@pytest.mark.parametrize("ns,text", [
    (0, "1970-01-01T00:00:00Z"), (951_782_400 * S, "2000-02-29T00:00:00Z"),
    (1_777_630_272_123_456_789, "2026-05-01T10:11:12.123456789Z"),
    (1_777_630_272_500_000_000, "2026-05-01T10:11:12.5Z"),
])
def test_times_are_rfc3339_with_trailing_zeros_of_the_nanoseconds_dropped(ns: int, text: str) -> None:
    assert rfc3339_nano(ns) == text


@given(st.integers(min_value=0, max_value=253_402_300_799 * S))
def test_the_calendar_agrees_with_datetime(ns: int) -> None:
    expected = datetime.datetime.fromtimestamp(ns // S, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    assert rfc3339_nano(ns).startswith(expected)
