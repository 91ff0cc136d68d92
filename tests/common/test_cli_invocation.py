"""The commands Korral prints for the user to run next are runnable exactly as printed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from common.cli import invocation

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "korral"


def test_korral_when_this_installation_is_on_path(monkeypatch):
    monkeypatch.setenv("PATH", f"{SCRIPT.parent}{os.pathsep}/usr/bin:/bin")
    assert invocation() == "korral"


def test_the_scripts_path_when_korral_is_not_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(REPO)
    printed = invocation()
    assert printed == os.path.relpath(SCRIPT) and printed.endswith("bin/korral")
    monkeypatch.chdir(tmp_path)  # outside the checkout: an absolute path
    assert invocation() == str(SCRIPT)


def test_the_printed_command_runs_as_printed(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(REPO)
    result = subprocess.run(shlex.split(invocation()) + ["--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0 and "korral" in result.stdout
