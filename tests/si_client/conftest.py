import pytest

from tests.si_client.fake_scheduler import FakeScheduler


@pytest.fixture
def fake():
    server = FakeScheduler()
    yield server
    server.stop()
