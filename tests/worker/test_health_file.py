"""``korral worker --health-file`` and ``--probe live|ready``: the worker's probe for containers.

The unit part drives ``HealthFile``/``check`` with a stand-in loop and chosen clocks. The
process part runs a real broker and a real ``korral worker --health-file`` as subprocesses
and the probe exactly as a Kubernetes exec probe would (``korral worker --probe ...`` with the
worker's environment): ready while the broker is there; still live (not ready) once the
broker is gone, because restarting a worker then would lose its partition; not live once the
worker's loop stops turning (SIGSTOP) for longer than ``--stall-seconds``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from broker.table import EXPIRY
from common.netutil import free_ports
from partition_worker import health
from partition_worker.health import READY_WITHIN, WRITE_EVERY, HealthFile, check
from tests.conftest import korral_env, run_korral, stop_process, wait_until


def fake_loop(turn_ago: float = 0.0, heard_ago: float | None = 0.0, owned=None) -> SimpleNamespace:
    now = time.monotonic()
    return SimpleNamespace(_turn_at=now - turn_ago, broker_heard=None if heard_ago is None else now - heard_ago,
                           owned=owned)


# --- the file and the check -------------------------------------------------------------------

def test_update_writes_wall_times_and_the_partition(tmp_path):
    path = tmp_path / "health.json"
    hf = HealthFile(str(path))
    before = time.time()
    hf.update(fake_loop(turn_ago=2.0, heard_ago=1.0, owned=SimpleNamespace(rm_id="rm", partition="default")))
    doc = json.loads(path.read_text())
    assert doc["pid"] == os.getpid() and doc["partition"] == "[rm]default"
    assert before - 2.5 < doc["turn"] < before - 1.5
    assert before - 1.5 < doc["broker"] < before - 0.5
    assert not (tmp_path / "health.json.tmp").exists()


def test_update_is_rate_limited(tmp_path):
    path = tmp_path / "health.json"
    hf = HealthFile(str(path))
    hf.update(fake_loop(heard_ago=None))
    first = path.read_text()
    hf.update(fake_loop(heard_ago=0.0))  # within WRITE_EVERY: not written
    assert path.read_text() == first and json.loads(first)["broker"] is None
    hf._written_at -= WRITE_EVERY
    hf.update(fake_loop(heard_ago=0.0))
    assert json.loads(path.read_text())["broker"] is not None


def test_a_stale_file_of_an_earlier_run_is_removed_at_start(tmp_path):
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"turn": time.time(), "broker": time.time()}))
    HealthFile(str(path))
    assert not path.exists()
    assert check(str(path), "live", 60)[0] is False


def test_an_unwritable_file_is_logged_once_and_does_not_raise(tmp_path, caplog):
    hf = HealthFile(str(tmp_path / "missing-dir" / "health.json"))
    for _ in range(3):
        hf._written_at = float("-inf")
        hf.update(fake_loop())
    errors = [r for r in caplog.records if "cannot write the health file" in r.getMessage()]
    assert len(errors) == 1


@pytest.mark.parametrize("turn_ago, heard_ago, live, ready", [
    (0.5, 0.5, True, True),
    (0.5, None, True, False),                      # never heard the broker: a member of nothing yet
    (0.5, READY_WITHIN + 1, True, False),          # broker gone: still live, not ready
    (59.0, 0.5, True, True),                       # a long honest turn is not a hang
    (61.0, 0.5, False, False),                     # past --stall-seconds: hung
])
def test_check(tmp_path, turn_ago, heard_ago, live, ready):
    now = 1_000_000.0
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"pid": 7, "turn": now - turn_ago, "partition": None,
                                "broker": None if heard_ago is None else now - heard_ago}))
    assert check(str(path), "live", 60.0, now=now)[0] is live
    assert check(str(path), "ready", 60.0, now=now)[0] is ready


def test_check_names_what_is_wrong(tmp_path):
    ok, why = check(str(tmp_path / "nope"), "live", 60)
    assert not ok and "no health file" in why
    (tmp_path / "bad").write_text("{")
    ok, why = check(str(tmp_path / "bad"), "live", 60)
    assert not ok and "unreadable" in why
    now = 1000.0
    (tmp_path / "h").write_text(json.dumps({"turn": now - 90, "broker": now, "pid": 1}))
    ok, why = check(str(tmp_path / "h"), "live", 60, now=now)
    assert not ok and "no turn for 90.0s" in why and "--stall-seconds 60" in why


def test_ready_window_covers_the_brokers_expiry_and_a_write():
    assert READY_WITHIN == EXPIRY + WRITE_EVERY == health.EXPIRY + health.WRITE_EVERY


# --- the flags ------------------------------------------------------------------------------------

def test_probe_without_a_health_file_is_refused():
    result = run_korral("worker", "--probe", "live", timeout=30)
    assert result.returncode == 2
    assert "--probe needs --health-file" in result.stderr


def test_probe_reads_the_health_file_from_the_environment(tmp_path):
    path = tmp_path / "h.json"
    env = {"KORRAL_WORKER_HEALTH_FILE": str(path), "KORRAL_WORKER_STALL_SECONDS": "5"}
    missing = run_korral("worker", "--probe", "live", env=env, timeout=30)
    assert missing.returncode == 1 and "no health file" in missing.stderr
    path.write_text(json.dumps({"pid": 1, "turn": time.time() - 10, "broker": time.time()}))
    stalled = run_korral("worker", "--probe", "live", env=env, timeout=30)
    assert stalled.returncode == 1 and "--stall-seconds 5" in stalled.stderr  # the env's bound is used
    path.write_text(json.dumps({"pid": 1, "turn": time.time(), "broker": time.time()}))
    # a generous bound here: starting the CLI on a loaded machine can take longer than 5 s
    fine = run_korral("worker", "--probe", "ready", env={**env, "KORRAL_WORKER_STALL_SECONDS": "300"}, timeout=30)
    assert fine.returncode == 0 and fine.stdout.startswith("ready:")


# --- real processes ----------------------------------------------------------------------------------

def _spawn(args: list[str], env: dict[str, str], log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "common.cli", *args], env=korral_env(env), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def test_probes_against_a_real_worker_and_broker(tmp_path, redis_server):
    front, back = free_ports(2)
    health_file = tmp_path / "worker.health"
    worker_env = {"KORRAL_BROKER_BACKEND": f"tcp://127.0.0.1:{back}", "KORRAL_REDIS_URL": redis_server.url,
                  "KORRAL_WORKER_HEALTH_FILE": str(health_file), "KORRAL_WORKER_STALL_SECONDS": "3"}

    def probe(kind: str) -> subprocess.CompletedProcess:
        return run_korral("worker", "--probe", kind, env=worker_env, timeout=30)

    logs = tmp_path / "logs.txt"
    with open(logs, "wb") as log:
        broker = _spawn(["broker", "--frontend", f"tcp://127.0.0.1:{front}", "--backend", f"tcp://127.0.0.1:{back}",
                         "--redis-url", redis_server.url], {}, log)
        worker = _spawn(["worker", "--name", "probed"], worker_env, log)
        try:
            context = logs.read_text
            wait_until(lambda: probe("ready").returncode == 0, 20, "the worker ready (broker heard)", context)
            assert probe("live").returncode == 0

            stop_process(broker, 10)  # the broker gone: not ready, but live (a restart would lose the partition)
            wait_until(lambda: probe("ready").returncode == 1, READY_WITHIN + 5, "ready failing without a broker",
                       context)
            assert probe("live").returncode == 0, "a worker without a broker must stay live"
            # the loop keeps turning for longer than --stall-seconds (3) without a broker: still live
            past_the_stall = time.time() + 3.5
            wait_until(lambda: json.loads(health_file.read_text())["turn"] > past_the_stall, 10,
                       "a loop turn recorded 3.5 s on", context)
            live = probe("live")
            assert live.returncode == 0, live.stderr

            os.kill(worker.pid, signal.SIGSTOP)  # a hung loop: no turn any more
            stopped_at = time.monotonic()
            failed = wait_until(lambda: (r := probe("live")).returncode == 1 and r, 15, "live failing when hung",
                                context)
            assert time.monotonic() - stopped_at >= 2.0, "declared hung before --stall-seconds"
            assert "made no turn" in failed.stderr
        finally:
            stop_process(worker, 10)
            stop_process(broker, 10)
    assert worker.returncode is not None and broker.returncode is not None
