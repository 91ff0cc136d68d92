"""Security of the local stack (``korral up --curve``, ``--tls-*``): keys and per-program flags.

``--curve`` makes one CURVE key pair each for the broker, the rmproxy and the workers (all
local workers share one) in ``STATE_DIR/keys``, kept across restarts so a restarted stack
keeps its identity, and an ``allowed`` directory with the public certificates of the rmproxy
and the workers: the broker accepts those and no other peer. ``--tls-cert``/``--tls-key``
(and ``--tls-client-ca`` for mutual TLS) go to rmproxy's gRPC server unchanged.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

from common import security

__all__ = ["StackSecurity", "ensure_curve_keys", "keys_dir", "program_flags", "validate_tls"]

PEERS = ("rmproxy", "worker")  # the broker's peers, one key pair each


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


def program_flags(state_dir: Path, sec: StackSecurity) -> dict[str, str]:
    """Extra command-line flags per supervisord program (``broker``, ``worker``, ``rmproxy``),
    each starting with a space or empty."""
    flags: dict[str, list[str]] = {"broker": [], "worker": [], "rmproxy": []}
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
