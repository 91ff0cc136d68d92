"""``korral keys``: generate CURVE key pairs for the broker, workers and rmproxies."""

from __future__ import annotations

import argparse
import pathlib

import zmq.auth

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="keys", metavar="DIR",
                        help="directory to write the certificates to [keys]")
    parser.add_argument("--name", action="append", required=True, metavar="NAME",
                        help="name of a key pair (repeatable): writes NAME.key (public) and "
                             "NAME.key_secret (secret; keep it on that host only)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")


def run(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.name:
        existing = [p for p in (out / f"{name}.key", out / f"{name}.key_secret") if p.exists()]
        if existing and not args.force:
            print(f"korral keys: {existing[0]} exists; use --force to overwrite")
            return 1
        public, secret = zmq.auth.create_certificates(str(out), name)
        pathlib.Path(secret).chmod(0o600)
        print(f"{name}: public {public}, secret {secret}")
    print("Copy each public *.key of the workers and rmproxies into the broker's --curve-allowed "
          "directory, and the broker's public key to every worker and rmproxy (--curve-server).")
    return 0
