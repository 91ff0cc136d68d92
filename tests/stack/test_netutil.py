"""common.netutil: address parsing, free ports, bounded waits."""

from __future__ import annotations

import errno
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from common import netutil


@pytest.mark.parametrize("value, expected", [
    ("127.0.0.1:9090", ("127.0.0.1", 9090)),
    ("localhost:1", ("localhost", 1)),
    ("[::1]:65535", ("::1", 65535)),
    (" 0.0.0.0:80 ", ("0.0.0.0", 80)),
], ids=["ipv4", "hostname", "ipv6 in brackets", "surrounding spaces"])
def test_parse_host_port_accepts(value, expected):
    assert netutil.parse_host_port(value) == expected


@pytest.mark.parametrize("value, fragment", [
    ("", "no ':PORT'"),
    ("9090", "no ':PORT'"),
    ("host:", "no valid port"),
    ("host:0", "no valid port"),
    ("host:70000", "no valid port"),
    ("host:http", "no valid port"),
    (":80", "has no host"),
    ("[::1:80", "unclosed"),
], ids=["empty", "port only", "no port", "port zero", "port too big", "named port", "no host", "bad ipv6"])
def test_parse_host_port_rejects_naming_the_flag(value, fragment):
    with pytest.raises(netutil.AddressError) as err:
        netutil.parse_host_port(value, "--si-address")
    assert "--si-address" in str(err.value) and fragment in str(err.value)


def test_parse_tcp_endpoint_requires_the_tcp_scheme():
    assert netutil.parse_tcp_endpoint("tcp://127.0.0.1:5555") == ("127.0.0.1", 5555)
    with pytest.raises(netutil.AddressError, match="--broker-frontend.*tcp://HOST:PORT"):
        netutil.parse_tcp_endpoint("127.0.0.1:5555", "--broker-frontend")


def test_free_ports_are_distinct_and_bindable():
    ports = netutil.free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        assert netutil.bind_error("127.0.0.1", port) is None


def test_a_listening_port_is_in_use_until_closed():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    assert netutil.port_in_use("127.0.0.1", port)
    error = netutil.bind_error("127.0.0.1", port)
    assert error is not None and error.errno == errno.EADDRINUSE and "already in use" in str(error)
    listener.close()
    assert not netutil.port_in_use("127.0.0.1", port)


def test_a_foreign_address_cannot_be_bound_and_is_not_called_in_use():
    error = netutil.bind_error("192.0.2.1", netutil.free_port())  # TEST-NET-1, never local
    assert error is not None and error.errno == errno.EADDRNOTAVAIL
    assert not netutil.port_in_use("192.0.2.1", 80)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_for_port_returns_once_something_listens():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    with listener:
        netutil.wait_for_port("127.0.0.1", listener.getsockname()[1], deadline=float("inf"))


def test_wait_for_port_gives_up_at_the_deadline_without_sleeping():
    clock = FakeClock()
    port = netutil.free_port()
    with pytest.raises(netutil.WaitTimeout, match=f"nothing listens on 127.0.0.1:{port}") as err:
        netutil.wait_for_port("127.0.0.1", port, deadline=clock.now + 1.0, clock=clock, sleep=clock.sleep)
    assert isinstance(err.value.last, OSError)
    assert clock.now >= 101.0


@pytest.fixture
def ready_server():
    """An HTTP server answering 503 for the first ``not_ready`` GETs, then 200 with JSON."""
    state = {"calls": 0, "not_ready": 2}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            state["calls"] += 1
            ready = state["calls"] > state["not_ready"]
            body = json.dumps({"ready": ready, "calls": state["calls"]}).encode()
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ready", state
    server.shutdown()
    server.server_close()


def test_wait_for_http_polls_until_the_answer_is_accepted(ready_server):
    url, state = ready_server
    answer = netutil.wait_for_http(url, deadline=float("inf"), interval=0.01)
    assert answer.status == 200 and answer.body == {"ready": True, "calls": 3}


def test_non_2xx_answers_are_returned_with_their_json(ready_server):
    url, _ = ready_server
    answer = netutil.http_get_json(url)
    assert answer.status == 503 and answer.body["ready"] is False


def test_wait_for_http_times_out_with_the_last_answer(ready_server):
    url, state = ready_server
    state["not_ready"] = 10**6
    clock = FakeClock()
    with pytest.raises(netutil.WaitTimeout, match="HTTP 503") as err:
        netutil.wait_for_http(url, deadline=clock.now + 0.5, clock=clock, sleep=clock.sleep)
    assert err.value.last.status == 503


def test_on_poll_can_abort_a_wait(ready_server):
    url, state = ready_server
    state["not_ready"] = 10**6

    def abort(answer):
        raise RuntimeError(f"process died (last status {answer.status})")

    with pytest.raises(RuntimeError, match="last status 503"):
        netutil.wait_for_http(url, deadline=float("inf"), on_poll=abort)


def test_wait_for_http_reports_refused_connections():
    clock = FakeClock()
    url = f"http://127.0.0.1:{netutil.free_port()}/ready"
    with pytest.raises(netutil.WaitTimeout, match="not ready") as err:
        netutil.wait_for_http(url, deadline=clock.now + 0.3, clock=clock, sleep=clock.sleep)
    assert isinstance(err.value.last, OSError)


def test_free_ports_never_returns_an_excluded_port():
    given = netutil.free_ports(3)
    for _ in range(20):  # the kernel readily hands a just-released port out again
        assert not set(netutil.free_ports(3, exclude=given)) & set(given)
