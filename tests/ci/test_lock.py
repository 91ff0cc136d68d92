"""constraints.txt and `make lock` (.ci/lock.py): plain exact pins of everything korral[test] needs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)")


def pins(text: str) -> dict[str, str]:
    """name -> version of each pin; fails on any line that is not a comment or a plain pin."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.fullmatch(line)
        assert match, f"line {number} is not a plain name==version pin: {line!r}"
        found[canonicalize_name(match["name"])] = match["version"]
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]


def test_every_line_is_a_comment_or_a_plain_pin():
    text = (REPO / "constraints.txt").read_text()
    assert "://" not in text and "@" not in text  # no index, URL or local path
    assert "korral" not in pins(text)


@pytest.mark.parametrize("requirement", declared(), ids=str)
def test_every_declared_dependency_is_pinned_within_its_range(requirement):
    locked = pins((REPO / "constraints.txt").read_text())
    name = canonicalize_name(requirement.name)
    assert name in locked, f"{requirement.name} is not in constraints.txt: run make lock"
    assert requirement.specifier.contains(locked[name], prereleases=True), (
        f"constraints.txt pins {requirement.name}=={locked[name]}, outside pyproject.toml's {requirement}: run make lock"
    )


def test_lock_writes_only_plain_pins_of_the_installed_versions():
    result = subprocess.run([sys.executable, str(REPO / ".ci" / "lock.py")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    written = pins(result.stdout)
    assert "://" not in result.stdout and "korral" not in written
    assert written["pyyaml"] == __import__("yaml").__version__
    assert {canonicalize_name(r.name) for r in declared()} <= set(written)
