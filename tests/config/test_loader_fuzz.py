"""Whatever the text, load_config either returns a config or raises ConfigError, quickly."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.config import ConfigError, load_config
from tests.placement.seed001_cases import COMPLEX_1

KEYWORDS = ["partitions", "queues", "name", "root", "placementrules", "parent", "filter", "users",
            "resources", "max", "guaranteed", "submitacl", ":", "-", " ", "\n", "  ", "[", "]", "{", "}",
            "&a", "*a", "'", '"', "1Gi", "500m", "true", "tag", "fixed", "value", "limits", "#"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(KEYWORDS) | st.text(max_size=5), max_size=60).map("".join))
def test_random_text_never_crashes(text):
    try:
        load_config(text)
    except ConfigError as exc:
        assert exc.errors and all(isinstance(e, str) and e for e in exc.errors)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(COMPLEX_1) - 1), st.integers(0, len(COMPLEX_1)), st.text(max_size=8))
def test_mutated_real_config_never_crashes(start, length, insert):
    text = COMPLEX_1[:start] + insert + COMPLEX_1[start + length:]
    try:
        load_config(text)
    except ConfigError as exc:
        assert exc.errors
