"""stack.json records, pid identities, stopping orphans, and `korral up` refusals that start nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.cli.stack.up import refuse_if_running
from common.cli.stack.down import NoStack, ProcId, StackError, StackInfo, load_stack, save_stack, stop_stack


def make_info(state_dir: Path, **extra) -> StackInfo:
    state_dir.mkdir(parents=True, exist_ok=True)
    return StackInfo(
        state_dir=str(state_dir), config_path=str(state_dir / "supervisord.conf"),
        socket_path=str(state_dir / "supervisor.sock"), pidfile=str(state_dir / "supervisord.pid"),
        logs_dir=str(state_dir / "logs"), workers=1, redis_embedded=True,
        addresses={"si": "127.0.0.1:1", "rest": "127.0.0.1:2", "redis_url": "redis://127.0.0.1:3/0",
                   "broker_frontend": "tcp://127.0.0.1:4", "broker_backend": "tcp://127.0.0.1:5"},
        **extra,
    )


@pytest.fixture
def child():
    """Start ``python -c CODE`` in its own session (as supervisord's children are); killed after."""
    started: list[subprocess.Popen] = []

    def spawn(code: str = "import time; time.sleep(60)") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                                stdout=subprocess.PIPE, text=True)
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


def test_a_process_identity_survives_only_as_long_as_the_process(child):
    proc = child()
    ident = ProcId.of(proc.pid)
    assert ident is not None and ident.alive()
    assert not ProcId(proc.pid, ident.start_ticks + 1).alive()  # same pid, another process
    proc.kill()
    proc.wait(5)
    assert not ident.alive()
    assert ProcId.of(proc.pid) is None


def test_stack_record_round_trips(tmp_path):
    info = make_info(tmp_path, supervisord=ProcId(os.getpid(), 7), processes={"broker": ProcId(1, 2)})
    save_stack(info)
    assert load_stack(tmp_path) == info


@pytest.mark.parametrize("content, message", [
    ('{"version": 99}', "unsupported version 99"),
    ('{"version": 1, "nonsense": 1}', "not a korral stack record"),
    ("{", "unreadable"),
], ids=["future version", "foreign json", "truncated"])
def test_a_bad_record_gives_a_clear_error(tmp_path, content, message):
    (tmp_path / "stack.json").write_text(content)
    with pytest.raises(StackError, match=message):
        load_stack(tmp_path)


def test_no_record_is_no_stack(tmp_path):
    with pytest.raises(NoStack, match="no stack in"):
        load_stack(tmp_path)


def test_stop_kills_orphans_whose_supervisord_is_gone(tmp_path, child):
    proc = child()
    info = make_info(tmp_path, processes={"broker": ProcId.of(proc.pid)}, state="running")
    save_stack(info)
    report = stop_stack(tmp_path, timeout=5)
    assert proc.wait(5) == -signal.SIGTERM
    assert report.stopped == [f"broker (pid {proc.pid})"] and not report.killed and not report.left
    assert load_stack(tmp_path).state == "stopped"


def test_stop_kills_what_ignores_sigterm_after_the_timeout(tmp_path, child):
    proc = child("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); time.sleep(60)")
    assert proc.stdout.readline().strip() == "armed"
    save_stack(make_info(tmp_path, processes={"worker-0": ProcId.of(proc.pid)}))
    started = time.monotonic()
    report = stop_stack(tmp_path, timeout=0.5)
    assert proc.wait(5) == -signal.SIGKILL
    assert report.killed == [f"worker-0 (pid {proc.pid})"]
    assert time.monotonic() - started < 5


def test_up_refuses_a_state_dir_whose_stack_runs(tmp_path, child, korral):
    proc = child()
    save_stack(make_info(tmp_path, supervisord=ProcId.of(proc.pid), state="running"))
    with pytest.raises(StackError, match=f"already running in {tmp_path}.*korral down --state-dir"):
        refuse_if_running(tmp_path)
    result = korral("up", "--detach", "--state-dir", str(tmp_path), "--si-address", "127.0.0.1:1",
                    "--rest-address", "127.0.0.1:2")
    assert result.returncode == 1
    assert f"supervisord pid {proc.pid}" in result.stderr
    assert proc.poll() is None  # the running stack was left alone


def test_a_stale_record_does_not_block_a_new_stack(tmp_path, child):
    proc = child()
    ident = ProcId.of(proc.pid)
    proc.kill()
    proc.wait(5)
    save_stack(make_info(tmp_path, supervisord=ident, processes={"rmproxy": ident}, state="running"))
    refuse_if_running(tmp_path)  # no error: nothing recorded is alive


def test_up_names_the_flag_whose_port_is_taken_and_starts_nothing(tmp_path, korral):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    with taken:
        result = korral("up", "--detach", "--state-dir", str(tmp_path / "s"),
                        "--si-address", f"127.0.0.1:{port}", "--rest-address", "127.0.0.1:1")
    assert result.returncode == 1
    assert f"--si-address: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "already in use" in result.stderr
    assert not (tmp_path / "s" / "stack.json").exists()


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be at least 1"),
    (["--si-address", "nowhere"], "--si-address: 'nowhere' is not HOST:PORT"),
    (["--broker-frontend", "127.0.0.1:5555"], "--broker-frontend: '127.0.0.1:5555' is not a tcp://HOST:PORT"),
    (["--redis-port", "70000"], "--redis-port 70000 is not a port"),
    (["--ui-dir", "/nonexistent/ui"], "--ui-dir /nonexistent/ui: no index.html in /nonexistent/ui"),
], ids=["no workers", "bad SI address", "endpoint without scheme", "bad redis port",
        "a UI dir without index.html"])
def test_up_rejects_bad_flags(tmp_path, korral, flags, message):
    result = korral("up", "--detach", "--state-dir", str(tmp_path / "s"), *flags)
    assert result.returncode == 1 and message in result.stderr


def test_up_checks_an_external_redis_before_starting(tmp_path, korral):
    from common.netutil import free_ports

    si, rest, dead = free_ports(3)
    result = korral("up", "--detach", "--state-dir", str(tmp_path / "s"), "--si-address", f"127.0.0.1:{si}",
                    "--rest-address", f"127.0.0.1:{rest}", "--redis-url", f"redis://127.0.0.1:{dead}/0")
    assert result.returncode == 1
    assert f"--redis-url redis://127.0.0.1:{dead}/0: Redis does not answer PING" in result.stderr


def test_down_without_a_stack_says_so(tmp_path, korral):
    result = korral("down", "--state-dir", str(tmp_path))
    assert result.returncode == 1 and f"no stack in {tmp_path}" in result.stderr


def test_status_without_a_stack_says_so(tmp_path, korral):
    result = korral("status", "--state-dir", str(tmp_path), "--json")
    assert result.returncode == 1 and '"running": false' in result.stdout


def test_up_picks_broker_ports_apart_from_the_given_ones(monkeypatch):
    import argparse

    from common import netutil
    from common.cli.stack import up as stack

    si, rest = netutil.free_ports(2)
    real = netutil.free_ports
    # A kernel that would hand the SI and REST ports out again must not make `up` reuse them.
    monkeypatch.setattr(netutil, "free_ports", lambda n, host="127.0.0.1", exclude=(): (
        real(n, host, exclude) if exclude else [si, rest, si][:n]))
    parser = argparse.ArgumentParser()
    stack.configure(parser)
    opts = stack.resolve_options(parser.parse_args(
        ["--si-address", f"127.0.0.1:{si}", "--rest-address", f"127.0.0.1:{rest}"]))
    ports = {si, rest, opts.redis_port, int(opts.broker_frontend.rsplit(":", 1)[1]),
             int(opts.broker_backend.rsplit(":", 1)[1])}
    assert len(ports) == 5


def test_up_runs_in_a_state_dir_with_spaces_but_refuses_percent(tmp_path, korral):
    from common import netutil

    result = korral("up", "--detach", "--state-dir", str(tmp_path / "100% full"))
    assert result.returncode == 1 and "a path with '%' cannot be used" in result.stderr
    si, rest = netutil.free_ports(2)
    state = tmp_path / "my state"
    result = korral("up", "--detach", "--state-dir", str(state), "--workers", "1",
                    "--si-address", f"127.0.0.1:{si}", "--rest-address", f"127.0.0.1:{rest}")
    try:
        assert result.returncode == 0, result.stderr
        assert (state / "logs" / "rmproxy.log").exists()
    finally:
        assert korral("down", "--state-dir", str(state)).returncode == 0
