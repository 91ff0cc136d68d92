"""End-to-end fixtures: a real stack started by ``korral up`` (real Redis, broker, workers, rmproxy).

- ``stack``: one stack per test, ``--workers 2``. Parametrise with
  ``@pytest.mark.parametrize("stack_options", [{"workers": 3, "extra": ("--log-level", "debug")}])``.
- ``module_stack``: one stack shared by every test of a module (for read-mostly tests).
- ``stack_factory`` (from tests/conftest.py): start several stacks in one test.

Every stack is stopped with ``korral down`` at teardown, and the fixture fails the test
if any of its processes (supervisord, its children, the embedded Redis) is left.
"""

from __future__ import annotations

import pytest

from tests.conftest import start_stack, stop_and_verify


@pytest.fixture
def stack_options() -> dict:
    """Override (or parametrise) to change the ``stack`` fixture: ``workers`` and ``extra`` flags."""
    return {}


@pytest.fixture
def stack(stack_factory, stack_options):
    """A running stack (``StackHandle``): ``si_address``, ``rest_address``, ``state_dir``, ``redis_url``, ``pids``."""
    return stack_factory(workers=stack_options.get("workers", 2), extra=tuple(stack_options.get("extra", ())))


@pytest.fixture(scope="module")
def module_stack(tmp_path_factory):
    """One running stack (``--workers 2``) for a whole test module, checked at module teardown."""
    handle = start_stack(tmp_path_factory.mktemp("module-stack") / "state")
    yield handle
    problems = stop_and_verify(handle)
    if problems:
        pytest.fail("\n".join(problems))
