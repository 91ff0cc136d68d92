"""docs/cli.md is what the real parsers say: every subcommand and flag, none invented."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_docs_cli_is_current():
    env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
    out = subprocess.run([sys.executable, "-m", "common.cli.reference"], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=60, check=True).stdout
    assert out == (ROOT / "docs" / "cli.md").read_text(), (
        "docs/cli.md is stale: run `python -m common.cli.reference > docs/cli.md`")
