"""The RM's extraConfig keys Korral reads (``common.config.extra``)."""

from __future__ import annotations

import pytest

from common.config.extra import StreamLimits, check_extra_config, stream_limits


@pytest.mark.parametrize("extra,errors", [
    ({}, []),
    ({"event.maxStreams": "0", "event.maxStreamsPerHost": " 7 ", "log.level": "debug"}, []),
    ({"event.maxStreams": "lots"}, ["extraConfig event.maxStreams: 'lots' is not a non-negative integer"]),
    ({"event.maxStreamsPerHost": "-1", "event.maxStreams": "1.5"},
     ["extraConfig event.maxStreams: '1.5' is not a non-negative integer",
      "extraConfig event.maxStreamsPerHost: '-1' is not a non-negative integer"]),
    ({"korral.compatibility": "1.10"}, []),  # read as 1.9, with a warning (common.compat)
    ({"korral.compatibility": "2.0", "event.maxStreams": "x"},
     ["extraConfig event.maxStreams: 'x' is not a non-negative integer",
      "extraConfig korral.compatibility: unknown value '2.0', use one of 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9 "
      "(a released YuniKorn version; absent: chosen by the RM's build and SI revision)"]),
], ids=["none", "good ones and an unknown key", "not a number", "negative and a fraction", "a known compatibility",
        "every bad key at once, the compatibility switch too"])
def test_each_unusable_value_is_named_with_its_key(extra: dict, errors: list[str]) -> None:
    assert check_extra_config(extra) == errors


def test_stream_limits_default_to_yunikorns_and_the_strictest_rm_wins() -> None:
    assert stream_limits([]) == StreamLimits(100, 15)
    assert stream_limits([{"event.maxStreams": "50"}, {"event.maxStreams": "20", "event.maxStreamsPerHost": "30"},
                          {"event.maxStreamsPerHost": "bad"}]) == StreamLimits(20, 30)
