"""deploy/docker-compose.yml and deploy/Dockerfile, checked without a Docker engine.

- the compose file parses and matches a JSON schema of the Compose subset it uses;
- every Korral service's command is a real ``korral`` subcommand whose flags exist, parsed by
  the real parsers with the service's environment, and every KORRAL_* variable it sets is one
  the process reads;
- addresses agree: what rmproxy and workers connect to is what the broker binds, what is
  published is what is bound, healthchecks probe the right port and path;
- the Dockerfile's COPY sources exist and are not excluded by .dockerignore.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.deploy import minischema
from tests.deploy.compose import (COMPOSE_FILE, DEPLOY, DOCKERFILE, REPO, ArgvError, dockerfile_instructions,
                                  env_var_is_read, host_port, interpolate, korral_services, load_compose,
                                  parse_korral, published)

SCHEMA = json.loads((Path(__file__).parent / "compose_schema.json").read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def parsed(compose) -> dict:
    """Service name -> argparse namespace of its command under its environment."""
    return {name: parse_korral(svc["command"], svc.get("environment", {}))
            for name, svc in korral_services(compose).items()}


# --- the file itself -------------------------------------------------------------------------

def test_services_present(compose):
    assert set(compose["services"]) == {"redis", "broker", "rmproxy", "worker"}
    assert set(korral_services(compose)) == {"broker", "rmproxy", "worker"}


def test_schema_minischema(compose):
    assert minischema.validate(compose, SCHEMA) == []


def test_schema_jsonschema(compose):
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema is not installed in this virtualenv; minischema covers the same schema")
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(compose)]
    assert errors == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["services"]["rmproxy"].update(healtcheck={}), "unexpected key 'healtcheck'"),
    (lambda c: c["services"]["broker"].update(restart="sometimes"), "'sometimes' is not one of"),
    (lambda c: c["services"]["worker"].update(command="worker"), "expected array"),
    (lambda c: c["services"]["worker"]["depends_on"]["redis"].update(condition="up"), "'up' is not one of"),
    (lambda c: c["services"]["redis"].pop("image"), "matches none of anyOf"),
    (lambda c: c["services"]["rmproxy"]["healthcheck"].update(interval="5 seconds"), "does not match"),
])
def test_schema_rejects_mistakes(mutate, expected):
    """The schema is strict enough to catch typos and bad values (so the checks above can fail)."""
    broken = load_compose()
    mutate(broken)
    errors = minischema.validate(broken, SCHEMA)
    assert any(expected in e for e in errors), errors


def test_interpolation_overrides():
    c = load_compose(env={"KORRAL_PUBLISH_ADDRESS": "10.1.2.3", "KORRAL_RM_TIMEOUT": "30"})
    assert published(c["services"]["broker"]) == {5555: "10.1.2.3", 5556: "10.1.2.3"}
    assert c["services"]["rmproxy"]["environment"]["KORRAL_RM_TIMEOUT"] == "30"
    assert interpolate("a$${B}c${X:-d}${Y}", {}) == "a${B}cd"
    with pytest.raises(KeyError):
        interpolate("${NEED:?set it}", {})


def test_restart_policies(compose):
    for name, svc in compose["services"].items():
        assert svc.get("restart") in ("always", "unless-stopped", "on-failure"), name


def test_depends_on_known_services(compose):
    for name, svc in compose["services"].items():
        for dep, cond in svc.get("depends_on", {}).items():
            assert dep in compose["services"], f"{name} depends on unknown {dep}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in compose["services"][dep], f"{name} waits for {dep}'s health, it has none"


# --- commands and environment -------------------------------------------------------------------

def test_commands_parse(compose, parsed):
    expected = {"broker": "broker", "rmproxy": "rmproxy", "worker": "worker"}
    assert {name: ns._name for name, ns in parsed.items()} == expected


def test_parser_refuses_unknown_flag():
    with pytest.raises(ArgvError, match="--no-such-flag"):
        parse_korral(["worker", "--no-such-flag"])


@pytest.mark.parametrize("service", ["broker", "rmproxy", "worker"])
def test_every_env_var_is_read(compose, service):
    svc = compose["services"][service]
    unread = [var for var in svc.get("environment", {}) if not env_var_is_read(svc["command"], var)]
    assert unread == [], f"{service} sets variables its process does not read: {unread}"


def test_env_check_catches_unread_var():
    assert not env_var_is_read(["worker"], "KORRAL_SI_ADDRESS")  # a rmproxy variable
    assert env_var_is_read(["worker"], "KORRAL_BROKER_BACKEND")


def test_env_values_reach_the_args(parsed):
    b, r, w = parsed["broker"], parsed["rmproxy"], parsed["worker"]
    assert (b.broker_frontend, b.broker_backend) == ("tcp://0.0.0.0:5555", "tcp://0.0.0.0:5556")
    assert (r.si_address, r.rest_address) == ("0.0.0.0:9090", "0.0.0.0:9080")
    assert r.rm_timeout == 300.0
    assert w.broker_backend == "tcp://broker:5556"
    # CURVE and TLS stay off by default: the empty variables mean "not given".
    assert b.curve_secret is None and w.curve_secret is None and r.tls_cert is None


def test_curve_settings_reach_the_args():
    env = {"KORRAL_CURVE_BROKER_SECRET": "/keys/broker.key_secret", "KORRAL_CURVE_ALLOWED": "/keys/allowed",
           "KORRAL_CURVE_SECRET": "/keys/peer.key_secret", "KORRAL_CURVE_SERVER": "/keys/broker.key"}
    c = load_compose(env=env)
    ns = {n: parse_korral(s["command"], s["environment"]) for n, s in korral_services(c).items()}
    assert (ns["broker"].curve_secret, ns["broker"].curve_allowed) == ("/keys/broker.key_secret", "/keys/allowed")
    for name in ("rmproxy", "worker"):
        assert (ns[name].curve_secret, ns[name].curve_server) == ("/keys/peer.key_secret", "/keys/broker.key")
    for name, svc in korral_services(c).items():
        assert "./keys:/keys:ro" in svc["volumes"], f"{name} does not mount the keys"


# --- addresses and ports ---------------------------------------------------------------------------

def test_listeners_bind_all_container_interfaces(parsed):
    """Inside a container 127.0.0.1 is unreachable from the other services."""
    for name, addr in (("broker", parsed["broker"].broker_frontend), ("broker", parsed["broker"].broker_backend),
                       ("rmproxy", parsed["rmproxy"].si_address), ("rmproxy", parsed["rmproxy"].rest_address)):
        assert host_port(addr)[0] in ("0.0.0.0", "*"), f"{name} binds {addr}"


def test_connections_match_listeners(compose, parsed):
    b = parsed["broker"]
    assert host_port(parsed["rmproxy"].broker_frontend) == ("broker", host_port(b.broker_frontend)[1])
    assert host_port(parsed["worker"].broker_backend) == ("broker", host_port(b.broker_backend)[1])
    redis_port = 6379
    command = compose["services"]["redis"]["command"]
    if "--port" in command:
        redis_port = int(command[command.index("--port") + 1])
    for name, ns in parsed.items():
        assert host_port(ns.redis_url) == ("redis", redis_port), f"{name}: {ns.redis_url}"


def test_published_ports_are_bound(compose, parsed):
    b, r = parsed["broker"], parsed["rmproxy"]
    assert set(published(compose["services"]["broker"])) == {host_port(b.broker_frontend)[1],
                                                             host_port(b.broker_backend)[1]}
    assert set(published(compose["services"]["rmproxy"])) == {host_port(r.si_address)[1],
                                                              host_port(r.rest_address)[1]}
    assert set(published(compose["services"]["redis"])) == {6379}
    for name in ("broker", "rmproxy", "redis"):
        assert set(published(compose["services"][name]).values()) == {"127.0.0.1"}, \
            f"{name} is published beyond loopback by default (plaintext must stay local)"


def test_redis_password_reaches_redis_and_every_url():
    from redis.connection import parse_url

    plain = load_compose()
    for name, svc in korral_services(plain).items():
        assert parse_url(svc["environment"]["KORRAL_REDIS_URL"]).get("password") is None, name
    c = load_compose(env={"KORRAL_REDIS_PASSWORD": "s3cret"})
    redis_svc = c["services"]["redis"]
    assert redis_svc["command"][redis_svc["command"].index("--requirepass") + 1] == "s3cret"
    assert redis_svc["environment"]["REDISCLI_AUTH"] == "s3cret"
    for name, svc in korral_services(c).items():
        ns = parse_korral(svc["command"], svc["environment"])
        assert parse_url(ns.redis_url)["password"] == "s3cret", name


def test_workers_on_an_extra_host_point_at_the_main_host():
    c = load_compose(env={"KORRAL_BROKER_HOST": "10.0.0.5", "KORRAL_REDIS_HOST": "10.0.0.6"})
    w = c["services"]["worker"]
    ns = parse_korral(w["command"], w["environment"])
    assert host_port(ns.broker_backend) == ("10.0.0.5", 5556)
    assert host_port(ns.redis_url) == ("10.0.0.6", 6379)
    assert published(c["services"]["broker"]).keys() >= {5556}  # what they connect to is published
    assert published(c["services"]["redis"]).keys() >= {6379}


def test_worker_is_scalable(compose):
    w = compose["services"]["worker"]
    assert "ports" not in w and "container_name" not in w, "fixed ports or names break --scale worker=N"
    assert "KORRAL_WORKER_NAME" not in w["environment"], "replicas would share one name"
    assert "KORRAL_WORKER_PARTITION" not in w["environment"], "replicas would share one pin"


def test_healthchecks(compose, parsed):
    redis_test = compose["services"]["redis"]["healthcheck"]["test"]
    assert redis_test == ["CMD", "redis-cli", "ping"]
    test = compose["services"]["rmproxy"]["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python"
    rest_port = host_port(parsed["rmproxy"].rest_address)[1]
    assert f"http://127.0.0.1:{rest_port}/ws/v1/korral/ready" in test[-1]
    compile(test[-1], "<healthcheck>", "exec")  # the probe is valid Python


def test_rmproxy_ready_route_exists():
    """The healthcheck's path is a route of the real REST app."""
    from unittest import mock

    from rmproxy.webapi import build_app

    app = build_app(mock.MagicMock(name="proxy"))  # only registers handlers; none is called
    routes = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert "/ws/v1/korral/ready" in routes


# --- Dockerfile ------------------------------------------------------------------------------------

def _context(compose) -> Path:
    build = compose["services"]["broker"]["build"]
    return (COMPOSE_FILE.parent / build["context"]).resolve()


def test_build_context_and_dockerfile(compose):
    ctx = _context(compose)
    assert ctx == REPO
    for name, svc in korral_services(compose).items():
        assert (ctx / svc["build"]["dockerfile"]).resolve() == DOCKERFILE, name


def test_dockerfile_shape():
    ins = dockerfile_instructions(DOCKERFILE.read_text())
    assert ins[0] == ("FROM", "python:3.11-slim")
    entry = [args for word, args in ins if word == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["korral"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "korral" in scripts
    assert any(word == "RUN" and "pip install -c constraints.txt ." in args for word, args in ins)
    assert any(word == "USER" and args != "root" for word, args in ins), "the image should not run as root"


def _dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def _ignored(rel: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p.split("/")[-1], bare) for p in prefixes):
            return True
    return False


def test_dockerfile_copy_sources_exist_and_are_sent():
    patterns = _dockerignore_patterns()
    sources = []
    for word, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if word == "COPY":
            parts = [a for a in args.split() if not a.startswith("--")]
            sources += parts[:-1]
    assert sources, "no COPY in the Dockerfile"
    for src in sources:
        assert (REPO / src).exists(), f"COPY {src}: not in the build context"
        assert not _ignored(src, patterns), f"COPY {src}: excluded by .dockerignore"
    # Everything the package install needs is copied (setuptools packages.find include list).
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pkg in include:
        assert pkg.rstrip("*") in sources, f"package {pkg} is not copied into the image"


def test_dockerignore_keeps_secrets_and_state_out():
    patterns = _dockerignore_patterns()
    for rel in (".venv", ".git", "keys/broker.key_secret", "x/worker.key_secret", ".state/demo"):
        assert _ignored(rel, patterns), rel
    assert not _ignored("common/cli/__init__.py", patterns)


def test_docker_compose_config_when_available(tmp_path):
    """`docker compose config` (no engine needed) agrees, where the compose plugin exists."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker CLI not installed")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=20)
    if probe.returncode != 0:
        pytest.skip("the docker compose plugin is not installed here (`docker compose version` fails)")
    result = subprocess.run([docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
                            capture_output=True, text=True, timeout=60, cwd=DEPLOY)
    assert result.returncode == 0, result.stderr
