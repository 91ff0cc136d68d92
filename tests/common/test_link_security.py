"""CURVE between broker and peers: a known key joins, an unknown key is refused; bad settings are named."""

from __future__ import annotations

import pathlib

import pytest
import zmq
import zmq.auth

from common import security


@pytest.fixture
def keys(tmp_path: pathlib.Path):
    for name in ("broker", "good", "bad"):
        zmq.auth.create_certificates(str(tmp_path), name)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "good.key").write_bytes((tmp_path / "good.key").read_bytes())
    return tmp_path


def _pair(keys, client_name: str) -> bytes | None:
    ctx = zmq.Context()
    server = ctx.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    auth = security.secure_server(ctx, [server], str(keys / "broker.key_secret"), str(keys / "allowed"))
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    security.secure_client(client, str(keys / f"{client_name}.key_secret"), str(keys / "broker.key"))
    client.connect(f"tcp://127.0.0.1:{port}")
    client.send(b"hello")
    try:
        if server.poll(1500):
            return server.recv_multipart()[1]
        return None
    finally:
        client.close(0)
        server.close(0)
        auth.stop()
        ctx.term()


def test_allowed_key_joins(keys):
    assert _pair(keys, "good") == b"hello"


def test_unknown_key_is_refused_and_logged(keys, caplog):
    with caplog.at_level("WARNING", logger="korral.security"):
        assert _pair(keys, "bad") is None
    assert "refused a CURVE peer with unknown public key" in caplog.text


@pytest.mark.parametrize("secret, server, message", [
    ("good.key_secret", None, "--curve-secret needs --curve-server"),
    (None, "broker.key", "--curve-server needs --curve-secret"),
    ("good.key", "broker.key", "needs the secret one"),
    ("missing", "broker.key", "not a readable CURVE certificate"),
])
def test_bad_client_settings_name_the_flag(keys, secret, server, message):
    with pytest.raises(security.SecurityError, match=message):
        security.client_keys(secret and str(keys / secret), server and str(keys / server))


def test_server_without_allowed_directory_is_an_error(keys):
    ctx = zmq.Context()
    try:
        with pytest.raises(security.SecurityError, match="--curve-allowed"):
            security.secure_server(ctx, [], str(keys / "broker.key_secret"), None)
    finally:
        ctx.term()


def test_tls_needs_cert_and_key():
    assert security.grpc_server_credentials(None, None, None) is None
    with pytest.raises(security.SecurityError, match="both --tls-cert and --tls-key"):
        security.grpc_server_credentials("cert.pem", None, None)
    with pytest.raises(security.SecurityError, match="--tls-client-ca needs"):
        security.grpc_server_credentials(None, None, "ca.pem")
