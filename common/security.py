"""Secured links: ZeroMQ CURVE between broker and its peers, TLS for the gRPC front door and
the REST API, and the admin tokens of rmproxy's admin endpoint.

CURVE: the broker has a key pair and a directory of the public certificates it
accepts; workers and rmproxies each have a key pair and the broker's public
certificate. A peer whose key is not in the directory is refused and logged.
Certificates are zmq.auth's files (``korral keys`` writes them). Without
``--curve-secret`` links are plaintext, which is meant for loopback only.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import ssl

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

__all__ = ["SecurityError", "add_curve_client_flags", "add_curve_server_flags", "add_tls_flags",
           "add_tls_client_flags", "client_keys", "secure_client", "secure_server", "grpc_server_credentials",
           "grpc_channel_credentials", "add_rest_tls_flags", "rest_server_ssl", "rest_client_ssl",
           "read_admin_tokens", "MIN_TOKEN_LENGTH"]

log = logging.getLogger("korral.security")


def _env_flag(parser: argparse.ArgumentParser, flag: str, env: str, help_text: str) -> None:
    parser.add_argument(flag, default=os.environ.get(env) or None, metavar="FILE",
                        help=f"{help_text} [${env}]")


def add_curve_client_flags(parser: argparse.ArgumentParser) -> None:
    _env_flag(parser, "--curve-secret", "KORRAL_CURVE_SECRET",
              "this process's secret CURVE certificate (korral keys); turns CURVE on")
    _env_flag(parser, "--curve-server", "KORRAL_CURVE_SERVER", "the broker's public CURVE certificate")


def add_curve_server_flags(parser: argparse.ArgumentParser) -> None:
    _env_flag(parser, "--curve-secret", "KORRAL_CURVE_SECRET",
              "the broker's secret CURVE certificate (korral keys); turns CURVE on")
    parser.add_argument("--curve-allowed", default=os.environ.get("KORRAL_CURVE_ALLOWED") or None,
                        metavar="DIR", help="directory of the public certificates of allowed workers "
                                            "and rmproxies [$KORRAL_CURVE_ALLOWED]")


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    _env_flag(parser, "--tls-cert", "KORRAL_TLS_CERT", "PEM certificate chain of the gRPC server; turns TLS on")
    _env_flag(parser, "--tls-key", "KORRAL_TLS_KEY", "PEM private key of the gRPC server")
    _env_flag(parser, "--tls-client-ca", "KORRAL_TLS_CLIENT_CA",
              "PEM CA of RM client certificates; turns mutual TLS on (RMs without one are refused)")


class SecurityError(ValueError):
    """Bad security settings: names the flag and file at fault."""


def _load(path: str, flag: str, need_secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise SecurityError(f"{flag} {path}: not a readable CURVE certificate ({exc})") from None
    if need_secret and not secret:
        raise SecurityError(f"{flag} {path}: a public certificate; this needs the secret one (*.key_secret)")
    return public, secret


def client_keys(secret_file: str | None, server_file: str | None) -> tuple[bytes, bytes, bytes] | None:
    """(public, secret, broker public) from the --curve-* files, None for plaintext; SecurityError if bad."""
    if not secret_file:
        if server_file:
            raise SecurityError("--curve-server needs --curve-secret (this process's secret certificate)")
        return None
    if not server_file:
        raise SecurityError("--curve-secret needs --curve-server (the broker's public certificate)")
    public, secret = _load(secret_file, "--curve-secret", need_secret=True)
    server_public, _ = _load(server_file, "--curve-server", need_secret=False)
    return public, secret, server_public  # type: ignore[return-value]


def secure_client(sock: zmq.Socket, secret_file: str | None, server_file: str | None) -> None:
    """Make sock a CURVE client of the broker, when secret_file is given."""
    keys = client_keys(secret_file, server_file)
    if keys is None:
        return
    public, secret, server_public = keys
    sock.curve_publickey = public
    sock.curve_secretkey = secret
    sock.curve_serverkey = server_public


class _AllowedKeys:
    """ZAP credentials callback: keys from a directory, re-read when the directory changes."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self.mtime = -1.0
        self.keys: set[bytes] = set()

    def callback(self, domain: str, client_key: bytes) -> bool:  # noqa: ARG002 (zmq's signature)
        mtime = self.directory.stat().st_mtime
        if mtime != self.mtime:
            self.keys = set(zmq.auth.load_certificates(str(self.directory)))
            self.mtime = mtime
        allowed = client_key in self.keys
        if not allowed:
            log.warning("refused a CURVE peer with unknown public key %s (not in %s)",
                        client_key.decode(), self.directory)
        return allowed


def secure_server(ctx: zmq.Context, sockets: list[zmq.Socket], secret_file: str | None,
                  allowed_dir: str | None) -> ThreadAuthenticator | None:
    """Make sockets CURVE servers that accept only the keys in allowed_dir; returns the authenticator."""
    if not secret_file:
        return None
    if not allowed_dir or not pathlib.Path(allowed_dir).is_dir():
        raise SecurityError(f"--curve-secret needs --curve-allowed DIR (a directory of public "
                            f"certificates); got {allowed_dir!r}")
    public, secret = _load(secret_file, "--curve-secret", need_secret=True)
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(domain="*", credentials_provider=_AllowedKeys(pathlib.Path(allowed_dir)))
    for sock in sockets:
        sock.curve_publickey = public
        sock.curve_secretkey = secret
        sock.curve_server = True
    return auth


def _read(path: str, flag: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(f"{flag} {path}: {exc.strerror}") from None


def _server_tls_on(cert: str | None, key: str | None, client_ca: str | None, prefix: str, what: str) -> bool:
    """Whether a server's ``--<prefix>-cert/-key/-client-ca`` turn TLS on; SecurityError for a
    partial set, naming the flags."""
    if not cert and not key:
        if client_ca:
            raise SecurityError(f"--{prefix}-client-ca needs --{prefix}-cert and --{prefix}-key")
        return False
    if not (cert and key):
        raise SecurityError(f"{what} needs both --{prefix}-cert and --{prefix}-key")
    return True


def grpc_server_credentials(cert: str | None, key: str | None, client_ca: str | None):
    """grpc ServerCredentials for --tls-*, or None for plaintext."""
    if not _server_tls_on(cert, key, client_ca, "tls", "TLS"):
        return None
    import grpc

    pair = [(_read(key, "--tls-key"), _read(cert, "--tls-cert"))]  # type: ignore[arg-type]
    if client_ca:
        return grpc.ssl_server_credentials(pair, root_certificates=_read(client_ca, "--tls-client-ca"),
                                           require_client_auth=True)
    return grpc.ssl_server_credentials(pair)


def add_tls_client_flags(parser: argparse.ArgumentParser, client: str = "this RM") -> None:
    """Flags of a client of rmproxy's TLS (an RM such as ``korral sim``; ``korral config``)."""
    _env_flag(parser, "--tls-ca", "KORRAL_TLS_CA", "PEM CA that signed rmproxy's certificate; turns TLS on")
    _env_flag(parser, "--tls-client-cert", "KORRAL_TLS_CLIENT_CERT",
              f"PEM certificate of {client}, for mutual TLS")
    _env_flag(parser, "--tls-client-key", "KORRAL_TLS_CLIENT_KEY", f"PEM private key of {client}, for mutual TLS")


def grpc_channel_credentials(ca: str | None, cert: str | None, key: str | None):
    """grpc ChannelCredentials for --tls-ca / --tls-client-*, or None for plaintext."""
    if not ca:
        if cert or key:
            raise SecurityError("--tls-client-cert/--tls-client-key need --tls-ca (the CA of rmproxy's certificate)")
        return None
    if bool(cert) != bool(key):
        raise SecurityError("mutual TLS needs both --tls-client-cert and --tls-client-key")
    import grpc

    return grpc.ssl_channel_credentials(root_certificates=_read(ca, "--tls-ca"),
                                        private_key=_read(key, "--tls-client-key") if key else None,
                                        certificate_chain=_read(cert, "--tls-client-cert") if cert else None)


# ---------------------------------------------------------------- REST: TLS and admin tokens

def add_rest_tls_flags(parser: argparse.ArgumentParser) -> None:
    """rmproxy's flags for HTTPS on its REST port and for its admin endpoint."""
    _env_flag(parser, "--rest-tls-cert", "KORRAL_REST_TLS_CERT",
              "PEM certificate chain of the REST server; turns HTTPS on")
    _env_flag(parser, "--rest-tls-key", "KORRAL_REST_TLS_KEY", "PEM private key of the REST server")
    _env_flag(parser, "--rest-tls-client-ca", "KORRAL_REST_TLS_CLIENT_CA",
              "PEM CA of admin client certificates: a client presenting one may use the admin endpoint "
              "(reads need none)")
    _env_flag(parser, "--admin-token-file", "KORRAL_ADMIN_TOKEN_FILE",
              "file of admin bearer tokens, one per line as NAME:TOKEN; turns the admin endpoint on "
              "(re-read when it changes)")


def rest_server_ssl(cert: str | None, key: str | None, client_ca: str | None) -> ssl.SSLContext | None:
    """The REST server's TLS context for --rest-tls-*, or None for plain HTTP. With a client CA
    a client certificate is optional (YuniKorn's reads and the dashboard need none) but, when
    presented, must be of that CA; the admin endpoint then accepts it."""
    if not _server_tls_on(cert, key, client_ca, "rest-tls", "HTTPS"):
        return None
    for path, flag in ((cert, "--rest-tls-cert"), (key, "--rest-tls-key")):
        _read(path, flag)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise SecurityError(f"--rest-tls-cert {cert} / --rest-tls-key {key}: not a matching PEM pair ({exc})") from None
    if client_ca:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise SecurityError(f"--rest-tls-client-ca {client_ca}: not a readable PEM CA ({exc})") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def rest_client_ssl(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """A REST client's TLS context: trust ``ca`` (None: the system's), present ``cert``/``key``."""
    if bool(cert) != bool(key):
        raise SecurityError("a client certificate needs both --tls-client-cert and --tls-client-key")
    if not (ca or cert):
        return None
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    if cert and key:
        try:
            ctx.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise SecurityError(f"--tls-client-cert {cert} / --tls-client-key {key}: {exc}") from None
    return ctx


MIN_TOKEN_LENGTH = 16  # characters; shorter tokens are refused when the file is read


def read_admin_tokens(path: str) -> dict[str, str]:
    """The tokens of an admin token file: ``NAME:TOKEN`` per line (``#`` comments and blank lines
    ignored; a line without a name is named ``admin``). SecurityError names the file and line
    of a malformed entry, a short token or a repeated name."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecurityError(f"admin token file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, token = line.rpartition(":")
        name = name.strip() or "admin"
        token = token.strip()
        if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
            raise SecurityError(f"admin token file {path} line {number}: a token needs at least "
                                f"{MIN_TOKEN_LENGTH} characters and no spaces")
        if name in tokens:
            raise SecurityError(f"admin token file {path} line {number}: the name {name!r} is used twice")
        tokens[name] = token
    if not tokens:
        raise SecurityError(f"admin token file {path}: no token in it (one NAME:TOKEN per line)")
    return tokens
