"""deploy/worker-host.supervisord.conf: parsed by supervisor's own parser, and run for real on loopback.

Also checks the one-host deploy/supervisord.conf's programs are real korral command lines.
"""

from __future__ import annotations

import io
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from supervisor.options import ServerOptions

from common.netutil import free_ports
from tests.conftest import stop_process, wait_until
from tests.deploy.compose import DEPLOY, REPO, environment, env_var_is_read, parse_korral

WORKER_HOST = DEPLOY / "worker-host.supervisord.conf"
ENV = {"KORRAL_BROKER_BACKEND": "tcp://10.0.0.5:5556", "KORRAL_REDIS_URL": "rediss://korral:pw@10.0.0.5:6380/0",
       "KORRAL_WORKERS": "3"}


class SupervisorRefused(Exception):
    """supervisord's own parser refused the file; the message is what supervisord prints."""


def supervisor_programs(path: Path, env: dict[str, str]) -> list:
    """The process configs supervisord would run from path under env (its own parser and expansions)."""
    with environment(env):
        opts = ServerOptions()
        opts.stderr = io.StringIO()  # the class default is the sys.stderr of import time
        try:
            opts.realize(args=["-c", str(path)])
        except SystemExit:
            raise SupervisorRefused(opts.stderr.getvalue()) from None
    return [p for group in opts.process_group_configs for p in group.process_configs]


def korral_argv(command: str) -> list[str]:
    argv = shlex.split(command)
    assert Path(argv[0]).name == "korral", f"not a korral command: {command}"
    return argv[1:]


def test_worker_host_programs_are_workers_with_the_environment_addresses():
    programs = supervisor_programs(WORKER_HOST, ENV)
    assert len(programs) == 3
    names = set()
    for p in programs:
        ns = parse_korral(korral_argv(p.command))
        assert ns._name == "worker"
        assert ns.broker_backend == ENV["KORRAL_BROKER_BACKEND"]
        assert ns.redis_url == ENV["KORRAL_REDIS_URL"]
        assert ns.partition is None  # a scaled group must not share a pin
        names.add(ns.name)
        assert p.autorestart and p.stopasgroup and p.killasgroup, p.name
    assert names == {f"{platform.node()}-{i}" for i in range(3)}


@pytest.mark.parametrize("missing", ["KORRAL_BROKER_BACKEND", "KORRAL_REDIS_URL", "KORRAL_WORKERS"])
def test_worker_host_refuses_to_start_without_an_address(missing):
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(SupervisorRefused, match=re.escape(f"contains names ('ENV_{missing}')")):
        supervisor_programs(WORKER_HOST, env)


def test_worker_host_documented_variables_are_read_by_the_worker():
    text = WORKER_HOST.read_text()
    documented = set(re.findall(r"export (KORRAL_[A-Z_]+)=", text))
    assert {"KORRAL_CURVE_SECRET", "KORRAL_CURVE_SERVER", "KORRAL_BROKER_BACKEND", "KORRAL_REDIS_URL"} <= documented
    for var in documented - {"KORRAL_WORKERS"}:  # KORRAL_WORKERS is supervisord's numprocs
        assert env_var_is_read(["worker"], var), f"korral worker does not read {var}"


def test_one_host_supervisord_programs_are_korral_command_lines():
    """deploy/supervisord.conf (the one-host example): every korral program parses with the real flags."""
    programs = supervisor_programs(DEPLOY / "supervisord.conf", {})
    roles = {}
    for p in programs:
        if Path(shlex.split(p.command)[0]).name == "korral":
            roles[p.name] = parse_korral(korral_argv(p.command))._name
    assert sorted(set(roles.values())) == ["broker", "rmproxy", "worker"], roles


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_worker_host_runs_workers_that_join_a_remote_broker(tmp_path, redis_server):
    """The real file, with its /tmp paths moved into tmp_path, joins two workers to a broker."""
    fe, be = free_ports(2)
    backend = f"tcp://127.0.0.1:{be}"
    broker_log = open(tmp_path / "broker.log", "ab")
    broker = subprocess.Popen([sys.executable, "-m", "common.cli", "broker", "--frontend", f"tcp://127.0.0.1:{fe}",
                               "--backend", backend, "--redis-url", redis_server.url],
                              stdout=broker_log, stderr=broker_log, cwd=REPO, start_new_session=True,
                              env={k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")})
    broker_log.close()
    conf = tmp_path / "worker-host.conf"
    conf.write_text(WORKER_HOST.read_text().replace("/tmp/", f"{tmp_path}/").replace("%(here)s/..", str(REPO)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
    env.update(KORRAL_BROKER_BACKEND=backend, KORRAL_REDIS_URL=redis_server.url, KORRAL_WORKERS="2")
    supervisord = subprocess.Popen([str(REPO / ".venv/bin/supervisord"), "-n", "-c", str(conf)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[int] = []
    try:
        want = {f"worker {platform.node()}-{i} ready" for i in range(2)}

        def joined() -> bool:
            nonlocal workers
            workers = _children(supervisord.pid) or workers
            return all(w in (tmp_path / "broker.log").read_text(errors="replace") for w in want)

        wait_until(joined, 30, "both workers joined the broker", lambda: "\n".join(
            p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log")), interval=0.2)
        assert len(workers) == 2
    finally:
        stop_process(supervisord, 20)  # supervisord stops its programs, then exits
        stop_process(broker, 10)
        left = [pid for pid in workers if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"workers left running after supervisord stopped: {left}"
