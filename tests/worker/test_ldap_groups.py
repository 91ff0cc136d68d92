"""The LDAP group resolver against a real slapd (Debian's), and the worker's choice of resolver:
a config naming an unusable LDAP server is refused with the reason and the old resolver stays."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from common.config import load_config
from common.config.errors import ConfigError
from partition_worker.ldap_groups import LdapLookup, load_settings
from partition_worker.main import WorkerLoop
from partition_worker.placement import GroupLookupError
from tests.worker.slapd import Slapd, available

pytestmark = pytest.mark.skipif(not available(), reason="slapd/ldap-utils not installed (make setup installs them as root)")

USERS = {"alice": ["data", "ml"], "bob": ["ops"], "carol": []}


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    server = Slapd(tmp_path_factory.mktemp("slapd")).start(USERS)
    try:
        yield server
    finally:
        server.stop()


def test_groups_of_a_user_are_the_user_then_the_cn_of_each_group(slapd, tmp_path):
    lookup = LdapLookup(load_settings(str(slapd.secrets(tmp_path / "s"))))
    assert lookup("alice")[0] == "alice" and sorted(lookup("alice")[1:]) == ["data", "ml"]
    assert lookup("bob") == ("bob", "ops")
    assert lookup("carol") == ("carol",)
    assert lookup("nobody-here") == ("nobody-here",)


def test_an_unreachable_server_fails_fast_with_a_clear_error(slapd, tmp_path):
    from common.netutil import free_ports
    lookup = LdapLookup(load_settings(str(slapd.secrets(tmp_path / "s", Port=str(free_ports(1)[0])))),
                        timeout=1.0)
    with pytest.raises(GroupLookupError, match=r"LDAP server ldap://127.0.0.1:\d+ unusable \(cannot reach"):
        lookup("alice")
    started = time.monotonic()
    with pytest.raises(GroupLookupError):  # down: no network attempt for down_for seconds
        lookup("bob")
    assert time.monotonic() - started < 0.1


def test_a_wrong_password_is_named(slapd, tmp_path):
    lookup = LdapLookup(load_settings(str(slapd.secrets(tmp_path / "s", BindPassword="wrong"))))
    with pytest.raises(GroupLookupError, match="bind as cn=admin,dc=example,dc=com refused"):
        lookup.check()


@pytest.mark.parametrize("files, message", [
    ({"Host": ""}, "missing Host"),
    ({"Filter": "(uid=alice)"}, "must contain %s"),
    ({"Port": "ninety"}, "Port 'ninety' is not a number"),
])
def test_bad_settings_name_the_key(slapd, tmp_path, files, message):
    d = slapd.secrets(tmp_path / "s", **files)
    with pytest.raises(ValueError, match=message):
        load_settings(str(d))


def _config(resolver: str) -> str:
    return (f"partitions:\n  - name: default\n    usergroupresolver: {{type: {resolver}}}\n"
            "    queues:\n      - name: root\n        submitacl: '*'\n        queues: [{name: a}]\n")


class _Store:
    def __init__(self, text: str) -> None:
        self.text = text

    def load(self, rm_id: str):
        return SimpleNamespace(config=self.text, extra_config={}, build_info={})


def test_the_worker_switches_to_ldap_and_keeps_the_old_resolver_when_ldap_is_unusable(slapd, tmp_path):
    from common.netutil import free_ports
    good = slapd.secrets(tmp_path / "good")
    loop = WorkerLoop(None, "unused", store=_Store(_config("os")), name="w1", ldap_secrets_dir=str(good))
    session, resolver = loop._load_session("rm1", "default")
    assert resolver == "os"
    # the worker's update path: a config naming an unreachable LDAP is refused, the os lookup stays
    loop.ldap_secrets_dir = str(slapd.secrets(tmp_path / "bad", Port=str(free_ports(1)[0])))
    with pytest.raises(ConfigError, match="partition default: usergroupresolver ldap: LDAP server .* unusable"):
        loop._group_lookup_for(load_config(_config("ldap")).partition("default"))
    loop.ldap_secrets_dir = str(good)
    lookup = loop._group_lookup_for(load_config(_config("ldap")).partition("default"))
    session.core.set_group_lookup(lookup)
    from partition_worker.core import AddApp
    session.core.handle(AddApp("app-1", "root.a", "alice"), 1)
    assert set(session.core.apps["app-1"].groups) == {"alice", "data", "ml"}


def test_an_app_is_rejected_when_ldap_goes_down_and_a_forced_one_gets_nogroup(slapd, tmp_path):
    from common.netutil import free_ports
    from partition_worker.core import AddApp
    from tests.core.harness import Harness
    from partition_worker.core.settings import CoreSettings
    down = LdapLookup(load_settings(str(slapd.secrets(tmp_path / "s", Port=str(free_ports(1)[0])))), timeout=0.5)
    h = Harness(settings=CoreSettings(group_lookup=down))
    h.do(AddApp("a1", "root.default", "alice"),
         AddApp("a2", "root.default", "bob", tags={"application.create.force": "true"}))
    assert "user alice: group resolution failed: LDAP server" in h.rejected_app_reasons()["a1"]
    assert h.p.apps["a2"].groups == ("nogroup",)
