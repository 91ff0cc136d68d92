"""Quota-change preemption (YuniKorn 1.8, YUNIKORN-3133..3150; phase 2 1.9, YUNIKORN-3249/3246):
a queue whose max was lowered below its usage is brought back down after a delay.

Config: partition ``preemption.quotapreemptionenabled`` (default false) and the queue property
``quota.preemption.delay`` (default 0: never; inherited by configured children). Only managed
(configured) queues take part.

When it is armed (``Queue.quota_preemption_at_ns``): on a config update, a managed queue over
its max (types in max) with a delay gets ``now + delay`` unless already armed (then a changed
delay shifts it by the difference); a queue within its max, without max or delay is disarmed.
An allocation booked by recovery that takes a queue over its max arms it the same way (how a
restart re-arms it). A timer fires at the due time.

When it fires: the tree is walked from root; a queue that is armed, due and still over its max
is enforced (its subtree is not visited again) and disarmed:
- the amount to take per type = usage over max, capped by ``usage - guaranteed`` of the queue
  and of every ancestor with a guarantee of that type (never below a guarantee: a type whose
  path holds a queue at or under its guarantee gets 0);
- a parent shares its amount among its children by their usage above their guarantee
  (children at or under it get nothing), down to the leaves;
- a leaf's victims: allocations sharing a type with its amount, no required node, no
  placeholder, allowed to be preempted (``allowPreemptSelf`` and the ``allowPreemption`` tag);
  order: non-originators first, more of the victim's types in the amount first, lower
  priority, newer (by the hour), smaller share of the max, newer; each taken while it fits in what is
  left and the total stays within the amount (YuniKorn never takes more than the excess, so a
  queue whose allocations are larger than its excess may stay over by less than one of them).
Victims are released at once (``PREEMPTED_BY_SCHEDULER``, YuniKorn's message), with a REQUEST
event each and a QUEUE event summarising the round.

Deliberate differences (docs/yunikorn-compat.md): opted-out allocations and placeholders are
never victims (YuniKorn takes them, opted-out ones even first); a child's share is its usage
above its guarantee (YuniKorn takes the absolute difference, so a child under its guarantee
gets a share too); quota preemption is part of the partition's timers, not a separate loop.

What it uses: the queue tree, the timers, the outcomes, and ``release`` (the partition's: a
victim leaves the books and its app may move on). Who may use it: the partition
(``config_updated``, ``recovered``). Nothing here runs on the scheduling path: with the
partition flag off, no queue is ever armed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from common.constants import TAG_REQUIRED_NODE
from common.resources import Resource

from .outcomes import EventType, Termination

if TYPE_CHECKING:  # pragma: no cover
    from .objects import Allocation
    from .outcomes import Outcomes
    from .queue import Queue, QueueTree
    from .timers import Timers

__all__ = ["QuotaPreemption", "T_QUOTA", "MSG_QUOTA_RELEASE", "excess_over_max", "plan"]

T_QUOTA = "quota"
MSG_QUOTA_RELEASE = "preempting allocations to enforce new max quota for queue : {path}"
_HOUR_NS = 3_600_000_000_000


def excess_over_max(q: "Queue") -> dict[str, int]:
    """Per type of the queue's max, how far its usage is above it (only types over)."""
    if q.max is None:
        return {}
    av = q.allocated._v
    return {k: av.get(k, 0) - m for k, m in q.max._v.items() if av.get(k, 0) > m}


class QuotaPreemption:
    """Arming and enforcement for one partition (see module doc). ``enabled``: the partition's
    ``preemption.quotapreemptionenabled``."""

    __slots__ = ("enabled", "_queues", "_timers", "_outcomes", "_release")

    def __init__(self, enabled: bool, queues: "QueueTree", timers: "Timers", outcomes: "Outcomes",
                 release: Callable[["Allocation", Termination, str, int], None]) -> None:
        self.enabled = enabled
        self._queues = queues
        self._timers = timers
        self._outcomes = outcomes
        self._release = release
        timers.register(T_QUOTA, self._on_due)  # the partition's timers fire the due queues

    # ---------------------------------------------------------------- arming
    def config_updated(self, enabled: bool, old_delays: dict[str, int], now: int) -> None:
        """After a config update (``enabled``: its quotapreemptionenabled): (re)arm or disarm
        every managed queue; ``old_delays`` are the delays before the update by queue path."""
        self.enabled = enabled
        for q in self._queues:
            if q.parent is None:
                continue
            if not self.enabled or q.dynamic:
                q.quota_preemption_at_ns = 0
                continue
            self._arm(q, now, old_delays.get(q.path, q.quota_preemption_delay_ns))

    def recovered(self, leaf: "Queue", now: int) -> None:
        """An allocation booked or grown without a max check (recovery, an in-place resize):
        arm the queues it took over."""
        if not self.enabled:
            return
        for q in leaf.chain():
            if q.parent is not None and not q.dynamic and not q.quota_preemption_at_ns:
                self._arm(q, now, q.quota_preemption_delay_ns)

    def _arm(self, q: "Queue", now: int, old_delay: int) -> None:
        delay = q.quota_preemption_delay_ns
        if not delay or not excess_over_max(q):
            q.quota_preemption_at_ns = 0
            return
        if q.quota_preemption_at_ns:
            q.quota_preemption_at_ns += delay - old_delay  # may land in the past: due at once
        else:
            q.quota_preemption_at_ns = now + delay
        self._timers.schedule(q.quota_preemption_at_ns, T_QUOTA, q.path)

    # ---------------------------------------------------------------- enforcement
    def _on_due(self, path: str, gen: int, now: int) -> None:
        """A timer fired: enforce every due queue, top-down (stale timers find nothing)."""
        if self.enabled:
            self._walk(self._queues.root, now)

    def _walk(self, q: "Queue", now: int) -> None:
        for child in list(q.children.values()):
            at = child.quota_preemption_at_ns
            if at and at <= now and not child.dynamic:
                child.quota_preemption_at_ns = 0
                if excess_over_max(child):
                    self._enforce(child, now)
                continue  # its subtree is settled with it
            self._walk(child, now)

    def _enforce(self, q: "Queue", now: int) -> None:
        amount, victims = plan(q)
        if not amount:
            return
        claimed: dict[str, int] = {}
        msg = MSG_QUOTA_RELEASE.format(path=q.path)
        out = self._outcomes
        for a in victims:
            out.event(EventType.REQUEST, a.key, "Preempted",
                      f"Preempted by Quota change enforcement process in {q.path}", now, group=a.app_id)
            self._release(a, Termination.PREEMPTED_BY_SCHEDULER, msg, now)
            for k, v in a.resource._v.items():
                claimed[k] = claimed.get(k, 0) + v
        out.event(EventType.QUEUE, q.path, "QuotaPreemption",
                  f"Quota Preemption results summary: preemptable resources: {Resource(amount)}, "
                  f"claimed resources: {Resource(claimed)}, selected victims: {len(victims)}, "
                  f"preempted victims: {len(victims)}", now)


def plan(q: "Queue") -> tuple[dict[str, int], list["Allocation"]]:
    """What enforcing ``q``'s max now would take: the amount per type and the victims, leaf by
    leaf. Changes nothing: the enforcement releases them, the config what-if reports them."""
    amount = _amount(q)
    if not amount:
        return {}, []
    leaves: list[tuple["Queue", dict[str, int]]] = []
    _distribute(q, amount, leaves)
    return amount, [a for leaf, share in leaves for a in _victims(leaf, share)]


def _amount(q: "Queue") -> dict[str, int]:
    """The excess over max, capped per type by ``usage - guaranteed`` along the path (0 when a
    queue of the path is at or under its guarantee in that type)."""
    out: dict[str, int] = {}
    for k, v in excess_over_max(q).items():
        for x in q.chain():
            g = x.guaranteed
            if g is not None and k in g._v:
                v = min(v, x.allocated._v.get(k, 0) - g._v[k])
        if v > 0:
            out[k] = v
    return out


def _distribute(q: "Queue", amount: dict[str, int], leaves: list) -> None:
    """Share ``amount`` down to the leaves by each child's usage above its guarantee."""
    if q.is_leaf:
        leaves.append((q, amount))
        return
    above: dict["Queue", dict[str, int]] = {}
    total: dict[str, int] = {}
    for child in q.children.values():
        gv = child.guaranteed._v if child.guaranteed is not None else {}
        over = {k: child.allocated._v.get(k, 0) - gv.get(k, 0) for k in amount}
        over = {k: v for k, v in over.items() if v > 0}
        if over:
            above[child] = over
            for k, v in over.items():
                total[k] = total.get(k, 0) + v
    for child, over in above.items():
        share = {k: amount[k] * v // total[k] for k, v in over.items()}
        share = {k: v for k, v in share.items() if v > 0}
        if share:
            _distribute(child, share, leaves)


def _victims(leaf: "Queue", amount: dict[str, int]) -> list["Allocation"]:
    cands = []
    qmax = leaf.max._v if leaf.max is not None else {}
    for app in leaf.apps.values():
        for a in app.allocations.values():
            av = a.resource._v
            if a.placeholder or not a.allow_preempt_self or not a.allow_preemption \
                    or TAG_REQUIRED_NODE in a.tags or not any(av.get(k, 0) > 0 for k in amount):
                continue
            match = sum(1 for k in av if k in amount) * 100 // max(len(av), 1)
            share = max((av.get(k, 0) / qmax[k] for k in amount if qmax.get(k)), default=0.0)
            # YuniKorn's order, then newest first within the hour (YuniKorn: map order)
            cands.append(((a.originator, -match, a.priority, -(a.create_time_ns // _HOUR_NS), share,
                           -a.create_time_ns, a.uuid), a))
    cands.sort(key=lambda t: t[0])
    left = dict(amount)
    out = []
    for _, a in cands:
        av = a.resource._v
        if all(av.get(k, 0) <= v for k, v in left.items()):
            out.append(a)
            for k in left:
                left[k] -= av.get(k, 0)
            if not any(v > 0 for v in left.values()):
                break
    return out
