"""What a new config would do to the live partition (``korral config apply --dry-run``).

Pure and read-only: the answer is built from shadow objects made with the core's own classes
from the new config and the partition's current apps and usage — ``QueueTree`` for the queues
(their max, what drains), ``LimitTracker`` for user/group limits, ``PlacementBridge`` with
``lifecycle.place_app`` for where each app would be placed now — and the partition itself is
never touched. On demand only (O(queues + apps + allocations)).

- ``config_whatif(p, config)``: the partition stays, with ``config``. ``refused`` holds the
  reason when ``update_config`` would refuse it (then nothing else is evaluated); else
  ``queues`` (``draining``: managed queues left out of the config that still hold work, they
  drain; ``removed``: those that are empty, removed at once; ``added``), ``overMax`` (each queue
  whose usage exceeds its new max, by how much per type; the scheduler places nothing more there
  until usage drops below it), ``limits`` (each user/group whose running apps exceed a new
  limit), ``placement`` (where the rules would now place each active app: ``unchanged`` count,
  ``moved`` and ``rejected`` lists; placement applies to new submissions only, running apps stay
  where they are).
- ``removal_whatif(p)``: the partition is left out of the config: every app fails
  (``PartitionRemoved``), its allocations are released and its nodes removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.config.errors import ConfigError
from common.config.model import PartitionConfig
from common.resources import ZERO, Resource
from common.timefmt import go_duration

from .commands import AddApp
from .lifecycle import PlacementRejected, place_app
from .limits import LimitTracker
from .placement_bridge import PlacementBridge
from .queue import ObjectState, QueueCreateError, QueueTree
from .quota_preemption import plan

if TYPE_CHECKING:  # pragma: no cover
    from .partition import Partition

__all__ = ["config_whatif", "removal_whatif", "LISTED"]

LISTED = 1000  # entries per list at most (counts are always complete)


def config_whatif(p: "Partition", config: PartitionConfig) -> dict:
    """The effects of ``config`` on ``p`` (see module doc)."""
    try:
        p.check_config(config)
    except ConfigError as exc:
        return {"action": "update", "refused": str(exc)}
    shadow = shadow_queues(p, config)
    return {"action": "update", "queues": _queue_changes(p, config),
            "overMax": _over_max(shadow, config.preemption.quotapreemptionenabled),
            "limits": _over_limits(p, config), "placement": _placement(p, config, shadow)}


def removal_whatif(p: "Partition") -> dict:
    apps = sorted(p.apps)
    return {"action": "remove", "applications": len(apps), "failedApplications": apps[:LISTED],
            "allocations": len(p.allocations), "nodes": len(p.nodes.nodes)}


def shadow_queues(p: "Partition", config: PartitionConfig) -> QueueTree:
    """The queue tree ``p`` would have after ``update_config(config)``: the configured queues,
    the live dynamic queues, and the live managed queues left out of the config (draining), each
    with the live queue's usage and apps (read only), under the new config's settings."""
    tree = QueueTree(config.root)
    configured = {q.path for q in tree}
    for q in sorted(p.queues, key=lambda x: x.path.count(".")):
        if q.path in configured or tree.find(q.path) is not None:
            continue
        try:
            made, _ = tree.create_dynamic(q.path, "", (), check_acl=False)
        except QueueCreateError:
            continue  # under a queue that cannot take children now: placement finds no queue there either
        made.is_leaf = q.is_leaf
        if not q.dynamic or q.state is ObjectState.DRAINING:
            made.dynamic, made.state = False, ObjectState.DRAINING
    for q in tree:
        live = p.queues.find(q.path)
        if live is not None:
            q.allocated, q.pending, q.apps = live.allocated, live.pending, dict(live.apps)
    return tree


def _queue_changes(p: "Partition", config: PartitionConfig) -> dict:
    configured = {q.path for q in QueueTree(config.root)}
    draining, removed = [], []
    for q in p.queues:
        if q.parent is None or q.dynamic or q.path in configured or q.state is not ObjectState.ACTIVE:
            continue
        if q.is_empty():
            removed.append(q.path)
        else:
            draining.append({"queue": q.path, "applications": _apps_below(q), "allocated": _res(q.allocated)})
    live = {q.path for q in p.queues}
    return {"draining": sorted(draining, key=lambda d: d["queue"]), "removed": sorted(removed),
            "added": sorted(configured - live)}


def _apps_below(q) -> int:
    return len(q.apps) + sum(_apps_below(c) for c in q.children.values())


def _over_max(shadow: QueueTree, quota_preemption: bool) -> list[dict]:
    out = []
    for q in shadow:
        over = _over(q.allocated, q.max) if q.parent is not None else {}
        if over:
            out.append({"queue": q.path, "max": _res(q.max), "allocated": _res(q.allocated), "overBy": over,
                        "guaranteed": _res(q.guaranteed) if q.guaranteed is not None else {},
                        "quotaPreemption": _quota_preemption(q, quota_preemption)})
    return sorted(out, key=lambda d: d["queue"])[:LISTED]


def _quota_preemption(q, enabled: bool) -> dict:
    """What quota-change preemption would do to ``q`` (over its new max): why not, or after
    which delay it would take how much and which allocations (``quota_preemption.plan`` on the
    live usage; by then the usage may have changed)."""
    if not enabled:
        return {"enabled": False, "reason": "preemption.quotapreemptionenabled is off for the partition"}
    if q.dynamic:
        return {"enabled": False, "reason": "the queue is not managed (dynamic queues take no part)"}
    if not q.quota_preemption_delay_ns:
        return {"enabled": False, "reason": "no quota.preemption.delay on the queue (0: never)"}
    amount, victims = plan(q)
    if not amount:
        return {"enabled": True, "delay": go_duration(q.quota_preemption_delay_ns), "preemptable": {},
                "reason": "nothing above the guaranteed resources along its path to take", "victimCount": 0,
                "victims": []}
    return {"enabled": True, "delay": go_duration(q.quota_preemption_delay_ns), "preemptable": amount,
            "victimCount": len(victims),
            "victims": [{"applicationID": a.app_id, "allocationKey": a.key, "queue": a.queue_path,
                         "resource": _res(a.resource)}
                        for a in victims[:LISTED]]}


def _over_limits(p: "Partition", config: PartitionConfig) -> list[dict]:
    """Users and groups whose current usage breaks a limit of ``config`` (their apps named)."""
    tracker = LimitTracker()
    tracker.configure(config, p.apps.values())
    out = []
    for (path, kind, name), usage in sorted(tracker.usage.items()):
        lim = tracker.limit_for(path, kind, name)
        if lim is None:
            continue
        over = _over(usage.used, lim.max)
        too_many = bool(lim.max_apps) and len(usage.apps) > lim.max_apps
        if over or too_many:
            out.append({"queue": path, kind: name, "limit": lim.name, "maxResources": _res(lim.max or ZERO),
                        "maxApplications": lim.max_apps, "used": _res(usage.used), "overBy": over,
                        "runningApplications": len(usage.apps), "applications": sorted(usage.apps)[:LISTED]})
    return out[:LISTED]


def _placement(p: "Partition", config: PartitionConfig, shadow: QueueTree) -> dict:
    bridge = PlacementBridge(config.placementrules, p.settings.group_lookup)
    unchanged, moved, rejected = 0, [], []
    for app in sorted(p.apps.values(), key=lambda a: a.seq):
        if app.recovered_only:
            continue
        cmd = AddApp(app.app_id, app.requested_queue, app.user, app.groups, dict(app.tags))
        try:
            queue, _ = place_app(bridge, shadow, cmd, app.groups, p.settings.compat)
        except PlacementRejected as r:
            rejected.append({"applicationID": app.app_id, "user": app.user, "queue": app.queue.path,
                             "reason": r.reason + (f" ({r.detail})" if r.detail else "")})
            continue
        if queue.path == app.queue.path:
            unchanged += 1
        else:
            moved.append({"applicationID": app.app_id, "user": app.user, "queue": app.queue.path,
                          "wouldBe": queue.path})
    return {"unchanged": unchanged, "moved": moved[:LISTED], "movedTotal": len(moved),
            "rejected": rejected[:LISTED], "rejectedTotal": len(rejected)}


def _over(used: Resource, limit: Resource | None) -> dict[str, int]:
    """Per type of ``limit``, how far ``used`` exceeds it (only the types that do)."""
    if limit is None:
        return {}
    return {k: used.get(k) - v for k, v in limit.items() if used.get(k) > v}


def _res(r: Resource) -> dict[str, int]:
    return r.prune().as_dict()
