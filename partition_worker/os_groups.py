"""The OS user database as a group lookup, for the worker shell (``korral worker --group-lookup os``).

What it owns: reading a user's groups from the OS (pwd/grp, so NSS too). Who may use it:
the worker process (``partition_worker.main``), which injects it into the core through
``CoreSettings.group_lookup``. Kept out of ``partition_worker.core`` and
``partition_worker.placement``, which do no I/O.
"""

from __future__ import annotations

import grp
import os
import pwd

__all__ = ["os_lookup"]


def os_lookup(user: str) -> tuple[str, ...] | None:
    """Primary then supplementary groups of ``user`` from the OS, or None for an unknown user."""
    try:
        entry = pwd.getpwnam(user)
    except (KeyError, ValueError, OSError):
        return None
    try:
        gids = os.getgrouplist(user, entry.pw_gid)
    except (OSError, ValueError):
        gids = [entry.pw_gid]
    names: list[str] = []
    for gid in [entry.pw_gid, *gids]:
        try:
            name = grp.getgrgid(gid).gr_name
        except (KeyError, OverflowError):
            name = str(gid)
        if name not in names:
            names.append(name)
    return tuple(names)
