"""A self-signed serving certificate for the fake API server, made with the ``openssl`` command
line. A real API server always serves HTTPS, and kubectl (client-go) sends a bearer token only
over HTTPS, so the fake does too unless told not to."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

__all__ = ["TlsError", "self_signed"]


class TlsError(RuntimeError):
    pass


def self_signed(directory: Path, host: str) -> tuple[Path, Path]:
    """(certificate, key) for ``host`` (and localhost/127.0.0.1), valid for a year, in ``directory``."""
    if shutil.which("openssl") is None:
        raise TlsError("the openssl command line is needed to make a serving certificate: install it, pass "
                       "--tls-cert/--tls-key, or serve plain HTTP with --no-tls")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    names = {"DNS:localhost", "IP:127.0.0.1"}
    try:
        ipaddress.ip_address(host)
        names.add(f"IP:{host}")
    except ValueError:
        names.add(f"DNS:{host}")
    result = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "365", "-subj", "/CN=korral-fake-apiserver", "-addext",
         "subjectAltName=" + ",".join(sorted(names)), "-keyout", str(key), "-out", str(cert)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise TlsError(f"openssl could not make a certificate: {result.stderr.strip()}")
    key.chmod(0o600)
    return cert, key
