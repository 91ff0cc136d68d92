"""Who may use the admin endpoint: disabled without a token file or client CA, bearer tokens from a
token file (re-read when it changes), TLS client certificates of the REST server's client CA.

The admin routes run on a real aiohttp server (HTTPS where the test needs it) with a registration
store standing in for Redis; the stack-level behaviour is in tests/e2e/test_config_admin.py."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from aiohttp import web

from common import security
from common.registry import Registration
from common.restclient import RestClient, RestError
from rmproxy.webapi._http import errors_middleware
from rmproxy.webapi.admin import AdminApi, AdminAuth
from tests.conftest import wait_until
from tests.e2e.conftest import make_cert, pki  # noqa: F401 (pki is a fixture)

TOKEN = "s3cret-token-of-alice-0123456789"
PATH = "/ws/v1/korral/admin/config/rm1"


class Store:
    async def load(self, rm_id: str):
        return Registration(rm_id, config="partitions: [{name: default}]\n") if rm_id == "rm1" else None


class Server:
    """The admin GET route on 127.0.0.1, in a thread with its own loop."""

    def __init__(self, auth: AdminAuth, ssl_context=None) -> None:
        self.loop = asyncio.new_event_loop()
        app = web.Application(middlewares=[errors_middleware])
        app.router.add_get("/ws/v1/korral/admin/config/{rmID}", AdminApi(Store(), None, {}, None, auth).get)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ssl_context)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(auth: AdminAuth, ssl_context=None) -> Server:
        servers.append(Server(auth, ssl_context))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def status(client: RestClient) -> str:
    try:
        return client.get(PATH)["rmID"]
    except RestError as exc:
        return str(exc)


def test_without_a_token_file_or_client_ca_the_endpoint_is_disabled(serve):
    server = serve(AdminAuth())
    got = status(RestClient(f"127.0.0.1:{server.port}", token=TOKEN))
    assert got.startswith(f"GET {PATH}: 403 the admin endpoint is disabled (start rmproxy with --admin-token-file")


def test_a_token_of_the_file_is_accepted_by_name_and_others_are_not(serve, tmp_path: Path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# operators\nalice:{TOKEN}\n")
    server = serve(AdminAuth(str(tokens)))
    address = f"127.0.0.1:{server.port}"
    assert status(RestClient(address, token=TOKEN)) == "rm1"
    assert "401 admin token not accepted" in status(RestClient(address, token=TOKEN + "x"))
    assert "401 admin requests need credentials" in status(RestClient(address))
    # the file is re-read when it changes: a rotated token works at once, the old one no more
    tokens.write_text(f"alice:{TOKEN}-rotated\n")
    os.utime(tokens, ns=(1, 1))  # a new mtime even within the file system's timestamp granularity
    wait_until(lambda: status(RestClient(address, token=TOKEN + "-rotated")) == "rm1", 10, "rotated token accepted")
    assert "401" in status(RestClient(address, token=TOKEN))


@pytest.mark.parametrize("text, problem", [
    ("alice:short\n", "line 1: a token needs at least 16 characters"),
    (f"a:{TOKEN}\na:{TOKEN}x\n", "line 2: the name 'a' is used twice"),
    ("# nothing\n", "no token in it"),
], ids=["short token", "repeated name", "empty"])
def test_a_bad_token_file_is_refused_naming_file_and_line(tmp_path: Path, text: str, problem: str):
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(security.SecurityError, match=problem):
        AdminAuth(str(path))
    with pytest.raises(security.SecurityError, match="No such file"):
        AdminAuth(str(tmp_path / "missing"))


def test_a_client_certificate_of_the_rest_ca_is_accepted_by_subject(serve, pki: Path):  # noqa: F811
    make_cert(pki, "ca", "admin-alice", None)
    ctx = security.rest_server_ssl(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    server = serve(AdminAuth(client_certs=True), ctx)
    address = f"https://127.0.0.1:{server.port}"
    as_alice = security.rest_client_ssl(str(pki / "ca.crt"), str(pki / "admin-alice.crt"), str(pki / "admin-alice.key"))
    assert status(RestClient(address, ssl_context=as_alice)) == "rm1"
    # reads work without a certificate; the admin path needs one
    assert "401 admin requests need credentials" in status(
        RestClient(address, ssl_context=security.rest_client_ssl(str(pki / "ca.crt"), None, None)))
    # a certificate of another CA does not even complete the handshake
    stranger = security.rest_client_ssl(str(pki / "ca.crt"), str(pki / "stranger.crt"), str(pki / "stranger.key"))
    assert "cannot reach the REST API" in status(RestClient(address, ssl_context=stranger))


def test_who_names_the_certificate_subject():
    class Transport:
        def get_extra_info(self, name):
            return {"subject": ((("organizationName", "ops"),), (("commonName", "alice"),))} if name == "peercert" else None

    class Request:
        headers: dict = {}
        transport = Transport()

    assert AdminAuth(client_certs=True).who(Request()) == "certificate organizationName=ops,commonName=alice"
