"""docs/operations.md, docs/kubernetes.md and the deploy READMEs name only flags and variables that exist.

A flag is real when one of the korral subcommands the documents talk about defines it (the
real parsers), or it belongs to the other tools they show (docker compose, redis-server, kubectl). A
KORRAL_* variable is real when a korral process reads it, the compose file interpolates it,
or a deploy file consumes it (KORRAL_WORKERS in worker-host.supervisord.conf).
"""

from __future__ import annotations

import argparse
import re

import pytest

from common.cli import build_parser
from tests.deploy.compose import COMPOSE_FILE, DEPLOY, REPO, env_var_is_read

DOCS = [REPO / "docs" / "operations.md", DEPLOY / "README.md", REPO / "docs" / "kubernetes.md",
        DEPLOY / "kubernetes" / "overlays" / "production" / "secrets" / "README.md"]
COMMANDS = ["broker", "rmproxy", "worker", "keys", "status", "up", "down", "sim", "check-config", "queues", "apps",
            "config", "k8s-fake", "k8s-shim"]
OTHER_TOOLS = {"--build", "--scale", "--no-deps", "--restart",  # docker / docker compose
               "--bind", "--requirepass",  # redis-server
               "--rm", "--image", "--overrides", "--replicas", "--server-side"}  # kubectl


def korral_flags() -> set[str]:
    flags: set[str] = set()

    def collect(parser) -> None:  # with the flags of sub-subcommands (korral config apply ...)
        for action in parser._actions:
            flags.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):  # argparse has no public list of them
                for sub in action.choices.values():
                    collect(sub)

    for cmd in COMMANDS:
        parser = build_parser([cmd])
        collect(next(a for a in parser._actions if a.dest == "command").choices[cmd])
    return flags


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_flags_exist(doc):
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", doc.read_text()))
    unknown = named - korral_flags() - OTHER_TOOLS
    assert unknown == set(), f"{doc.name} names flags no korral command has: {sorted(unknown)}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_variables_exist(doc):
    compose_vars = set(re.findall(r"\$\{(KORRAL_[A-Z_]+)", COMPOSE_FILE.read_text()))
    deploy_vars = set(re.findall(r"%\(ENV_(KORRAL_[A-Z_]+)\)s", (DEPLOY / "worker-host.supervisord.conf").read_text()))
    unknown = []
    for var in sorted(set(re.findall(r"KORRAL_[A-Z_]+", doc.read_text()))):
        if var in compose_vars or var in deploy_vars:
            continue
        if not any(env_var_is_read([cmd], var) for cmd in ("broker", "rmproxy", "worker", "sim")):
            unknown.append(var)
    assert unknown == [], f"{doc.name} names variables nothing reads: {unknown}"
