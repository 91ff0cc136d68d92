"""The worker's OS group lookup (injected into the core as ``CoreSettings.group_lookup``)."""

import grp
import os
import pwd

from partition_worker.os_groups import os_lookup


def test_os_lookup_finds_the_current_user_with_primary_group_first():
    entry = pwd.getpwuid(os.getuid())
    groups = os_lookup(entry.pw_name)
    assert groups is not None
    assert groups[0] == grp.getgrgid(entry.pw_gid).gr_name


def test_os_lookup_unknown_user():
    assert os_lookup("no-such-user-korral-test") is None
