"""deploy/docker-compose.yml run for real, without Docker: each service in its own network namespace.

Compose gives every service a host name on a private network; here every service gets a
namespace of ``tests/e2e/netns.py``'s lab, and an /etc/hosts naming the others (redis,
broker, rmproxy). Each service runs its compose ``command`` through the image's entrypoint
(``korral``, or redis-server with the official image's ``--protected-mode no``) under exactly
its compose ``environment``, in ``depends_on`` order, gated by its own ``healthcheck`` command.
A Redis password and CURVE are on. Then an RM registers through the rmproxy service and gets
an allocation from one of the ``worker`` replicas. What is not emulated: images, volumes,
published ports (the keys' paths are given directly instead of under /keys).
"""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.conftest import wait_until
from tests.deploy.compose import load_compose
from tests.e2e.netns import NetLab, tails, unavailable_reason
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"needs network namespaces: {REASON}")
TOOLS = {"python": sys.executable, "redis-cli": shutil.which("redis-cli") or "/usr/bin/redis-cli",
         "redis-server": shutil.which("redis-server") or "/usr/bin/redis-server"}


def entrypoint(service: dict) -> list[str]:
    """The argv a container of this service would run."""
    command = list(service["command"])
    if service.get("build"):  # the Korral image: ENTRYPOINT ["korral"]
        return [sys.executable, "-m", "common.cli", *command]
    assert command[0] == "redis-server", command
    # the official redis image's entrypoint adds this when no config file is given
    return [TOOLS["redis-server"], "--protected-mode", "no", *command[1:]]


def healthcheck_argv(service: dict) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD", test
    return [TOOLS.get(test[1], test[1]), *test[2:]]


def wait_healthy(lab: NetLab, host, name: str, service: dict, procs, timeout: float = 30.0) -> None:
    """Until the service's own healthcheck command passes (run in its host, under its environment)."""
    argv = healthcheck_argv(service)
    env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
    last = None

    def healthy() -> bool:
        nonlocal last
        last = lab.run(host, argv, timeout=10, env=env)
        return last.returncode == 0 and "NOAUTH" not in last.stdout

    wait_until(healthy, timeout, f"{name} healthy", lambda: f"{last.stdout}{last.stderr}\n{tails(procs)}",
               interval=0.3)


def test_compose_services_run_as_wired(tmp_path, korral):
    keys = tmp_path / "keys"
    made = korral("keys", "--out", str(keys), "--name", "broker", "--name", "peer")
    assert made.returncode == 0, made.stderr
    (keys / "allowed").mkdir()
    shutil.copy(keys / "peer.key", keys / "allowed" / "peer.key")
    compose = load_compose(env={
        "KORRAL_REDIS_PASSWORD": "c0mp0se-pw",
        "KORRAL_CURVE_BROKER_SECRET": str(keys / "broker.key_secret"),
        "KORRAL_CURVE_ALLOWED": str(keys / "allowed"),
        "KORRAL_CURVE_SECRET": str(keys / "peer.key_secret"),
        "KORRAL_CURVE_SERVER": str(keys / "broker.key"),
    })
    services = compose["services"]
    replicas = services["worker"]["deploy"]["replicas"]
    lab = NetLab(tmp_path / "logs")
    try:
        hosts = {name: lab.add_host(name) for name in ("redis", "broker", "rmproxy")}
        worker_hosts = [lab.add_host(f"worker-{i + 1}") for i in range(replicas)]
        rm_host = lab.add_host("rm")
        lab.set_hosts({name: h.ip for name, h in hosts.items()})
        procs = []

        def start(name: str, host, service: dict) -> None:
            env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
            data = tmp_path / f"{name}-data"
            data.mkdir()
            argv = entrypoint(service)
            if not service.get("build"):
                argv += ["--dir", str(data)]  # the redis image's WORKDIR /data
            procs.append(lab.start(host, name, argv, env=env))

        start("redis", hosts["redis"], services["redis"])
        wait_healthy(lab, hosts["redis"], "redis", services["redis"], procs)
        start("broker", hosts["broker"], services["broker"])
        start("rmproxy", hosts["rmproxy"], services["rmproxy"])
        for i, host in enumerate(worker_hosts):
            start(f"worker-{i + 1}", host, services["worker"])
        wait_healthy(lab, hosts["rmproxy"], "rmproxy", services["rmproxy"], procs)

        rest = f"http://{hosts['rmproxy'].ip}:9080/ws/v1/korral/stack"

        def workers() -> list[dict]:
            status, body = lab.http_get_json(rm_host, rest)
            return (body or {}).get("cluster", {}).get("workers", []) if status == 200 else []

        wait_until(lambda: len(workers()) == replicas, 20, f"{replicas} workers joined", interval=0.3)

        rm = SIRM.in_namespace(lab, rm_host, f"{hosts['rmproxy'].ip}:9090", "rm-compose")
        try:
            rm.register()
            rm.open()
            rm.nodes(node("node-1", memory=1000, vcore=1000))
            rm.wait_for("node", lambda r: r.accepted, timeout=15)
            rm.apps(app("app-1"))
            rm.wait_for("application", lambda r: r.accepted, timeout=15)
            rm.asks(ask("ask-1", "app-1", memory=10, vcore=1))
            resp = rm.wait_for("allocation", lambda r: r.new, timeout=15)
            assert [a.allocationKey for a in resp.new] == ["ask-1"]
            # one replica owns the partition (the broker's status reaches rmproxy with its heartbeats)
            wait_until(lambda: [w["partition"] for w in workers()].count("rm-compose/default") == 1, 5,
                       "one replica owning rm-compose/default", workers, interval=0.3)
        finally:
            rm.close()
        for p in procs:
            assert p.alive(), f"{p.name} died:\n{p.tail()}"
    finally:
        problems = lab.close()
    assert problems == []
