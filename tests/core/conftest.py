import pytest

from tests.core.harness import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()
