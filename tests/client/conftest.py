import pytest

from tests.client.fake_scheduler import FakeScheduler


@pytest.fixture
def fake():
    server = FakeScheduler()
    yield server
    server.stop()
