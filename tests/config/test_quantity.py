"""Resource quantities: YuniKorn's syntax, suffixes, vcore milli-cores, errors."""

import pytest

from common.config.quantity import INT64_MAX, QuantityError, format_resources, parse_quantity

GOOD = [
    ("plain memory", "memory", "1024", 1024),
    ("int value", "memory", 1024, 1024),
    ("spaces trimmed", "memory", " 10 ", 10),
    ("space before suffix", "memory", "1 Gi", 2**30),
    ("decimal k", "memory", "2k", 2000),
    ("decimal M", "memory", "100M", 100_000_000),
    ("decimal G", "memory", "1G", 10**9),
    ("decimal E", "memory", "1E", 10**18),
    ("binary Ki", "memory", "1Ki", 1024),
    ("binary Gi", "memory", "1Gi", 2**30),
    ("binary Ei", "memory", "7Ei", 7 * 2**60),
    ("vcore plain is cores", "vcore", "2", 2000),
    ("vcore milli", "vcore", "500m", 500),
    ("vcore with k suffix", "vcore", "1k", 1_000_000),
    ("other resource plain", "nvidia.com/gpu", "4", 4),
    ("zero", "memory", "0", 0),
    ("int64 max", "memory", str(INT64_MAX), INT64_MAX),
]
BAD = [
    ("negative", "memory", "-1", "invalid quantity '-1'"),
    ("decimal", "memory", "0.5", "invalid quantity '0.5'"),
    ("empty", "memory", "", "invalid quantity ''"),
    ("letters", "memory", "abc", "invalid quantity 'abc'"),
    ("milli on memory", "memory", "5m", "invalid suffix 'm' in quantity '5m' (milli is only valid for vcore)"),
    ("capital K alone", "memory", "1K", "invalid suffix 'K' in quantity '1K'"),
    ("lower ki", "memory", "1ki", "invalid suffix 'ki' in quantity '1ki'"),
    ("mi", "vcore", "1mi", "invalid suffix 'mi' in quantity '1mi'"),
    ("overflow", "memory", "9223372036854775808", "invalid quantity: overflow '9223372036854775808'"),
    ("vcore overflow by milli", "vcore", str(INT64_MAX), f"invalid quantity: overflow '{INT64_MAX}'"),
    ("boolean", "memory", True, "invalid quantity 'True'"),
    ("no value", "memory", None, "invalid quantity: no value"),
    ("unicode digits", "memory", "١٢", "invalid quantity '١٢'"),
]


@pytest.mark.parametrize("resource,text,expected", [c[1:] for c in GOOD], ids=[c[0] for c in GOOD])
def test_parse(resource, text, expected):
    assert parse_quantity(text, resource) == expected


@pytest.mark.parametrize("resource,text,message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_parse_error(resource, text, message):
    with pytest.raises(QuantityError) as err:
        parse_quantity(text, resource)
    assert str(err.value) == message


def test_format_like_go_maps():
    assert format_resources({"vcore": 1000, "memory": 5}) == "map[memory:5 vcore:1000]"
    assert format_resources({}) == "map[]"
