"""YuniKorn access control lists: ``"<users> <groups>"``.

Syntax (YuniKorn v1.2, pkg/common/security/acl.go):

* ``"*"`` (after trimming) allows everyone; so does a user list or a group list
  that is exactly ``*``.
* ``""`` and ``" "`` deny everyone.
* Otherwise the text is split on ONE space into at most two fields: a
  comma-separated user list and a comma-separated group list. ``" group1"``
  (a leading space) names groups only. More than two fields is a syntax error.
* Names that are not valid user/group names are dropped (not an error), empty
  entries are skipped, duplicates collapse. A ``*`` inside a longer list is an
  invalid name and is dropped too. Matching is case-sensitive.

Korral departs from v1.2 in one place: YuniKorn's config validator counts
whitespace-separated fields (so ``"a  b"`` passes validation) while its runtime
parser splits on single spaces (so the same queue then fails to build). Here the
one parser below is used by both, so ``"a  b"`` is rejected at validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

__all__ = ["ACL", "USER_NAME_RE", "GROUP_NAME_RE", "WILDCARD", "queue_allows"]

WILDCARD = "*"
# Linux user/group name conventions, as YuniKorn's common/security package uses them.
USER_NAME_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9_.@-]*[$]?$")
GROUP_NAME_RE = re.compile(r"^[_a-zA-Z][a-zA-Z0-9_-]*$")


@dataclass(frozen=True, slots=True)
class ACL:
    """A parsed ACL. Build with ``ACL.parse``; the default instance denies all."""

    text: str = ""
    allow_all: bool = False
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    # Entries silently dropped as invalid names, kept so check-config can warn.
    dropped: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, text: str | None) -> "ACL":
        """Parse ``text``; raises ``ValueError`` naming the ACL when it has >2 fields."""
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise ValueError(f"ACL must be a string, got {type(text).__name__}: {text!r}")
        if text.strip() == WILDCARD:
            return cls(text=text, allow_all=True)
        if text == "":
            return cls(text=text)
        fields = text.split(" ")
        if len(fields) > 2:
            raise ValueError(f"multiple spaces found in ACL: '{text}'")
        dropped: list[str] = []
        users, users_all = _names(fields[0], USER_NAME_RE, dropped)
        groups, groups_all = (frozenset(), False)
        if len(fields) == 2:
            groups, groups_all = _names(fields[1], GROUP_NAME_RE, dropped)
        return cls(
            text=text,
            allow_all=users_all or groups_all,
            users=users,
            groups=groups,
            dropped=tuple(dropped),
        )

    def allows(self, user: str, groups: Iterable[str] = ()) -> bool:
        """True when the ACL allows everyone, lists ``user``, or lists any of ``groups``."""
        if self.allow_all:
            return True
        if user in self.users:
            return True
        if self.groups:
            return any(g in self.groups for g in groups)
        return False

    @property
    def denies_all(self) -> bool:
        """True for an ACL that can never allow anyone (empty or all names dropped)."""
        return not self.allow_all and not self.users and not self.groups

    def __str__(self) -> str:
        return self.text


def queue_allows(queue: Any, user: str, groups: Sequence[str], *, submit: bool) -> bool:
    """YuniKorn's queue access: the admin ACL (and with ``submit`` the submit ACL too) of
    ``queue`` or of any ancestor (``.parent`` up to None) allows ``user``. ``queue`` is any
    object with ``submit_acl``, ``admin_acl`` and ``parent``."""
    q = queue
    while q is not None:
        if q.admin_acl.allows(user, groups) or (submit and q.submit_acl.allows(user, groups)):
            return True
        q = q.parent
    return False


def _names(field_text: str, pattern: re.Pattern[str], dropped: list[str]) -> tuple[frozenset[str], bool]:
    """Split one comma-separated list; returns (valid names, list-is-exactly-wildcard)."""
    entries = field_text.split(",")
    if len(entries) == 1 and entries[0] == WILDCARD:
        return frozenset(), True
    names: set[str] = set()
    for entry in entries:
        if entry == "":
            continue
        if pattern.fullmatch(entry):
            names.add(entry)
        else:
            dropped.append(entry)
    return frozenset(names), False
