"""``korral worker`` flags that are checked before the worker connects anywhere."""

from __future__ import annotations

from tests.conftest import run_korral


def test_a_non_positive_stall_bound_is_refused_naming_the_flag():
    result = run_korral("worker", "--stall-seconds", "0", "--broker", "tcp://127.0.0.1:1",
                        "--redis-url", "redis://127.0.0.1:1/0", timeout=30)
    assert result.returncode == 2
    assert "--stall-seconds must be positive, got 0" in result.stderr
