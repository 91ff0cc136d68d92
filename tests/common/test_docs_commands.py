"""Every ``korral`` command printed in the README and the user docs runs as printed: each command
line (code blocks and inline code) is parsed by the real parser, each flag of docs/cli.md is
given to its command with a value, every command's ``--help`` runs, and the commands that need no
stack (``check-config``, ``keys``) are run for real.

How a printed command is read: ``a|b|c`` is one command per alternative (``korral queues | apps``
too), ``[...]`` marks an optional part (kept), ``...`` "more of the same" (dropped), and a
placeholder stands for a value (``FILE``, ``D``, ``APP``): any text will do, except where a
number is wanted (``N``, ``S``), which stand for 1 and 5, or where the flag checks the value's
shape (``HOST:PORT``, ``K=V,...``: ``SHAPED`` gives one). Inline code that is only a command's
name (``korral config apply``, ``korral queues|apps|nodes``) names it: that command must exist.
Quoted output (``korral sim: invalid workload:``) is not a command.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from common.cli import SUBCOMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/cli.md", "docs/rest.md", "docs/testing.md", "docs/benchmarks.md", "docs/sim.md",
        "docs/configuration.md"]
NUMBERS = {"N": "1", "S": "5"}
# placeholders whose flag's type checks the shape of its value: a value of that shape
SHAPED = {"HOST:PORT": "127.0.0.1:6443", "K=V,...": "team=a", "K[=V]:EFFECT,...": "dedicated=x:NoSchedule",
          "NAME=N,...": "blue=2", "BOOL": "true", "D": "15s"}
PLACEHOLDERS = NUMBERS | SHAPED


def printed_commands(doc: str) -> list[tuple[str, str]]:
    """(where, command) of every ``korral`` command line of ``doc``: the lines of its code blocks
    (a trailing ``\\`` continues a line, ``#`` starts a comment) and its inline code spans."""
    text = (ROOT / doc).read_text()
    found: list[tuple[str, str]] = []
    in_block, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            continue
        stripped = line.strip().removeprefix("$ ")
        if not pending and stripped.startswith("korral ") and stripped.split()[1].endswith(":"):
            continue  # quoted output
        if pending or stripped.startswith("korral "):
            start = start if pending else number
            pending += " " + stripped.rstrip("\\")
            if not stripped.endswith("\\"):
                found.append((f"{doc}:{start}", re.sub(r"\s+#.*$", "", pending.strip())))
                pending = ""
    blocks = [m.span() for m in re.finditer(r"```.*?```", text, flags=re.S)]
    for m in re.finditer(r"`(korral [^`]+)`", text):
        if any(a <= m.start() < b for a, b in blocks) or m.group(1).split()[1].endswith(":"):
            continue  # in a code block (read above), or quoted output
        found.append((f"{doc}:{text.count(chr(10), 0, m.start()) + 1}", " ".join(m.group(1).split())))
    return found


def variants(command: str) -> list[list[str]]:
    """The argument lists a printed command stands for (without ``korral``)."""
    tokens = shlex.split(command.replace(" | ", "|"))[1:]
    tokens = [t.strip("[]") for t in tokens if t.strip("[]") not in ("...", "")]
    alternatives = [t.split("|") if "|" in t else [t] for t in tokens]
    count = max((len(a) for a in alternatives), default=1)
    return [[PLACEHOLDERS.get(a[k % len(a)], a[k % len(a)]) for a in alternatives] for k in range(count)]


def parse(argv: list[str]) -> str:
    """"" when the real parser takes ``argv``, else its message. A placeholder (``P``, ``LEVEL``:
    upper case) where a number or one of some choices is wanted stands for one."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        message = err.getvalue().strip().splitlines()[-1] if exc.code else ""
        wrong = re.search(r"invalid (?:int|float) value: '([^']*)'|invalid choice: '([^']*)' \(choose from '([^']*)'",
                          message)
        token = wrong and next((t for t in argv if t.isupper() and t.lower() == (wrong[1] or wrong[2]).lower()), None)
        if token:
            return parse([("1" if wrong[1] else wrong[3]) if t == token else t for t in argv])
        return message
    return ""


PRINTED = [(where, cmd) for doc in DOCS for where, cmd in printed_commands(doc)]


def test_the_docs_print_commands():
    assert len(PRINTED) > 60 and {w.split(":")[0] for w, _ in PRINTED} >= {"README.md", "docs/cli.md"}


def names_a_command(argv: list[str]) -> bool:
    """Whether ``argv`` is only the path of an existing command (a name, not a command line)."""
    parser = build_parser(argv[:1]) if argv else None
    for word in argv:
        parser = _subparsers(parser).get(word) if parser is not None else None
    return parser is not None


@pytest.mark.parametrize("where,command", PRINTED, ids=[f"{w} {c}" for w, c in PRINTED])
def test_every_printed_command_parses(where: str, command: str):
    for argv in variants(command):
        if names_a_command(argv):
            continue
        problem = parse(argv)
        assert not problem, f"{where}: `{command}` does not run as printed: korral {shlex.join(argv)}: {problem}"


def readme_flags() -> list[tuple[str, str, str]]:
    """(where, command, flag as printed) of every flag the README prints under a command: a
    paragraph that starts with a command (``korral down`` flags: ``--timeout S`` ...), or the
    table that follows such a paragraph (``korral up``'s flags)."""
    text = (ROOT / "README.md").read_text()
    found, command, line = [], None, 1
    for block in re.split(r"\n\s*\n", text):
        head = re.match(r"`(korral [a-z-]+)`", block.strip())
        if head:
            command = head.group(1)
        elif not block.lstrip().startswith("|"):
            command = None
        if command:
            for m in re.finditer(r"`(--[^`]+)`", block):
                found.append((f"README.md:{line + block.count(chr(10), 0, m.start())}", command, m.group(1)))
        line += block.count("\n") + 2
    return found


README_FLAGS = readme_flags()


def test_the_readme_prints_the_flags_of_up_down_and_status():
    assert {c for _, c, _ in README_FLAGS} >= {"korral up", "korral down", "korral status"}


@pytest.mark.parametrize("where,command,flag", README_FLAGS, ids=[f"{w} {c} {f}" for w, c, f in README_FLAGS])
def test_every_flag_the_readme_prints_runs_as_printed(where, command, flag):
    for argv in variants(f"{command} {flag}"):
        problem = parse(argv)
        assert not problem, f"{where}: `{flag}` of `{command}` does not run as printed: korral {shlex.join(argv)}: " \
                            f"{problem}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command(path: list[str]) -> argparse.ArgumentParser:
    parser = build_parser(path)
    for name in path:
        parser = _subparsers(parser)[name]
    return parser


def _value(action: argparse.Action, printed: str | None) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:
        return [str(next(iter(action.choices)))]
    if action.type in (int, float):
        return ["1"]
    return [PLACEHOLDERS.get(printed or "", printed or "x")]  # (a number for N or S: a type may check it)


def cli_md_flags() -> list[tuple[list[str], str, str | None]]:
    """(command path, flag, printed value) of every flag row of docs/cli.md."""
    rows, path = [], None
    for line in (ROOT / "docs" / "cli.md").read_text().splitlines():
        if line.startswith("## `korral "):
            path = line.strip("#` ").split()[1:]
        elif path is not None and line.startswith("| `-"):
            printed = re.findall(r"`([^`]+)`", line.split(" | ")[0])  # the flags, then the metavar if any
            value = next((p for p in printed if not p.startswith("-")), None)
            rows.extend((path, flag, value) for flag in printed if flag.startswith("-"))
    return rows


FLAGS = cli_md_flags()


@pytest.mark.parametrize("path,flag,printed", FLAGS, ids=[f"{' '.join(p)} {f}" for p, f, _ in FLAGS])
def test_every_flag_of_the_cli_reference_is_taken_by_its_command(path, flag, printed):
    parser = _command(path)
    positionals = [a for a in parser._actions if not a.option_strings and not isinstance(
        a, (argparse._HelpAction, argparse._SubParsersAction))]
    action = next((a for a in parser._actions if flag in a.option_strings), None)
    assert action is not None, f"docs/cli.md: korral {' '.join(path)} has no flag {flag}"
    args = [v for a in positionals if a.nargs != "?" for v in _value(a, None)]
    required = [v for a in parser._actions if a.required and a.option_strings and a is not action
                for v in [a.option_strings[0], *_value(a, None)]]
    argv = path + args + required + [flag] + _value(action, printed)
    assert not parse(argv), f"korral {shlex.join(argv)}: {parse(argv)}"


def _paths(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
    out = []
    for name, sub in _subparsers(parser).items():
        out.append(prefix + [name])
        out += _paths(sub, prefix + [name])
    return out


HELP = [p for name in SUBCOMMANDS for p in [[name]] + _paths(_command([name]), [name])]


@pytest.mark.parametrize("path", HELP, ids=" ".join)
def test_every_command_prints_its_help(path, capsys):
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0 and f"usage: korral {' '.join(path)}" in capsys.readouterr().out


def test_the_commands_that_need_no_stack_run_as_printed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("partitions: [{name: default, queues: [{name: root}]}]\n")
    (tmp_path / "queues.yaml").write_text((tmp_path / "FILE").read_text())
    runnable = [(w, c) for w, c in PRINTED if c.split()[1] in ("check-config", "keys")
                and not {"-", "FILE|-"} & set(c.split())]
    assert any(c.startswith("korral check-config") for _, c in runnable)
    for where, command in runnable:
        for argv in variants(command):
            if names_a_command(argv):
                continue
            code = main(argv)
            out = capsys.readouterr()
            assert code == 0, f"{where}: korral {shlex.join(argv)} exited {code}: {out.out}{out.err}"
