"""Helpers of the deployment tests: read compose files, interpolate, parse korral command lines.

No Docker engine runs where the tests run, so the compose file is checked the way
Compose would read it (YAML with merge keys, ``${VAR:-default}`` interpolation) and each
service's command is parsed by the real ``korral`` argument parsers, with the service's
environment in place, exactly as the container's entrypoint would see it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
from pathlib import Path
from typing import Iterator, Mapping

import yaml

from common.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"

_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<dollar>\$))")


def interpolate(value, env: Mapping[str, str]):
    """Compose's variable substitution on every string of value: ``${V}``, ``${V:-d}``, ``${V-d}``, ``$$``.

    ``${V:?msg}`` raises ``KeyError`` when V is unset or empty, as Compose refuses to start.
    """
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group("dollar"):
            return "$"
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        present = name in env and (env[name] != "" or op in ("-", "?"))
        if op in (":?", "?") and not present:
            raise KeyError(f"${{{name}}} is required: {arg}")
        if present:
            return env[name]
        return arg if op in (":-", "-") else ""

    return _VAR.sub(sub, value)


def load_compose(path: Path = COMPOSE_FILE, env: Mapping[str, str] | None = None) -> dict:
    """The compose file as Compose sees it: YAML (merge keys resolved), then interpolated."""
    raw = yaml.safe_load(path.read_text())
    return interpolate(raw, env or {})


def korral_services(compose: dict) -> dict[str, dict]:
    """Services that run the Korral image (built from deploy/Dockerfile): their command is a korral argv."""
    return {name: svc for name, svc in compose["services"].items()
            if (svc.get("build") or {}).get("dockerfile") == "deploy/Dockerfile"}


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ holds exactly env for KORRAL_* (others untouched) inside the block."""
    saved = dict(os.environ)
    try:
        for key in [k for k in os.environ if k.startswith("KORRAL_")]:
            del os.environ[key]
        os.environ.update({k: str(v) for k, v in env.items()})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class ArgvError(Exception):
    """The korral parser refused an argv; holds argparse's message."""


def parse_korral(argv: list[str], env: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Parse ``korral ARGV`` with the real parsers (from common.cli.build_parser) under env."""
    with environment(env or {}):
        try:
            parser = build_parser(argv)
        except ValueError as exc:  # a flag default converted from the environment at configure time
            raise ArgvError(f"korral {' '.join(argv)}: bad environment value: {exc}") from None
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                return parser.parse_args(argv)
        except SystemExit:
            raise ArgvError(f"korral {' '.join(argv)}: {err.getvalue().strip()}") from None


def env_var_is_read(argv: list[str], var: str) -> bool:
    """True when setting var changes what ``korral ARGV`` parses (the process reads it via a flag default)."""
    base = vars(parse_korral(argv, {}))
    for sentinel in ("korral-sentinel-value", "4242"):
        try:
            parsed = vars(parse_korral(argv, {var: sentinel}))
        except ArgvError:
            continue  # e.g. a float flag refuses the string sentinel; the number is tried next
        if parsed != base:
            return True
    return False


def host_port(address: str) -> tuple[str, int]:
    """``tcp://h:p``, ``h:p``, ``redis://[user:pass@]h:p/db`` -> (h, p)."""
    rest = address.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


def published(service: dict) -> dict[int, str]:
    """Container port -> host binding address of a service's ``ports`` (``[ip:]host:container``)."""
    result = {}
    for spec in service.get("ports", []):
        parts = spec.split("/")[0].split(":")
        ip = parts[0] if len(parts) == 3 else "0.0.0.0"
        result[int(parts[-1])] = ip
    return result


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, with line continuations joined and comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        logical.append(current)
        current = ""
    out = []
    for line in logical:
        word, _, args = line.partition(" ")
        out.append((word.upper(), args.strip()))
    return out
