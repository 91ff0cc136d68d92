"""common.cli.stack.redis_server: the embedded redis-server used by `korral up` and the fixtures."""

from __future__ import annotations

import socket

import pytest

from common.cli.stack.redis_server import (
    RedisNotInstalled,
    RedisServer,
    RedisStartError,
    find_redis_server,
    ping,
    redis_command,
)
from common.cli.stack.down import ProcId


def test_the_fixture_serves_a_real_redis(redis_server):
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.set("korral:test", "1")
    assert client.get("korral:test") == b"1"
    client.close()


def test_start_answers_ping_and_stop_leaves_no_process(tmp_path):
    server = RedisServer(tmp_path / "r").start()
    ident = ProcId.of(server.pid)
    assert ident is not None and ping(server.url)
    server.stop()
    assert not ident.alive()
    assert not ping(server.url, timeout=0.2)
    server.stop()  # a second stop is a no-op


def test_a_taken_port_gives_a_clear_error_with_the_log(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    with taken, pytest.raises(RedisStartError) as err:
        RedisServer(tmp_path / "r", port=port).start(timeout=5)
    message = str(err.value)
    assert f"127.0.0.1:{port}" in message and "exited" in message
    assert "redis.log" in message


def test_the_server_binds_loopback_and_persists_only_when_asked(tmp_path):
    argv = redis_command(6390, tmp_path, persist=True, binary="/bin/redis-server")
    assert argv[0] == "/bin/redis-server"
    assert argv[argv.index("--bind") + 1] == "127.0.0.1"
    assert argv[argv.index("--appendonly") + 1] == "yes"
    assert argv[argv.index("--dir") + 1] == str(tmp_path)
    argv = redis_command(6390, tmp_path, persist=False, binary="/bin/redis-server")
    assert argv[argv.index("--appendonly") + 1] == "no"


def test_a_missing_binary_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("KORRAL_REDIS_SERVER", str(tmp_path / "nope"))
    with pytest.raises(RedisNotInstalled, match="KORRAL_REDIS_SERVER"):
        find_redis_server()


def test_ping_is_false_for_a_bad_url():
    assert ping("not-a-url") is False
