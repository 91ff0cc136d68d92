"""Group resolution for applications submitted without ``ugi.groups``.

``GroupResolver.resolve(user, groups, now_ns)``: groups given → used as is;
none given → looked up (``lookup``, injected: the worker shell passes the OS user
database, ``partition_worker.os_groups.os_lookup``) and cached: a found user for ``positive_ttl_s``, an unknown user for
``negative_ttl_s`` (YuniKorn's 300 s / 30 s). An unknown user resolves to
``(user,)``, YuniKorn's default. Time is passed in, so tests need no clock.

Korral departs from YuniKorn v1.2, whose default resolver never looks
anything up (groups = [user]); the worker looks users up in the OS by default.
Pass ``lookup=no_lookup`` for YuniKorn's behaviour. This module does no I/O of its
own: the placement package is part of the pure core's import graph.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Sequence

__all__ = ["GroupResolver", "GroupLookupError", "no_lookup", "Lookup"]

# user -> groups (primary first), or None when the user is unknown
Lookup = Callable[[str], "Sequence[str] | None"]
NS_PER_S = 1_000_000_000


class GroupLookupError(Exception):
    """The lookup could not answer (e.g. its LDAP server is down): the message says why. Not
    cached here: the lookup decides how long it keeps failing fast."""


def no_lookup(user: str) -> None:
    """YuniKorn v1.2's default: nothing is known about users."""
    return None


class GroupResolver:
    """Resolves and caches groups; bounded to ``max_entries`` users (oldest evicted)."""

    __slots__ = ("_lookup", "_positive_ns", "_negative_ns", "_max", "_cache")

    def __init__(
        self,
        lookup: Lookup,
        positive_ttl_s: float = 300,
        negative_ttl_s: float = 30,
        max_entries: int = 10_000,
    ) -> None:
        self._lookup = lookup
        self._positive_ns = int(positive_ttl_s * NS_PER_S)
        self._negative_ns = int(negative_ttl_s * NS_PER_S)
        self._max = max_entries
        self._cache: OrderedDict[str, tuple[int, tuple[str, ...]]] = OrderedDict()

    def resolve(self, user: str, groups: Sequence[str], now_ns: int) -> tuple[str, ...]:
        """The groups to use for ``user`` at time ``now_ns`` (any monotonic nanosecond clock)."""
        if groups:
            return tuple(groups)
        cached = self._cache.get(user)
        if cached is not None and cached[0] > now_ns:
            return cached[1]
        found = self._lookup(user) if user else None
        if found:
            result, expires = tuple(found), now_ns + self._positive_ns
        else:
            result, expires = (user,), now_ns + self._negative_ns
        self._cache[user] = (expires, result)
        self._cache.move_to_end(user)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return result

    def clear(self) -> None:
        self._cache.clear()
