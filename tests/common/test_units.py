"""Resource quantities for people, as the dashboard shows them."""

from __future__ import annotations

import pytest

from common.units import human, human_resource


# The one formatter's cases: the CLI's `human` here, the dashboard's `fmtQty` in Chromium
# (tests/web/test_dashboard.py) must give exactly these texts.
CASES = [
    ("memory", 1_374_389_534_720, "1.3 TiB"),  # 1.25 TiB: halves round away from zero
    ("memory", 1023.96 * 1024, "1 MiB"),  # rounds to 1024 KiB: the next unit
    ("memory", 2**60 * 3, "3 EiB"),
    ("memory", 64 * 1024**3, "64 GiB"),
    ("memory", 1536 * 1024**2, "1.5 GiB"),
    ("memory", 1000, "1000 B"),
    ("memory", 0, "0 B"),
    ("ephemeral-storage", 10 * 1024**4, "10 TiB"),
    ("vcore", 16_000, "16 cores"),
    ("vcore", 1000, "1 core"),
    ("vcore", 1500, "1.5 cores"),
    ("vcore", 250, "250m"),
    ("vcore", 0, "0 cores"),
    ("pods", 110, "110"),
    ("vcore", 1040, "1 core"),  # the unit agrees with the number printed
    ("vcore", 1_250, "1.3 cores"),
    ("vcore", -1_250, "-1.3 cores"),
    ("nvidia.com/gpu", 12_345, "12,345"),
    ("pods", -1_234_567, "-1,234,567"),
]


@pytest.mark.parametrize("name,value,text", CASES, ids=lambda v: str(v))
def test_quantities_read_as_people_read_them(name, value, text):
    assert human(name, value) == text


def test_a_resource_map_is_sorted_and_raw_keeps_the_integers():
    r = {"vcore": 16_000, "memory": 64 * 1024**3}
    assert human_resource(r) == "memory: 64 GiB, vcore: 16 cores"
    assert human_resource(r, raw=True) == "memory=68719476736,vcore=16000"
    assert human_resource({}) == "-" and human_resource(None, raw=True) == "-"

