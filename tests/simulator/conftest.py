import pytest

from tests.si_client.fake_scheduler import FakeScheduler


@pytest.fixture
def fake():
    server = FakeScheduler()
    yield server
    server.stop()


@pytest.fixture
def broken():
    """A scheduler that ignores node capacity: it over-commits nodes."""
    server = FakeScheduler(overcommit=True)
    yield server
    server.stop()
