"""The supervisord configs: the template `korral up` renders and the one-host example in deploy/.

Every korral command line in them must be accepted by the real CLI parser of that process,
so a renamed flag breaks here rather than at `korral up` time.
"""

from __future__ import annotations

import argparse
import configparser
import shlex
from pathlib import Path

import pytest

from common import cli
from common.cli.stack import up as stack
from common.cli.stack.down import StackInfo

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def programs(text: str) -> dict[str, str]:
    parser = configparser.RawConfigParser(interpolation=None, strict=True)
    parser.read_string(text)
    return {s.split(":", 1)[1]: parser.get(s, "command") for s in parser.sections() if s.startswith("program:")}


def korral_argv(command: str) -> list[str]:
    """The korral arguments of a program's command line (after `-m common.cli` or `korral`)."""
    words = shlex.split(command.replace("%(process_num)d", "0"))
    if "common.cli" in words:
        return words[words.index("common.cli") + 1:]
    return words[1:]


def parse_with_the_real_cli(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser(argv).parse_args(argv)


def rendered(tmp_path: Path, redis_url: str | None) -> str:
    opts = stack.UpOptions(
        state_dir=tmp_path, si_address="127.0.0.1:7001", rest_address="127.0.0.1:7002", workers=3,
        redis_url=redis_url, redis_port=0 if redis_url else 7003,
        broker_frontend="tcp://127.0.0.1:7004", broker_backend="tcp://127.0.0.1:7005",
        log_level="debug", timeout=10)
    info = StackInfo(state_dir=str(tmp_path), config_path=str(tmp_path / "supervisord.conf"),
                     socket_path=str(tmp_path / "s.sock"), pidfile=str(tmp_path / "s.pid"),
                     logs_dir=str(tmp_path / "logs"), addresses={}, workers=3, redis_embedded=not redis_url)
    return stack.render_config(opts, info, python="/opt/py/bin/python")


def test_the_rendered_config_runs_every_process_with_the_chosen_addresses(tmp_path):
    progs = programs(rendered(tmp_path, None))
    assert set(progs) == {"redis", "broker", "worker", "rmproxy"}
    broker = parse_with_the_real_cli(korral_argv(progs["broker"]))
    assert (broker.broker_frontend, broker.broker_backend) == ("tcp://127.0.0.1:7004", "tcp://127.0.0.1:7005")
    assert broker.redis_url == "redis://127.0.0.1:7003/0"
    rmproxy = parse_with_the_real_cli(korral_argv(progs["rmproxy"]))
    assert (rmproxy.si_address, rmproxy.rest_address) == ("127.0.0.1:7001", "127.0.0.1:7002")
    assert rmproxy.broker_frontend == "tcp://127.0.0.1:7004"
    worker = parse_with_the_real_cli(korral_argv(progs["worker"]))
    assert (worker.name, worker.broker_backend) == ("worker-0", "tcp://127.0.0.1:7005")
    assert "--port 7003" in progs["redis"] and "--bind 127.0.0.1" in progs["redis"]
    text = rendered(tmp_path, None)
    assert "numprocs=3" in text and 'KORRAL_LOG_LEVEL="debug"' in text


def test_an_external_redis_means_no_redis_program(tmp_path):
    progs = programs(rendered(tmp_path, "redis://:p%40ss@10.0.0.9:6380/2"))
    assert "redis" not in progs
    broker = parse_with_the_real_cli(korral_argv(progs["broker"].replace("%%", "%")))
    assert broker.redis_url == "redis://:p%40ss@10.0.0.9:6380/2"  # '%' escaped for supervisord


def test_the_example_config_uses_the_default_addresses():
    progs = programs((DEPLOY / "supervisord.conf").read_text())
    assert set(progs) == {"redis", "broker", "worker", "rmproxy"}
    broker = parse_with_the_real_cli(korral_argv(progs["broker"]))
    assert (broker.broker_frontend, broker.broker_backend) == ("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556")
    rmproxy = parse_with_the_real_cli(korral_argv(progs["rmproxy"]))
    assert (rmproxy.si_address, rmproxy.rest_address, rmproxy.broker_frontend) == (
        "127.0.0.1:9090", "127.0.0.1:9080", "tcp://127.0.0.1:5555")
    worker = parse_with_the_real_cli(korral_argv(progs["worker"]))
    assert worker.broker_backend == "tcp://127.0.0.1:5556"
    for name in ("broker", "rmproxy", "worker"):
        assert parse_with_the_real_cli(korral_argv(progs[name])).redis_url == "redis://127.0.0.1:6379/0"
    assert "--port 6379" in progs["redis"]


def test_a_broken_template_names_itself(tmp_path, monkeypatch):
    (tmp_path / "supervisord.conf.tmpl").write_text("command=${no_such_value}\n")
    (tmp_path / "redis.program.tmpl").write_text("")
    monkeypatch.setenv("KORRAL_DEPLOY_DIR", str(tmp_path))
    with pytest.raises(stack.StackError, match="supervisord.conf.tmpl is broken.*no_such_value"):
        rendered(tmp_path, "redis://127.0.0.1:1/0")


def test_a_missing_template_dir_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("KORRAL_DEPLOY_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(stack.StackError, match="KORRAL_DEPLOY_DIR"):
        stack.deploy_dir()
