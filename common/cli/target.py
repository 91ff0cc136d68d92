"""Which stack a client command talks to: ``--rest-address`` (``--si-address`` for ``korral sim``),
or ``--state-dir`` naming a ``korral up`` stack, whose addresses are read from its ``stack.json``.

An address flag given on the command line wins over the stack's; then ``--state-dir``; then
``$KORRAL_REST_ADDRESS`` (resp. ``$KORRAL_SI_ADDRESS``); then the stack of ``$KORRAL_STATE_DIR``;
then the default address. A stack listening on every interface (``0.0.0.0``) is reached on the
loopback address.
"""

from __future__ import annotations

import argparse
import os

from common import addresses, netutil
from common.restclient import RestError

__all__ = ["add_flags", "rest_address", "si_address", "connect_address", "TargetError"]

_KEYS = {"rest_address": "rest", "si_address": "si"}


class TargetError(RestError):
    """The stack named by ``--state-dir`` cannot be read; the message says why (a ``RestError``:
    the command cannot reach the REST API)."""


def add_flags(parser: argparse.ArgumentParser, help_text: str, *, si: bool = False,
              rest_help: str = "", rest_default: str = "") -> None:
    """``--state-dir`` and the address flags that override it (``--rest-address``; ``--si-address``
    too when ``si``: then ``help_text`` is the SI address's, ``rest_help`` the REST one's).
    ``rest_default`` says what happens without a REST address when it is not the default address
    (``rest_address(args, fallback)``)."""
    wanted = ["si_address", "rest_address"] if si else ["rest_address"]
    for name in wanted:
        env, default = addresses.DEFAULTS[name]
        flag = "--" + name.replace("_", "-")
        text = rest_help if name == "rest_address" and rest_help else help_text
        default = rest_default if name == "rest_address" and rest_default else f"default {default}"
        parser.add_argument(flag, dest=name, default=None, metavar="HOST:PORT", help=f"{text} [${env}, {default}]")
    names = " and ".join(_KEYS[n].upper() if n == "si_address" else "REST" for n in wanted)
    parser.add_argument("--state-dir", default=None, metavar="DIR",
                        help=f"a stack started by `korral up` in DIR: its {names} address from DIR/stack.json, "
                             "unless given [$KORRAL_STATE_DIR]")


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


def _address(args: argparse.Namespace, name: str, fallback: str | None = None) -> str:
    given = getattr(args, name, None)
    if given:
        return given
    if getattr(args, "state_dir", None):
        return _from_stack(args.state_dir, name)
    env, default = addresses.DEFAULTS[name]
    if os.environ.get(env):
        return os.environ[env]
    if os.environ.get("KORRAL_STATE_DIR"):
        return _from_stack(os.environ["KORRAL_STATE_DIR"], name)
    return default if fallback is None else fallback


def rest_address(args: argparse.Namespace, fallback: str | None = None) -> str:
    """The REST address the command talks to (see the module doc); ``TargetError`` when the
    stack it names cannot be read. ``fallback`` replaces the default address (``korral sim``:
    "", no REST reads)."""
    return _address(args, "rest_address", fallback)


def si_address(args: argparse.Namespace) -> str:
    """The gRPC SI address the command talks to (see the module doc)."""
    return _address(args, "si_address")
