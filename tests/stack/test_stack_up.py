"""`korral up` / `korral down` / `korral status` against the real processes, by pid."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.netutil import free_ports
from common.cli.stack.redis_server import ping
from common.cli.stack.down import ProcId, load_stack, supervisor_rpc
from tests.conftest import korral_env, run_korral, start_stack, stop_and_verify, wait_until

ROLES = {"redis", "broker", "rmproxy", "worker-0", "worker-1", "supervisord"}


def test_up_is_ready_then_down_leaves_nothing(tmp_path):
    stack = start_stack(tmp_path / "state", workers=2)
    try:
        assert set(stack.procs) == ROLES
        assert all(p.alive() for p in stack.procs.values())
        for where in (stack.si_address, stack.rest_address, stack.broker_frontend, stack.redis_url):
            assert where in stack.up_output  # `korral up` prints where each process listens
        ready = stack.ready()
        assert ready["ready"] is True and ready["workers"] >= 2
        assert ping(stack.redis_url)
        status = stack.status()
        assert status["running"] is True
        assert {p["role"] for p in status["processes"]} == {"redis", "broker", "rmproxy", "worker"}
        assert {p["pid"] for p in status["processes"]} == {p.pid for n, p in stack.procs.items() if n != "supervisord"}
        table = run_korral("status", "--state-dir", str(stack.state_dir))
        assert table.returncode == 0, table.stdout + table.stderr
        assert "rmproxy" in table.stdout and stack.si_address in table.stdout
        # A stopped worker makes the stack degraded (exit 3), and status says which.
        rpc = supervisor_rpc(load_stack(stack.state_dir))
        assert rpc.supervisor.stopProcess("worker:worker-1")
        degraded = run_korral("status", "--state-dir", str(stack.state_dir))
        assert degraded.returncode == 3
        assert any("worker-1" in line and "STOPPED" in line for line in degraded.stdout.splitlines())
    finally:
        problems = stop_and_verify(stack)
    assert not problems, problems
    assert load_stack(stack.state_dir).state == "stopped"
    again = run_korral("down", "--state-dir", str(stack.state_dir))
    assert again.returncode == 0 and "already stopped" in again.stdout
    assert (stack.state_dir / "logs" / "rmproxy.log").exists()  # logs are kept for post-mortems


def test_a_stack_killed_without_down_can_be_started_again(tmp_path):
    state = tmp_path / "state"
    first = start_stack(state, workers=1)
    procs = first.current_procs()
    # simulate a crash of everything; supervisord first, or it restarts a child killed before it
    # (that child, unrecorded, would outlive the test)
    for name in sorted(procs, key=lambda n: n != "supervisord"):
        procs[name].signal(signal.SIGKILL)
    wait_until(lambda: not any(p.alive() for p in first.procs.values()), 10, "every process of the stack dead")
    second = start_stack(state, workers=1)
    try:
        assert second.ready()["ready"] is True
        assert second.pids["supervisord"] != first.pids["supervisord"]
    finally:
        assert not stop_and_verify(second)


def test_up_refusing_a_running_stack_names_the_pids_supervisord_runs_now(tmp_path):
    stack = start_stack(tmp_path / "state", workers=1)
    try:
        old = stack.procs["worker-0"]
        old.signal(signal.SIGKILL)  # supervisord restarts it with a new pid, which stack.json does not hold
        rpc = supervisor_rpc(load_stack(stack.state_dir))

        def restarted() -> int | None:
            info = rpc.supervisor.getProcessInfo("worker:worker-0")
            return info["pid"] if info["statename"] == "RUNNING" and info["pid"] not in (0, old.pid) else None

        new_pid = wait_until(restarted, 30, "worker-0 restarted by supervisord")
        si, rest = free_ports(2)
        refused = run_korral("up", "--detach", "--state-dir", str(stack.state_dir), "--si-address", f"127.0.0.1:{si}",
                             "--rest-address", f"127.0.0.1:{rest}")
        assert refused.returncode == 1
        assert f"worker-0 pid {new_pid}" in refused.stderr and f"pid {old.pid}," not in refused.stderr, refused.stderr
        assert f"supervisord pid {stack.procs['supervisord'].pid}" in refused.stderr
    finally:
        assert not stop_and_verify(stack)


def foreground_up(state: Path) -> subprocess.Popen:
    """``korral up`` in the foreground (one worker, free ports), its output on a pipe."""
    si, rest = free_ports(2)
    return subprocess.Popen(
        [sys.executable, "-m", "common.cli", "up", "--state-dir", str(state), "--workers", "1",
         "--si-address", f"127.0.0.1:{si}", "--rest-address", f"127.0.0.1:{rest}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=korral_env())


def test_ctrl_c_on_a_foreground_up_stops_everything(tmp_path):
    state = tmp_path / "state"
    proc = foreground_up(state)
    output = []
    try:
        for line in proc.stdout:
            output.append(line)
            if "Ctrl-C stops the whole stack" in line:
                break
        else:
            pytest.fail("foreground korral up never became ready:\n" + "".join(output))
        info = load_stack(state)
        procs = info.all_procs()
        assert info.state == "running" and set(procs) == {"redis", "broker", "rmproxy", "worker-0", "supervisord"}
        proc.send_signal(signal.SIGINT)
        rest_of_output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, rest_of_output
        assert "SIGINT: stopping the stack" in rest_of_output
        left = [f"{n} pid {p.pid}" for n, p in procs.items() if p.alive()]
        assert not left, left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if (state / "stack.json").exists():
            run_korral("down", "--state-dir", str(state))


@pytest.fixture
def crashing_deploy(tmp_path):
    """The real templates, with the broker replaced by a program that exits at once."""
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    target = tmp_path / "deploy"
    target.mkdir()
    (target / "redis.program.tmpl").write_text((deploy / "redis.program.tmpl").read_text())
    lines, in_broker = [], False
    for line in (deploy / "supervisord.conf.tmpl").read_text().splitlines():
        if line.startswith("["):
            in_broker = line == "[program:broker]"
        if in_broker and line.startswith("command="):
            line = ("command=${python} -c \"import sys; print('broker: cannot bind, test failure', "
                    "file=sys.stderr); sys.exit(3)\"")
        if in_broker and line.startswith("startretries="):
            line = "startretries=1"  # FATAL after one retry instead of three: a faster test
        lines.append(line)
    assert any("broker: cannot bind" in line for line in lines), "the broker program has no command= line"
    (target / "supervisord.conf.tmpl").write_text("\n".join(lines) + "\n")
    return target


def test_a_process_that_keeps_crashing_fails_up_with_its_log_and_nothing_left(tmp_path, crashing_deploy):
    si, rest = free_ports(2)
    state = tmp_path / "state"
    result = run_korral("up", "--detach", "--state-dir", str(state), "--workers", "1",
                        "--si-address", f"127.0.0.1:{si}", "--rest-address", f"127.0.0.1:{rest}",
                        "--timeout", "30", env={"KORRAL_DEPLOY_DIR": str(crashing_deploy)})
    assert result.returncode == 1
    assert "broker keeps exiting and supervisord gave up" in result.stderr
    assert "broker: cannot bind, test failure" in result.stderr  # the tail of its log
    info = load_stack(state)
    assert info.state == "stopped"
    supervisord_log = (state / "logs" / "supervisord.log").read_text()
    pids = [int(p) for p in re.findall(r"(?:with pid|started with pid) (\d+)", supervisord_log)]
    assert len(pids) >= 4  # supervisord, redis, the broker's attempts, a worker, rmproxy
    assert not [p for p in pids if ProcId.of(p) is not None]


def _pids_in_supervisord_log(state: Path) -> list[int]:
    log = state / "logs" / "supervisord.log"
    text = log.read_text() if log.exists() else ""
    return [int(p) for p in re.findall(r"(?:with pid|started with pid) (\d+)", text)]


@pytest.mark.parametrize("when", ["record written", "supervisord running"])
def test_ctrl_c_while_starting_stops_what_had_started(tmp_path, when):
    state = tmp_path / "state"
    proc = foreground_up(state)
    try:
        marker = state / ("stack.json" if when == "record written" else "supervisord.pid")
        wait_until(marker.exists, 30, f"korral up reaching '{when}'", interval=0.01)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode in (0, 130), output
        assert "SIGINT: stopping the stack" in output
        left = [p for p in _pids_in_supervisord_log(state) if ProcId.of(p) is not None]
        assert not left, output
        assert load_stack(state).state == "stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        run_korral("down", "--state-dir", str(state))


def test_korral_down_ends_a_foreground_up_cleanly(tmp_path):
    state = tmp_path / "state"
    proc = foreground_up(state)
    try:
        for line in proc.stdout:
            if "Ctrl-C stops the whole stack" in line:
                break
        else:
            pytest.fail("foreground korral up never became ready")
        down = run_korral("down", "--state-dir", str(state))
        assert down.returncode == 0, down.stderr
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "stopped by `korral down`" in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
