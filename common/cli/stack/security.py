"""Security of the local stack (``korral up --curve``, ``--tls-*``): keys and per-program flags.

Every stack has an admin token in ``STATE_DIR/admin-token`` (``admin:<random>``, mode 0600, kept
across restarts), given to rmproxy with ``--admin-token-file``: ``korral config --state-dir D``
reads it, and nobody without read access to the state directory can change the config.

``--curve`` makes one CURVE key pair each for the broker, the rmproxy and the workers (all
local workers share one) in ``STATE_DIR/keys``, kept across restarts so a restarted stack
keeps its identity, and an ``allowed`` directory with the public certificates of the rmproxy
and the workers: the broker accepts those and no other peer. ``--tls-cert``/``--tls-key``
(and ``--tls-client-ca`` for mutual TLS) go to rmproxy's gRPC server unchanged.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

from common import security

__all__ = ["StackSecurity", "ensure_curve_keys", "ensure_admin_token", "keys_dir", "program_flags", "validate_tls",
           "ADMIN_TOKEN_FILE"]

PEERS = ("rmproxy", "worker")  # the broker's peers, one key pair each
ADMIN_TOKEN_FILE = "admin-token"  # in the state directory


@dataclass(frozen=True, slots=True)
class StackSecurity:
    curve: bool = False
    tls_cert: str | None = None  # absolute paths, checked readable by validate_tls
    tls_key: str | None = None
    tls_client_ca: str | None = None

    def describe(self) -> str:
        links = "CURVE between the broker and its peers" if self.curve else "plaintext ZeroMQ (loopback only)"
        grpc = ("mutual TLS" if self.tls_client_ca else "TLS") if self.tls_cert else "plaintext gRPC"
        return f"{links}; {grpc}"


def keys_dir(state_dir: Path) -> Path:
    return state_dir / "keys"


def validate_tls(cert: str | None, key: str | None, client_ca: str | None) -> tuple[str | None, ...]:
    """Absolute paths of the TLS files, read and checked as rmproxy will; ``SecurityError``
    names the flag and file at fault."""
    paths = tuple(str(Path(p).resolve()) if p else None for p in (cert, key, client_ca))
    security.grpc_server_credentials(*paths)
    return paths


def ensure_curve_keys(state_dir: Path) -> None:
    """Create the missing key pairs and refresh the allowed directory (idempotent)."""
    keys = keys_dir(state_dir)
    allowed = keys / "allowed"
    allowed.mkdir(parents=True, exist_ok=True)
    keys.chmod(0o700)
    for name in ("broker",) + PEERS:
        if not (keys / f"{name}.key_secret").exists():
            _, secret = zmq.auth.create_certificates(str(keys), name)
            Path(secret).chmod(0o600)
    for name in PEERS:
        shutil.copyfile(keys / f"{name}.key", allowed / f"{name}.key")


def ensure_admin_token(state_dir: Path) -> Path:
    """The stack's admin token file, made (readable by its owner only) when missing."""
    path = state_dir / ADMIN_TOKEN_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"admin:{secrets.token_urlsafe(32)}\n")
    return path


def program_flags(state_dir: Path, sec: StackSecurity) -> dict[str, str]:
    """Extra command-line flags per supervisord program (``broker``, ``worker``, ``rmproxy``),
    each starting with a space or empty."""
    flags: dict[str, list[str]] = {"broker": [], "worker": [],
                                   "rmproxy": ["--admin-token-file", str(state_dir / ADMIN_TOKEN_FILE)]}
    if sec.curve:
        keys = keys_dir(state_dir)
        flags["broker"] += ["--curve-secret", str(keys / "broker.key_secret"), "--curve-allowed", str(keys / "allowed")]
        for peer in PEERS:
            flags[peer] += ["--curve-secret", str(keys / f"{peer}.key_secret"),
                            "--curve-server", str(keys / "broker.key")]
    for flag, path in (("--tls-cert", sec.tls_cert), ("--tls-key", sec.tls_key),
                       ("--tls-client-ca", sec.tls_client_ca)):
        if path:
            flags["rmproxy"] += [flag, path]
    return {name: (" " + shlex.join(args)) if args else "" for name, args in flags.items()}
