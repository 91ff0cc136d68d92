"""A real OpenLDAP ``slapd`` for tests: a temp dir, slapd.conf style config (mdb + memberof
overlay), a free loopback port, users and groups loaded with ``ldapadd``, stopped by its pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from common.netutil import free_ports
from tests.conftest import wait_until

SLAPD = "/usr/sbin/slapd"
SUFFIX = "dc=example,dc=com"
ADMIN = f"cn=admin,{SUFFIX}"
PASSWORD = "secret"

_CONF = """include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile {d}/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
database mdb
maxsize 10485760
suffix "{suffix}"
rootdn "{admin}"
rootpw {password}
directory {d}/db
overlay memberof
"""


def entries(users: dict[str, list[str]]) -> str:
    """LDIF: the base, ou=people, ou=groups, each user (uid) and each group (groupOfNames)."""
    out = [f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: example\ndc: example\n",
           f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n",
           f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n"]
    for user in users:
        out.append(f"dn: uid={user},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: {user}\ncn: {user}\nsn: {user}\n")
    groups: dict[str, list[str]] = {}
    for user, gs in users.items():
        for g in gs:
            groups.setdefault(g, []).append(user)
    for g, members in groups.items():
        lines = "".join(f"member: uid={m},ou=people,{SUFFIX}\n" for m in members)
        out.append(f"dn: cn={g},ou=groups,{SUFFIX}\nobjectClass: groupOfNames\ncn: {g}\n{lines}")
    return "\n".join(out)


@dataclass
class Slapd:
    directory: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    def start(self, users: dict[str, list[str]]) -> "Slapd":
        d = self.directory
        (d / "db").mkdir(parents=True)
        (d / "slapd.conf").write_text(_CONF.format(d=d, suffix=SUFFIX, admin=ADMIN, password=PASSWORD))
        self.port = free_ports(1)[0]
        log = open(d / "slapd.log", "w")
        # -d 0: stay in the foreground (so the pid is ours to stop), no debug output
        self.proc = subprocess.Popen([SLAPD, "-f", str(d / "slapd.conf"), "-h", self.url + "/", "-d", "0"],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_until(lambda: self.proc.poll() is not None or self._answers(), 15, "slapd answering",
                   lambda: (d / "slapd.log").read_text())
        assert self.proc.poll() is None, (d / "slapd.log").read_text()
        ldif = d / "data.ldif"
        ldif.write_text(entries(users))
        added = subprocess.run(["ldapadd", "-x", "-H", self.url, "-D", ADMIN, "-w", PASSWORD, "-f", str(ldif)],
                               capture_output=True, text=True, timeout=30)
        assert added.returncode == 0, added.stderr
        return self

    def _answers(self) -> bool:
        r = subprocess.run(["ldapsearch", "-x", "-H", self.url, "-D", ADMIN, "-w", PASSWORD, "-b", "", "-s", "base"],
                           capture_output=True, timeout=10)
        return r.returncode in (0, 32)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def secrets(self, d: Path, **override: str) -> Path:
        """A secrets directory for the resolver pointing at this server (one file per key)."""
        d.mkdir(parents=True, exist_ok=True)
        values = {"Host": "127.0.0.1", "Port": str(self.port), "BaseDN": SUFFIX, "Filter": "(&(uid=%s))",
                  "GroupAttr": "memberOf", "ReturnAttr": "memberOf", "BindUser": ADMIN, "BindPassword": PASSWORD,
                  **override}
        for k, v in values.items():
            (d / k).write_text(v + "\n")
        return d


def available() -> bool:
    return os.path.exists(SLAPD) and shutil.which("ldapadd") is not None
