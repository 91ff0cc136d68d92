"""Which stack a client command talks to: ``--rest-address`` (``--si-address`` for ``korral sim``),
or ``--state-dir`` naming a ``korral up`` stack, whose addresses are read from its ``stack.json``.

An address flag given on the command line wins over the stack's; then ``--state-dir`` given on
the command line; then ``$KORRAL_REST_ADDRESS`` (resp. ``$KORRAL_SI_ADDRESS``); then the stack of
``$KORRAL_STATE_DIR``; then the default address. The environment is read as the flags' defaults
(as every ``korral`` flag reads its variable), so the parsed arguments hold what will be used
unless a stack is named. A stack listening on every interface (``0.0.0.0``) is reached on the
loopback address.
"""

from __future__ import annotations

import argparse
import os

from common import addresses, netutil
from common.restclient import RestError

__all__ = ["add_flags", "rest_address", "si_address", "connect_address", "TargetError"]

_KEYS = {"rest_address": "rest", "si_address": "si"}
STATE_DIR_ENV = "KORRAL_STATE_DIR"


class TargetError(RestError):
    """The stack named by ``--state-dir`` cannot be read; the message says why (a ``RestError``:
    the command cannot reach the REST API)."""


class _Given(argparse.Action):
    """Stores the value and remembers that it was given on the command line, not defaulted."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, "_given", ()))
        namespace._given = given | {self.dest}


def add_flags(parser: argparse.ArgumentParser, help_text: str, *, si: bool = False,
              rest_help: str = "", rest_default: str | None = None) -> None:
    """``--state-dir`` and the address flags that override it (``--rest-address``; ``--si-address``
    too when ``si``: then ``help_text`` is the SI address's, ``rest_help`` the REST one's).
    ``rest_default`` replaces the default REST address ("" for ``korral sim``: none)."""
    for name in ["si_address", "rest_address"] if si else ["rest_address"]:
        env, default = addresses.DEFAULTS[name]
        if name == "rest_address" and rest_default is not None:
            default = rest_default
        text = rest_help if name == "rest_address" and rest_help else help_text
        parser.add_argument("--" + name.replace("_", "-"), dest=name, action=_Given, metavar="HOST:PORT",
                            default=os.environ.get(env) or default,
                            help=f"{text} [${env}, default {default or 'none'}]")
    names = "SI and REST addresses" if si else "REST address"
    parser.add_argument("--state-dir", dest="state_dir", action=_Given, metavar="DIR",
                        default=os.environ.get(STATE_DIR_ENV) or None,
                        help=f"a stack started by `korral up` in DIR: its {names} from DIR/stack.json, unless "
                             f"given [${STATE_DIR_ENV}]")


def connect_address(address: str) -> str:
    """``host:port`` to connect to for a listen address: a wildcard host becomes the loopback one."""
    host, port = netutil.parse_host_port(address)
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _from_stack(state_dir: str, name: str) -> str:
    from common.cli.stack.down import StackError, load_stack

    try:
        info = load_stack(state_dir)
    except StackError as exc:
        raise TargetError(str(exc)) from None
    try:
        return connect_address(info.addresses[_KEYS[name]])
    except (KeyError, ValueError) as exc:
        raise TargetError(f"the stack record of {state_dir} has no usable {_KEYS[name]} address: {exc}") from None


def _address(args: argparse.Namespace, name: str) -> str:
    given = getattr(args, "_given", set())
    value = getattr(args, name)
    if name in given:
        return value
    if args.state_dir and "state_dir" in given:
        return _from_stack(args.state_dir, name)
    if os.environ.get(addresses.DEFAULTS[name][0]):
        return value  # the flag's default: the environment's
    if args.state_dir:  # $KORRAL_STATE_DIR
        return _from_stack(args.state_dir, name)
    return value


def rest_address(args: argparse.Namespace) -> str:
    """The REST address the command talks to (see the module doc); ``TargetError`` when the
    stack it names cannot be read."""
    return _address(args, "rest_address")


def si_address(args: argparse.Namespace) -> str:
    """The gRPC SI address the command talks to (see the module doc)."""
    return _address(args, "si_address")
