import pytest

from fake_scheduler import FakeScheduler


@pytest.fixture
def fake():
    server = FakeScheduler()
    yield server
    server.stop()
