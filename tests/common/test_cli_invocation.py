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


def _korral_help_after(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``line`` in a shell without korral on PATH, then ``korral --help`` from elsewhere."""
    return subprocess.run(["bash", "-c", f"{line}\ncd /\nkorral --help"], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PATH": "/usr/bin:/bin"})


def test_make_setup_ends_with_the_line_that_puts_korral_on_path():
    done = subprocess.run(["make", "-s", "setup"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    line = last.split("put korral on PATH with: ", 1)[1].split("  (or:", 1)[0]
    result = _korral_help_after(line, Path("/"))
    assert result.returncode == 0 and "korral" in result.stdout, result.stderr


def test_the_readme_line_that_puts_korral_on_path_works_as_written():
    readme = (REPO / "README.md").read_text()
    line = readme.split("Then `", 1)[1].split("`", 1)[0]
    assert line.startswith("export PATH=")
    result = _korral_help_after(line, REPO)
    assert result.returncode == 0 and "korral" in result.stdout, result.stderr
