"""The LDAP group lookup (YuniKorn 1.8, YUNIKORN-656: partition ``usergroupresolver: {type: ldap}``),
for the worker shell; the core gets it injected as ``CoreSettings.group_lookup``.

Settings come from files, as YuniKorn reads them: one file per key in a secrets directory
(``korral worker --ldap-secrets-dir``, ``$KORRAL_LDAP_SECRETS_DIR``, default
``/run/secrets/ldap``, where a Kubernetes secret is mounted), the file name the key, the
trimmed content the value; names starting with ``..`` and directories are skipped. Keys:
``Host``, ``BaseDN``, ``Filter`` (with ``%s`` for the user), ``BindUser``, ``BindPassword``
(required), ``Port`` (389, 636 with SSL), ``GroupAttr`` (``memberOf``), ``ReturnAttr``
(``memberOf``; comma-separated), ``SSL`` and ``Insecure`` (``false``). A bad or missing
setting is a ``ValueError`` naming the key and the directory.

A lookup binds, searches ``BaseDN`` (subtree) with the filter and answers ``[user]`` followed
by the first ``CN=`` value of each ``GroupAttr`` value of the entries found. Nothing here ever
blocks for long: every network step has ``timeout`` seconds, and after a failure the server
counts as down for ``down_for`` seconds, during which lookups fail at once with the same
error (the core then rejects the app, as YuniKorn does; the placement resolver's cache keeps
answers for users already known). Results are cached by the core's resolver (300 s / 30 s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from partition_worker.placement import GroupLookupError

__all__ = ["LdapSettings", "LdapLookup", "load_settings", "DEFAULT_SECRETS_DIR"]

DEFAULT_SECRETS_DIR = "/run/secrets/ldap"
_REQUIRED = ("Host", "BaseDN", "Filter", "BindUser", "BindPassword")
_KEYS = _REQUIRED + ("Port", "GroupAttr", "ReturnAttr", "SSL", "Insecure")


@dataclass(frozen=True, slots=True)
class LdapSettings:
    host: str
    port: int
    base_dn: str
    filter: str
    group_attr: str
    return_attr: tuple[str, ...]
    bind_user: str
    bind_password: str
    ssl: bool = False
    insecure: bool = False

    @property
    def url(self) -> str:
        return f"{'ldaps' if self.ssl else 'ldap'}://{self.host}:{self.port}"


def _bool(key: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "t", "true"):
        return True
    if t in ("0", "f", "false"):
        return False
    raise ValueError(f"{key}: '{text}' is not true or false")


def load_settings(directory: str) -> LdapSettings:
    """The settings from the files of ``directory`` (see module doc)."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"LDAP settings directory {directory} does not exist (one file per key: {', '.join(_KEYS)})")
    raw: dict[str, str] = {}
    for entry in d.iterdir():
        if entry.name.startswith("..") or entry.is_dir() or entry.name not in _KEYS:
            continue
        raw[entry.name] = entry.read_text(encoding="utf-8").strip()
    missing = [k for k in _REQUIRED if not raw.get(k)]
    if missing:
        raise ValueError(f"LDAP settings in {directory}: missing {', '.join(missing)}")
    if "%s" not in raw["Filter"] or raw["Filter"].count("(") != raw["Filter"].count(")"):
        raise ValueError(f"LDAP settings in {directory}: Filter '{raw['Filter']}' must contain %s and balanced parentheses")
    ssl = _bool("SSL", raw.get("SSL", "false"))
    try:
        port = int(raw.get("Port") or (636 if ssl else 389))
    except ValueError:
        raise ValueError(f"LDAP settings in {directory}: Port '{raw['Port']}' is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"LDAP settings in {directory}: Port {port} is out of range")
    return LdapSettings(
        host=raw["Host"], port=port, base_dn=raw["BaseDN"], filter=raw["Filter"],
        group_attr=raw.get("GroupAttr") or "memberOf",
        return_attr=tuple(a.strip() for a in (raw.get("ReturnAttr") or "memberOf").split(",") if a.strip()),
        bind_user=raw["BindUser"], bind_password=raw["BindPassword"], ssl=ssl,
        insecure=_bool("Insecure", raw.get("Insecure", "false")))


class LdapLookup:
    """user -> groups from LDAP, bounded in time (see module doc). Callable as a group lookup."""

    def __init__(self, settings: LdapSettings, timeout: float = 2.0, down_for: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.timeout = timeout
        self.down_for = down_for
        self.clock = clock
        self._down_until = 0.0
        self._down_error = ""

    def check(self) -> None:
        """Bind once; ``GroupLookupError`` saying why when the server cannot be used."""
        conn = self._connect()
        conn.unbind()

    def __call__(self, user: str) -> tuple[str, ...]:
        import ldap3

        conn = self._connect()
        try:
            s = self.settings
            ok = conn.search(s.base_dn, s.filter.replace("%s", ldap3.utils.conv.escape_filter_chars(user)),
                             search_scope=ldap3.SUBTREE, attributes=list(s.return_attr),
                             time_limit=max(1, int(self.timeout)))
            if not ok and conn.result.get("result") not in (0, 32):  # 32: no such object
                raise self._failed(f"search failed: {conn.result.get('description')}")
            groups = [user]
            for entry in conn.entries:
                values = entry.entry_attributes_as_dict.get(s.group_attr, [])
                for v in values:
                    cn = _cn(str(v))
                    if cn and cn not in groups:
                        groups.append(cn)
            return tuple(groups)
        except GroupLookupError:
            raise
        except Exception as exc:  # ldap3's socket and protocol errors
            raise self._failed(f"search failed: {exc}") from None
        finally:
            conn.unbind()

    def _connect(self):
        import ldap3

        now = self.clock()
        if now < self._down_until:
            raise GroupLookupError(self._down_error)
        s = self.settings
        tls = None
        if s.ssl:
            import ssl as _ssl
            tls = ldap3.Tls(validate=_ssl.CERT_NONE if s.insecure else _ssl.CERT_REQUIRED)
        server = ldap3.Server(s.host, port=s.port, use_ssl=s.ssl, tls=tls, connect_timeout=self.timeout,
                              get_info=ldap3.NONE)
        try:
            conn = ldap3.Connection(server, user=s.bind_user, password=s.bind_password,
                                    receive_timeout=max(1, round(self.timeout)), raise_exceptions=False)
            if not conn.bind():
                raise self._failed(f"bind as {s.bind_user} refused: {conn.result.get('description')}")
            return conn
        except GroupLookupError:
            raise
        except Exception as exc:  # unreachable, refused, TLS
            raise self._failed(f"cannot reach {s.url}: {exc}") from None

    def _failed(self, why: str) -> GroupLookupError:
        self._down_error = f"LDAP server {self.settings.url} unusable ({why}); lookups fail for {self.down_for:g}s"
        self._down_until = self.clock() + self.down_for
        return GroupLookupError(self._down_error)


def _cn(dn: str) -> str:
    """The value of the first RDN when it is ``CN=...`` (any case), else ""."""
    first = dn.split(",", 1)[0].strip()
    name, _, value = first.partition("=")
    return value.strip() if name.strip().lower() == "cn" else ""
