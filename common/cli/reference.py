"""Write the CLI reference (docs/cli.md) from the real argparse parsers, so it cannot drift.

``python -m common.cli.reference > docs/cli.md``; tests/common/test_cli_reference.py fails
when the committed file differs from what this prints.
"""

from __future__ import annotations

import argparse
import sys

from common.cli import SUBCOMMANDS, build_parser

__all__ = ["render"]


def _rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        flags = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest.upper()}`"
        if action.metavar and action.option_strings:
            flags += f" `{action.metavar}`"
        help_text = (action.help or "").replace("|", "\\|").replace("\n", " ")
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            help_text += f" (one of: {', '.join(map(str, action.choices))})"
        rows.append(f"| {flags} | {help_text} |")
    return rows


def _section(title: str, parser: argparse.ArgumentParser) -> list[str]:
    out = [f"## `{title}`", "", parser.description or "", ""]
    rows = _rows(parser)
    if rows:
        out += ["| flag | meaning |", "| --- | --- |", *rows, ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _section(f"{title} {name}", sub)
    return out


def render() -> str:
    lines = ["# The `korral` command", "",
             "Generated from the argparse parsers by `python -m common.cli.reference`; do not edit by hand.",
             "Every flag also reads the environment variable named in brackets, where there is one.", ""]
    for name in SUBCOMMANDS:
        parser = build_parser([name])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        lines += _section(f"korral {name}", sub)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
