"""User and group limits (YuniKorn v1.3 ugm enforcement) of one partition.

Contract:
- ``LimitTracker.configure(config, apps)`` compiles the ``limits`` of every queue (the
  partition-level ``limits`` belong to root, as in YuniKorn) and rebuilds usage from the
  apps' current allocations. ``active`` is False when no limit is configured: every hook
  then returns at once, so a partition without limits pays nothing per allocation.
- A limit entry names users and/or groups; ``*`` is the wildcard: it applies to every user
  (group) not named by another entry of the same queue, each one separately.
- The group an app is held against is the first of its groups that is named in a group
  limit of its queue or an ancestor (YuniKorn v1.3 ``getGroup``); when none is named, the
  first group of the app if a ``*`` group limit exists on the path; else the app has no
  limited group.
- ``check(app, res)`` says which limit (if any) placing ``res`` for ``app`` would break, at
  any queue level from the app's leaf up to root: ``maxresources`` (types the limit defines)
  or ``maxapplications`` (the app would be one more running app of that user/group there).
- Usage is tracked only at queues that have limits, per user and per group: resources and
  the apps that count as running there (an app counts from its first allocation until it is
  removed or its last allocation ends).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from common.config.model import LimitConfig, PartitionConfig, QueueConfig
from common.resources import ZERO, Resource

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application

__all__ = ["LimitTracker", "Limit", "WILDCARD"]

WILDCARD = "*"
USER, GROUP = "user", "group"


@dataclass(slots=True, frozen=True)
class Limit:
    """One configured limit as it applies to one kind (user or group) and name."""

    kind: str
    name: str  # the configured name (may be ``*``)
    max: Resource | None
    max_apps: int


@dataclass(slots=True)
class _QueueLimits:
    users: dict[str, Limit] = field(default_factory=dict)
    groups: dict[str, Limit] = field(default_factory=dict)

    def user_limit(self, user: str) -> Limit | None:
        lim = self.users.get(user)
        return lim if lim is not None else self.users.get(WILDCARD)

    def group_limit(self, group: str) -> Limit | None:
        lim = self.groups.get(group)
        return lim if lim is not None else self.groups.get(WILDCARD)


@dataclass(slots=True)
class _Usage:
    used: Resource = ZERO
    apps: dict[str, int] = field(default_factory=dict)  # app id -> allocations counted here


class LimitTracker:
    """Per-queue user/group limits and the usage they are checked against."""

    __slots__ = ("active", "by_path", "usage", "_group_cache")

    def __init__(self) -> None:
        self.active = False
        self.by_path: dict[str, _QueueLimits] = {}
        self.usage: dict[tuple[str, str, str], _Usage] = {}  # (queue path, kind, name)
        self._group_cache: dict[str, str] = {}  # app id -> limited group ("" = none)

    # ---------------------------------------------------------------- config
    def configure(self, config: PartitionConfig, apps: Iterable["Application"]) -> None:
        """Compile the limits of ``config`` and rebuild usage from ``apps``' allocations."""
        self.by_path = {}
        root = config.root
        self._compile("root", tuple(config.limits) + tuple(root.limits))
        for child in root.queues:
            self._walk(child, "root")
        self.active = bool(self.by_path)
        self.rebuild(apps)

    def _walk(self, cfg: QueueConfig, parent_path: str) -> None:
        path = f"{parent_path}.{cfg.name.lower()}"
        self._compile(path, cfg.limits)
        for child in cfg.queues:
            self._walk(child, path)

    def _compile(self, path: str, limits: Iterable[LimitConfig]) -> None:
        ql = _QueueLimits()
        for lc in limits:
            mx = Resource(dict(lc.maxresources)) if lc.maxresources else None
            if mx is not None and mx.is_zero():
                mx = None
            for u in lc.users:
                ql.users.setdefault(u, Limit(USER, u, mx, lc.maxapplications))  # first wins
            for g in lc.groups:
                ql.groups.setdefault(g, Limit(GROUP, g, mx, lc.maxapplications))
        if ql.users or ql.groups:
            self.by_path[path] = ql

    def rebuild(self, apps: Iterable["Application"]) -> None:
        """Recompute usage from scratch (config change, app moved between queues)."""
        self.usage = {}
        self._group_cache = {}
        if not self.active:
            return
        for app in apps:
            for alloc in app.allocations.values():
                self.on_alloc(app, alloc.resource)

    # ---------------------------------------------------------------- group resolution
    def group_of(self, app: "Application") -> str:
        """The group ``app`` is limited as ("" = none), see the module contract."""
        g = self._group_cache.get(app.app_id)
        if g is not None:
            return g
        paths = [q.path for q in app.queue.chain()]
        named: set[str] = set()
        wildcard = False
        for path in paths:
            ql = self.by_path.get(path)
            if ql is not None:
                named.update(ql.groups)
                wildcard = wildcard or WILDCARD in ql.groups
        g = next((x for x in app.groups if x in named and x != WILDCARD), "")
        if not g and wildcard and app.groups:
            g = app.groups[0]
        self._group_cache[app.app_id] = g
        return g

    # ---------------------------------------------------------------- checks
    def check(self, app: "Application", res: Resource) -> tuple[Limit, str] | None:
        """The first limit (leaf first) that ``res`` more for ``app`` would break, with the
        queue path it is set on; None when every limit holds."""
        if not self.active:
            return None
        group = self.group_of(app)
        for q in app.queue.chain():
            ql = self.by_path.get(q.path)
            if ql is None:
                continue
            lim = ql.user_limit(app.user)
            if lim is not None and self._breaks(lim, (q.path, USER, app.user), app.app_id, res):
                return lim, q.path
            if group:
                lim = ql.group_limit(group)
                if lim is not None and self._breaks(lim, (q.path, GROUP, group), app.app_id, res):
                    return lim, q.path
        return None

    def _breaks(self, lim: Limit, key: tuple[str, str, str], app_id: str, res: Resource) -> bool:
        u = self.usage.get(key)
        if lim.max_apps and app_id not in (u.apps if u is not None else ()):
            if u is not None and len(u.apps) >= lim.max_apps:
                return True
        if lim.max is not None:
            used = u.used._v if u is not None else {}
            mv = lim.max._v
            for k, v in res._v.items():
                m = mv.get(k)
                if m is not None and used.get(k, 0) + v > m:
                    return True
        return False

    # ---------------------------------------------------------------- usage hooks
    def on_alloc(self, app: "Application", res: Resource) -> None:
        self._track(app, res, self._add)

    def on_release(self, app: "Application", res: Resource) -> None:
        self._track(app, res, self._sub)

    def _track(self, app: "Application", res: Resource, change) -> None:
        """Apply ``change`` (add or sub) to the app's user and group usage at every limited queue."""
        if not self.active:
            return
        group = self.group_of(app)
        for q in app.queue.chain():
            if q.path not in self.by_path:
                continue
            change((q.path, USER, app.user), app.app_id, res)
            if group:
                change((q.path, GROUP, group), app.app_id, res)

    def _add(self, key: tuple[str, str, str], app_id: str, res: Resource) -> None:
        u = self.usage.get(key)
        if u is None:
            u = self.usage[key] = _Usage()
        u.used = u.used.add(res)
        u.apps[app_id] = u.apps.get(app_id, 0) + 1

    def _sub(self, key: tuple[str, str, str], app_id: str, res: Resource) -> None:
        u = self.usage.get(key)
        if u is None:
            return
        u.used = u.used.sub_eliminate_negative(res)
        left = u.apps.get(app_id, 0) - 1
        if left > 0:
            u.apps[app_id] = left
        else:
            u.apps.pop(app_id, None)
        if not u.apps and u.used.is_zero():
            del self.usage[key]

    def forget_app(self, app_id: str) -> None:
        self._group_cache.pop(app_id, None)

    # ---------------------------------------------------------------- views
    def limit_for(self, path: str, kind: str, name: str) -> Limit | None:
        """The limit that applies to user/group ``name`` at queue ``path`` (REST views)."""
        ql = self.by_path.get(path)
        if ql is None:
            return None
        return ql.user_limit(name) if kind == USER else ql.group_limit(name)


def describe(lim: Limit, path: str, app: "Application", group: str) -> tuple[str, str]:
    """(event reason, message) for an ask held by ``lim``."""
    who = app.user if lim.kind == USER else group
    which = f"{lim.kind} {who}" if lim.name != WILDCARD else f"{lim.kind} {who} (wildcard {WILDCARD})"
    parts = []
    if lim.max is not None:
        parts.append(f"maxresources {lim.max}")
    if lim.max_apps:
        parts.append(f"maxapplications {lim.max_apps}")
    reason = "UserLimitReached" if lim.kind == USER else "GroupLimitReached"
    return reason, (f"Application {app.app_id} does not fit the limit of {which} in queue {path} "
                    f"({', '.join(parts)})")
