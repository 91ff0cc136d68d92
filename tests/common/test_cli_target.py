"""Which stack a client command talks to (common/cli/target.py): an address given wins, then
--state-dir, then $KORRAL_REST_ADDRESS, then the stack of $KORRAL_STATE_DIR, then the default."""

from __future__ import annotations

import argparse

import pytest

from common.cli import target
from common.cli.stack.down import save_stack
from tests.stack.test_stack_records import make_info


def parse(argv: list[str], si: bool = False) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    target.add_flags(parser, "where", si=si)
    return parser.parse_args(argv)


@pytest.fixture
def stacks(tmp_path, monkeypatch):
    for var in ("KORRAL_REST_ADDRESS", "KORRAL_SI_ADDRESS", "KORRAL_STATE_DIR"):
        monkeypatch.delenv(var, raising=False)
    one, two = tmp_path / "one", tmp_path / "two"
    save_stack(make_info(one))  # rest 127.0.0.1:2, si 127.0.0.1:1
    wildcard = make_info(two)
    wildcard.addresses.update(rest="0.0.0.0:7", si="[::]:8")
    save_stack(wildcard)
    return one, two, monkeypatch


@pytest.mark.parametrize("argv,env,expected", [
    ([], {}, "127.0.0.1:9080"),
    (["--state-dir", "ONE"], {}, "127.0.0.1:2"),
    (["--state-dir", "TWO"], {}, "127.0.0.1:7"),  # a stack on every interface: reached on loopback
    (["--state-dir", "ONE", "--rest-address", "h:9"], {}, "h:9"),  # an address given wins
    ([], {"KORRAL_REST_ADDRESS": "env:1"}, "env:1"),
    ([], {"KORRAL_STATE_DIR": "ONE"}, "127.0.0.1:2"),
    ([], {"KORRAL_STATE_DIR": "ONE", "KORRAL_REST_ADDRESS": "env:1"}, "env:1"),
    (["--state-dir", "ONE"], {"KORRAL_REST_ADDRESS": "env:1"}, "127.0.0.1:2"),  # the command line wins
    (["--rest-address", "h:9"], {"KORRAL_STATE_DIR": "ONE"}, "h:9"),
], ids=["default", "state dir", "wildcard", "address wins", "env address", "env state dir",
        "env address over env dir", "flag over env", "address flag over env dir"])
def test_the_rest_address_of_a_command(stacks, argv, env, expected):
    one, two, monkeypatch = stacks
    names = {"ONE": str(one), "TWO": str(two)}
    for var, value in env.items():
        monkeypatch.setenv(var, names.get(value, value))
    assert target.rest_address(parse([names.get(a, a) for a in argv])) == expected


def test_the_si_address_comes_from_the_same_stack(stacks):
    one, two, _ = stacks
    assert target.si_address(parse(["--state-dir", str(one)], si=True)) == "127.0.0.1:1"
    assert target.si_address(parse(["--state-dir", str(two)], si=True)) == "[::1]:8"


def test_a_state_dir_without_a_stack_is_named(stacks, tmp_path):
    with pytest.raises(target.TargetError, match=f"no stack in {tmp_path / 'none'}"):
        target.rest_address(parse(["--state-dir", str(tmp_path / "none")]))
