"""Queues: the hierarchy under ``root``, its resource bookkeeping, states and properties.

Each queue tracks ``allocated``, ``pending`` and ``preempting`` resources; every
change is applied to the queue and all its ancestors up to root. A queue never
allocates beyond its own ``max`` or any ancestor's (``fits_headroom``). Root's
max is the partition's total node capacity (YuniKorn), set by the partition.

Object states (seed 004): Active, Draining, Stopped. A queue removed from the
config drains: it keeps scheduling its existing work, takes no new applications
or child queues, and is removed by ``QueueTree.remove_empty`` once it holds
nothing. Dynamic queues (made by placement) are removed the same way when empty.

``QueueTree`` / ``Queue`` implement the protocol the placement package uses:
``tree.find(path)``, ``queue.path``, ``.is_leaf``, ``.parent``,
``.check_submit_access(user, groups)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator, Mapping

from common.acl import ACL, queue_allows
from common.config.model import ChildTemplateConfig, QueueConfig
from common.config.policies import (DEFAULT_UNSCHED_BACKOFF_DELAY_NS, PROPERTY_APP_SORT_POLICY,
                                    PROPERTY_APP_SORT_PRIORITY, PROPERTY_PRIORITY_OFFSET,
                                    PROPERTY_PRIORITY_POLICY, PROPERTY_QUOTA_PREEMPTION_DELAY,
                                    PROPERTY_UNSCHED_BACKOFF, PROPERTY_UNSCHED_BACKOFF_DELAY,
                                    STRICT_PROPERTIES, AppSortPolicy, PriorityPolicy,
                                    parse_priority_policy)
from common.config.policies import parse_app_sort_policy as _parse_app_sort_policy
from common.resources import ZERO, Resource

from .objects import INT32_MAX, INT32_MIN

__all__ = ["Queue", "QueueTree", "ObjectState", "AppSortPolicy", "QueueCreateError",
           "parse_app_sort_policy", "QUEUE_NAME_RE", "RECOVERY_QUEUE"]

QUEUE_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Leaf that holds applications known only from recovered allocations (YuniKorn >= 1.4 idea).
RECOVERY_QUEUE = "root.@recovery@"

PROP_SORT_POLICY = PROPERTY_APP_SORT_POLICY
PROP_SORT_PRIORITY = PROPERTY_APP_SORT_PRIORITY
PROP_PRIORITY_POLICY = PROPERTY_PRIORITY_POLICY
PROP_PRIORITY_OFFSET = PROPERTY_PRIORITY_OFFSET
_NOT_INHERITED = {PROP_PRIORITY_POLICY: "default", PROP_PRIORITY_OFFSET: "0"}


class ObjectState(str, Enum):
    ACTIVE = "Active"
    DRAINING = "Draining"
    STOPPED = "Stopped"


def parse_app_sort_policy(value: str | None) -> AppSortPolicy:
    """Missing or unknown -> fifo (YuniKorn; the config loader warns about unknown names)."""
    try:
        return _parse_app_sort_policy(value or "")
    except ValueError:
        return AppSortPolicy.FIFO


class QueueCreateError(ValueError):
    """A queue cannot be created (dynamic creation); the message is YuniKorn's."""


def _res(m: Mapping[str, int] | None) -> Resource | None:
    """Config resources are only stored when strictly > 0 (YuniKorn); else undefined."""
    if not m:
        return None
    r = Resource(dict(m))
    return r if r.strictly_greater_than_zero() else None


@dataclass(slots=True, eq=False)
class Queue:
    name: str
    path: str
    parent: "Queue | None"
    is_leaf: bool
    dynamic: bool = False
    state: ObjectState = ObjectState.ACTIVE
    guaranteed: Resource | None = None
    max: Resource | None = None
    allocated: Resource = ZERO
    pending: Resource = ZERO
    preempting: Resource = ZERO
    properties: dict[str, str] = field(default_factory=dict)
    sort_policy: AppSortPolicy = AppSortPolicy.FIFO
    priority_enabled: bool = True
    priority_fence: bool = False
    priority_offset: int = 0
    max_apps: int = 0
    running_apps: int = 0
    starting_apps: int = 0  # apps of this leaf in Starting (stateaware admits one at a time)
    sa_epoch: int = 0  # bumps when starting_apps drops to 0 (stateaware may admit an app)
    submit_acl: ACL = field(default_factory=ACL)
    admin_acl: ACL = field(default_factory=ACL)
    template: ChildTemplateConfig | None = None
    # YuniKorn 1.8 properties (docs/yunikorn-compat.md): unschedulable-ask backoff of the leaf's
    # apps (0: off), and quota-change preemption: its delay (0: off) and when it is due (0: not)
    backoff_threshold: int = 0
    backoff_delay_ns: int = DEFAULT_UNSCHED_BACKOFF_DELAY_NS
    quota_preemption_delay_ns: int = 0
    quota_preemption_at_ns: int = 0
    children: dict[str, "Queue"] = field(default_factory=dict)
    apps: dict[str, object] = field(default_factory=dict)  # app_id -> Application (leaf)

    # ---------------------------------------------------------------- protocol for placement
    def check_submit_access(self, user: str, groups: tuple[str, ...] | list[str]) -> bool:
        """Submit or admin ACL of this queue or any ancestor allows the user (YuniKorn)."""
        return queue_allows(self, user, groups, submit=True)

    def check_admin_access(self, user: str, groups: tuple[str, ...] | list[str]) -> bool:
        return queue_allows(self, user, groups, submit=False)

    # ---------------------------------------------------------------- bookkeeping
    def chain(self) -> Iterator["Queue"]:
        """This queue and its ancestors up to root."""
        q: Queue | None = self
        while q is not None:
            yield q
            q = q.parent

    # the chain walked with a loop, not chain(): these run for every ask and allocation
    def add_pending(self, r: Resource) -> None:
        q: Queue | None = self
        while q is not None:
            q.pending = q.pending.add(r)
            q = q.parent

    def sub_pending(self, r: Resource) -> None:
        q: Queue | None = self
        while q is not None:
            q.pending = q.pending.sub_eliminate_negative(r)
            q = q.parent

    def add_allocated(self, r: Resource) -> None:
        q: Queue | None = self
        while q is not None:
            q.allocated = q.allocated.add(r)
            q = q.parent

    def pending_placed(self, r: Resource) -> None:
        """One repeat of ``r`` was allocated: it moves from pending to allocated, up to root."""
        q: Queue | None = self
        while q is not None:
            q.pending = q.pending.sub(r)
            q.allocated = q.allocated.add(r)
            q = q.parent

    def sub_allocated(self, r: Resource) -> None:
        for q in self.chain():
            q.allocated = q.allocated.sub_checked(r, f"queue {q.path} allocated")

    def fits_headroom(self, r: Resource) -> "Queue | None":
        """``None`` if ``allocated + r`` stays within the max of this queue and every ancestor
        (types missing in a max are unlimited); else the first queue that blocks it."""
        rv = r._v
        q: Queue | None = self
        while q is not None:
            m = q.max
            if m is not None:
                mv = m._v
                av = q.allocated._v
                for k, v in rv.items():
                    lim = mv.get(k)
                    if lim is not None and av.get(k, 0) + v > lim:
                        return q
            q = q.parent
        return None

    def max_apps_reached(self) -> "Queue | None":
        """The first queue up the chain whose maxapplications is used up, else None."""
        for q in self.chain():
            if q.max_apps and q.running_apps >= q.max_apps:
                return q
        return None

    def starting_changed(self, delta: int) -> None:
        self.starting_apps += delta
        if delta < 0 and self.starting_apps <= 0:
            self.starting_apps = 0
            self.sa_epoch += 1

    def is_empty(self) -> bool:
        return not self.apps and not self.children and self.allocated.is_zero() \
            and self.pending.is_zero()

    @property
    def schedulable(self) -> bool:
        return self.state is not ObjectState.STOPPED

    @property
    def accepts_new_work(self) -> bool:
        return self.state is ObjectState.ACTIVE

    def effective_max(self) -> Resource | None:
        """Component-wise permissive min of the max of this queue and its ancestors, root excluded."""
        out: Resource | None = None
        for q in self.chain():
            if q.parent is None:
                break
            if q.max is not None:
                out = q.max if out is None else out.component_wise_min_permissive(q.max)
        return out

    def priority_value(self, current: int) -> int:
        """Reported priority from the current (max app) priority, per ``priority.policy``."""
        if self.priority_fence:
            return self.priority_offset
        if current == INT32_MIN:
            return INT32_MIN
        return max(INT32_MIN, min(INT32_MAX, current + self.priority_offset))

    # ---------------------------------------------------------------- config
    def apply_properties(self, props: Mapping[str, str]) -> None:
        self.properties = dict(props)
        self.sort_policy = parse_app_sort_policy(props.get(PROP_SORT_POLICY)) if self.is_leaf \
            else AppSortPolicy.FAIR
        self.priority_enabled = props.get(PROP_SORT_PRIORITY, "enabled").lower() != "disabled"
        try:
            self.priority_fence = parse_priority_policy(props.get(PROP_PRIORITY_POLICY, "")) \
                is PriorityPolicy.FENCE
        except ValueError:
            self.priority_fence = False  # unknown -> default (YuniKorn)
        try:
            off = int(props.get(PROP_PRIORITY_OFFSET, "0"))
        except ValueError:
            off = 0
        self.priority_offset = max(INT32_MIN, min(INT32_MAX, off))
        # validated by the loader; a dynamic queue's template values too
        self.backoff_threshold = _strict(props, PROPERTY_UNSCHED_BACKOFF, 0)
        self.backoff_delay_ns = _strict(props, PROPERTY_UNSCHED_BACKOFF_DELAY, DEFAULT_UNSCHED_BACKOFF_DELAY_NS)
        self.quota_preemption_delay_ns = _strict(props, PROPERTY_QUOTA_PREEMPTION_DELAY, 0)


def _strict(props: Mapping[str, str], key: str, default: int) -> int:
    """A strictly validated property's value; ``default`` when absent (or invalid: a config
    the loader did not check, e.g. built by a test, falls back as YuniKorn does)."""
    text = props.get(key)
    if text is None:
        return default
    try:
        return STRICT_PROPERTIES[key](text)
    except ValueError:
        return default


def _inherit(parent_props: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """Configured children inherit all parent properties except the priority.* pair."""
    merged = dict(parent_props)
    merged.update(_NOT_INHERITED)
    merged.update(own)
    return merged


class QueueTree:
    """The queue hierarchy of one partition. Paths are full and lower-case (``root.a.b``)."""

    __slots__ = ("root", "_by_path", "stateaware_fifo")

    def __init__(self, root_config: QueueConfig, stateaware_fifo: bool = False) -> None:
        # compatibility 1.6+: stateaware is gone, its queues run fifo (YUNIKORN-2483)
        self.stateaware_fifo = stateaware_fifo
        self.root = Queue(name="root", path="root", parent=None, is_leaf=False)
        self._by_path: dict[str, Queue] = {"root": self.root}
        self._apply(self.root, root_config, {}, created=[])

    # ---------------------------------------------------------------- lookup
    def find(self, path: str) -> Queue | None:
        """Full path, case-insensitive; ``root.`` prefix optional for convenience."""
        p = path.lower()
        q = self._by_path.get(p)
        if q is None and p and not p.startswith("root"):
            q = self._by_path.get("root." + p)
        return q

    def __iter__(self) -> Iterator[Queue]:
        return iter(list(self._by_path.values()))

    def leaves(self) -> list[Queue]:
        return [q for q in self._by_path.values() if q.is_leaf]

    # ---------------------------------------------------------------- config
    def update(self, root_config: QueueConfig) -> tuple[list[str], list[str]]:
        """Apply a new config: update/create configured queues, drain managed queues that are
        no longer configured. Returns (created paths, draining paths)."""
        created: list[str] = []
        seen: set[str] = set()
        self._apply(self.root, root_config, {}, created, seen)
        draining: list[str] = []
        for q in list(self._by_path.values()):
            if q.path not in seen and not q.dynamic and q.state is ObjectState.ACTIVE:
                q.state = ObjectState.DRAINING
                draining.append(q.path)
        return created, draining

    def _apply(self, q: Queue, cfg: QueueConfig, parent_props: Mapping[str, str],
               created: list[str], seen: set[str] | None = None) -> None:
        if seen is not None:
            seen.add(q.path)
        if q.state is ObjectState.DRAINING:
            # Korral: a queue put back in the config is active again (v1.2 keeps it draining).
            q.state = ObjectState.ACTIVE
        q.dynamic = False
        q.is_leaf = not cfg.is_parent and q is not self.root
        props = _inherit(parent_props, cfg.properties) if q.parent is not None else dict(cfg.properties)
        self._set_properties(q, props)
        # Korral: an empty max/guaranteed in an update clears the old value (v1.2 keeps it).
        q.guaranteed = _res(cfg.resources.guaranteed)
        if q.parent is not None:
            q.max = _res(cfg.resources.max)
        q.max_apps = cfg.maxapplications
        try:
            q.submit_acl = ACL.parse(cfg.submitacl)
            q.admin_acl = ACL.parse(cfg.adminacl)
        except ValueError as exc:
            raise ValueError(f"queue {q.path}: {exc}") from None
        q.template = cfg.childtemplate
        for child_cfg in cfg.queues:
            name = child_cfg.name.lower()
            child = q.children.get(name)
            if child is None:
                child = Queue(name=name, path=f"{q.path}.{name}", parent=q,
                              is_leaf=not child_cfg.is_parent)
                q.children[name] = child
                self._by_path[child.path] = child
                created.append(child.path)
            self._apply(child, child_cfg, q.properties, created, seen)

    # ---------------------------------------------------------------- dynamic queues
    def create_dynamic(self, path: str, user: str, groups: tuple[str, ...],
                       check_acl: bool = True) -> tuple[Queue, list[str]]:
        """Create the missing queues of ``path`` (dynamic parents, dynamic leaf).

        Raises ``QueueCreateError`` with YuniKorn's messages. Returns the leaf and the
        paths created.
        """
        path = path.lower()
        parts = path.split(".")
        if parts[0] != "root":
            parts.insert(0, "root")
            path = ".".join(parts)
        existing = self.root
        i = 1
        while i < len(parts):
            nxt = existing.children.get(parts[i])
            if nxt is None:
                break
            existing = nxt
            i += 1
        if i == len(parts):
            return existing, []
        if check_acl and not existing.check_submit_access(user, groups):
            raise QueueCreateError(f"submit access to queue {existing.path} denied during create of: {path}")
        if existing.is_leaf:
            raise QueueCreateError(f"creation of queue {existing.path} failed parent is already a leaf: {path}")
        if existing.state is not ObjectState.ACTIVE:
            raise QueueCreateError(f"failed to create rule based queue {path}: parent {existing.path} is draining")
        for name in parts[i:]:
            if not QUEUE_NAME_RE.match(name) and f"{existing.path}.{name}" != RECOVERY_QUEUE:
                raise QueueCreateError(f"failed to create rule based queue {path}: invalid queue name {name}")
        created: list[str] = []
        q = existing
        for j, name in enumerate(parts[i:], start=i):
            leaf = j == len(parts) - 1
            child = Queue(name=name, path=f"{q.path}.{name}", parent=q, is_leaf=leaf, dynamic=True)
            self._init_dynamic(child, q)
            q.children[name] = child
            self._by_path[child.path] = child
            created.append(child.path)
            q = child
        return q, created

    def _init_dynamic(self, child: Queue, parent: Queue) -> None:
        template = None
        p: Queue | None = parent
        while p is not None:  # nearest ancestor template applies (YuniKorn)
            if p.template is not None:
                template = p.template
                break
            p = p.parent
        if child.is_leaf and template is not None:
            self._set_properties(child, dict(template.properties))
            child.guaranteed = _res(template.resources.guaranteed)
            child.max = _res(template.resources.max)
            child.max_apps = template.maxapplications  # Korral applies it (v1.2 does not)
        else:
            # deprecated YuniKorn behaviour: without a template, inherit the parent's properties
            self._set_properties(child, _inherit(parent.properties, {}))
        child.template = None

    def _set_properties(self, q: Queue, props: Mapping[str, str]) -> None:
        q.apply_properties(props)
        if self.stateaware_fifo and q.sort_policy is AppSortPolicy.STATEAWARE:
            q.sort_policy = AppSortPolicy.FIFO

    def remove_empty(self) -> list[str]:
        """Remove empty dynamic or draining queues, deepest first. Returns removed paths."""
        removed: list[str] = []
        for q in sorted(self._by_path.values(), key=lambda x: -x.path.count(".")):
            if q.parent is None:
                continue
            if (q.dynamic or q.state is ObjectState.DRAINING) and q.is_empty():
                del q.parent.children[q.name]
                del self._by_path[q.path]
                removed.append(q.path)
        return removed
