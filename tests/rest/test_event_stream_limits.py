"""Event stream limits from the RM's extraConfig (YuniKorn's ``event.maxStreams``,
``event.maxStreamsPerHost``, by ``Host`` header), and extraConfig values that cannot be used are
refused at registration, naming the key, with the RM's registration kept."""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import StackHandle, start_stack, stop_and_verify, wait_until
from tests.e2e.sirm import SIRM
from tests.rest.workload import EventStreamClient, http


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> StackHandle:
    handle = start_stack(tmp_path_factory.mktemp("limits") / "state", workers=2)  # a worker per RM
    yield handle
    problems = stop_and_verify(handle)
    if problems:
        pytest.fail("\n".join(problems))


def test_streams_beyond_the_limits_are_refused_with_503(stack: StackHandle) -> None:
    rm = SIRM(stack.si_address, "rm-limits")
    rm.register(extra_config={"event.maxStreams": "2", "event.maxStreamsPerHost": "1"})
    base = f"http://{stack.rest_address}"
    opened = [EventStreamClient(stack.rest_address, host="a.example")]
    try:
        assert opened[0].resp.status == 200 and "InstanceUUID" in opened[0].line()
        same_host = EventStreamClient(stack.rest_address, host="a.example")
        body = same_host.body()
        assert (same_host.resp.status, body["message"]) == (503, "Too many streaming connections")
        assert "event.maxStreamsPerHost 1" in body["description"]
        opened.append(EventStreamClient(stack.rest_address, host="b.example"))
        assert opened[1].resp.status == 200 and "InstanceUUID" in opened[1].line()
        third = EventStreamClient(stack.rest_address, host="c.example")
        assert third.resp.status == 503 and "event.maxStreams 2" in third.body()["description"]
    finally:
        for s in opened:
            s.close()
    wait_until(lambda: http(base, "/debug/fullstatedump").json()["eventStreams"] == [], 10,
               "the closed streams leaving the dump's eventStreams")
    again = EventStreamClient(stack.rest_address, host="a.example")
    try:
        assert again.resp.status == 200  # the slots are free again
    finally:
        again.close()
    rm.close()


def test_unusable_extra_config_values_are_refused_naming_the_key(stack: StackHandle) -> None:
    rm = SIRM(stack.si_address, "rm-extra")
    rm.register()
    for key, value in (("event.maxStreams", "lots"), ("event.maxStreamsPerHost", "-1")):
        with pytest.raises(grpc.RpcError) as err:
            rm.register(extra_config={key: value})
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"extraConfig {key}: {value!r} is not a non-negative integer" in err.value.details()
        assert "rm-extra keeps its current registration" in err.value.details()
    parts = http(f"http://{stack.rest_address}", "/ws/v1/partitions").json()
    assert "rm-extra" in [p["rmID"] for p in parts]
    rm.close()
