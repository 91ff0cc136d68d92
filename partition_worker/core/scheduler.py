"""One scheduling cycle (seed 003's pseudo code, without YuniKorn's one-allocation-per-cycle cap).

What it owns: the order of work within a cycle (reserved asks, then queues, apps, asks), the
admission of an ask (``admit``: the user/group limits, then the queue headroom, in that
order in both passes) and what an ask that waits reports. What it uses, given at
construction: root, the nodes, the apps, the ledger, the limits, the gangs, the outcomes, the
settings, ``preemption.Preemption``, and the partition's ``allocate`` / ``replace_placeholder``
(an allocation and what follows for its app). Nodes are chosen by ``node_choice.find_node``,
nodes reserved by ``reservations.maybe_reserve``; what the cycle learns as it goes is in
``cycle.Cycle``. Who may use it: the partition (``Scheduler.run_cycle``).

Order of work:

1. Reserved asks first: each tries its reserved node, then any other node.
2. Then repeatedly descend from root: children with pending work by the fair queue order
   (priority desc, share of guaranteed asc, share of max asc, more pending first, path;
   with ``application.sort.priority: disabled`` the shares come first), apps of a leaf
   by the leaf's policy (fifo / fair / stateaware), asks of an app by priority desc
   then creation time, nodes in the node policy order. Each descent places one
   allocation; the cycle ends when a descent finds nothing to place.

Termination and cost: within one cycle nodes and queue headroom only shrink, so an
ask, app or queue that failed once is skipped for the rest of the cycle ("blocked").
Each ask therefore fails at most once per cycle, and every other descent makes an
allocation. A "failed shape" memo skips asks at least as large as one that already
fitted no node this cycle, so a full cluster with many identical pending asks costs
one node scan, not one per ask.

Scheduling states (SI UpdateContainerSchedulingState) are reported on change only:
SKIPPED when the queue headroom blocks the ask, FAILED when it fits the queue but no
node ("request is waiting for cluster resources become available", YuniKorn's text),
RESERVED when it reserves a node, SCHEDULED when a previously waiting ask is placed.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from enum import Enum
from typing import TYPE_CHECKING, Callable, Mapping

from common.resources import Resource

from .app_state import AppState
from .backoff import start_backoff
from .cycle import Cycle, CycleResult, SizeMemo
from .diagnosis import why_unplaced
from .fair_share import fair_share
from .feasibility import CHAIN, Purpose, is_plain, signature
from .limits import describe as describe_limit
from .node_choice import find_node
from .objects import INT32_MIN
from .outcomes import EventType, SchedState
from .queue import AppSortPolicy, Queue
from .reservations import NO_NODE, RESERVED, maybe_reserve
from .topology import REASON_PLACED, REASON_WAITING, REQUIRED, choose

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .gang import Gangs
    from .ledger import Ledger
    from .limits import Limit, LimitTracker
    from .node import Node, NodeCollection
    from .objects import Allocation, Ask, Reservation
    from .outcomes import Outcomes
    from .preemption import Preemption
    from .settings import CoreSettings

__all__ = ["Scheduler", "usage_share", "WAITING_FOR_CLUSTER"]

WAITING_FOR_CLUSTER = "request is waiting for cluster resources become available"
_SCHEDULABLE_APP_STATES = frozenset({AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING,
                                     AppState.COMPLETING})


class _Verdict(Enum):
    """How an attempt at an ask ended when it placed nothing; either way it is done for the cycle."""

    WAITS = "waits"  # held (limit, queue, gang), reserved or preempting, or a required node's
    UNSCHEDULABLE = "unschedulable"  # fits no node and none was reserved: counts for backoff.py


WAITS, UNSCHEDULABLE = _Verdict.WAITS, _Verdict.UNSCHEDULABLE


class Scheduler:
    """The scheduling cycle of one partition (see module doc)."""

    __slots__ = ("_root", "_nodes", "_apps", "_ledger", "_limits", "_gangs", "_outcomes", "_settings",
                 "_preemption", "_allocate", "_replace_placeholder", "_partition")

    def __init__(self, root: Queue, nodes: "NodeCollection", apps: Mapping[str, "Application"],
                 ledger: "Ledger", limits: "LimitTracker", gangs: "Gangs", outcomes: "Outcomes",
                 settings: "CoreSettings", preemption: "Preemption",
                 allocate: Callable[["Application", "Ask", "Node", int], "Allocation"],
                 replace_placeholder: Callable[["Application", "Ask", "Allocation", int], "Allocation"],
                 partition: str = "") -> None:
        self._root = root
        self._nodes = nodes
        self._apps = apps
        self._ledger = ledger
        self._limits = limits
        self._gangs = gangs
        self._outcomes = outcomes
        self._settings = settings
        self._preemption = preemption
        self._allocate = allocate
        self._replace_placeholder = replace_placeholder
        self._partition = partition  # its name (topology reasons)

    def run_cycle(self, now: int) -> CycleResult:
        """Allocate as many asks as fit now, in policy order. The result's ``visited`` measures
        the cycle's cost so the partition can space out idle cycles over many waiting asks."""
        root = self._root
        if root.max is None or not self._nodes.nodes:
            return CycleResult(0, 0, None)  # no nodes: nothing to schedule on (YuniKorn skips the partition)
        settings = self._settings
        c = Cycle(now, self._nodes, self._apps, self._ledger, settings.stage_timer,
                  settings.compat.fair_share_queue_sort)
        n = self._reserved_pass(c) if self._ledger.reservations else 0
        if not root.pending.is_zero():
            limit = settings.cycle_allocation_limit
            while self._try_queue(c, root) is not None:
                n += 1
                if n == limit:
                    break
        return CycleResult(n, c.visited, c.clock.result() if c.clock is not None else None)

    # ------------------------------------------------------------------------------ admission
    def admit(self, app: "Application", res: Resource) -> "tuple[Limit, str] | Queue | None":
        """What keeps ``app`` from taking ``res`` more, checked in this order by both passes: a
        user/group limit (``(limit, queue path)``), else the first queue whose max it would pass
        (root's max is the cluster size: then no node could take it either). None: admitted,
        the nodes decide."""
        limits = self._limits
        if limits.active:
            held = limits.check(app, res)
            if held is not None:
                return held
        return app.queue.fits_headroom(res)

    # ------------------------------------------------------------------------------ reserved asks
    def _reserved_pass(self, c: Cycle) -> int:
        """Reserved asks first: their reserved node, then any other node."""
        ledger = self._ledger
        apps = self._apps
        n = 0
        for res in list(ledger.reservations.values()):
            app = apps.get(res.app_id)
            ask = app.asks.get(res.ask_key) if app is not None else None
            node = self._nodes.get(res.node_id)
            if ask is None or ask.pending <= 0 or node is None:
                ledger.unreserve(res)
                continue
            if app.state not in _SCHEDULABLE_APP_STATES:
                continue
            hold = self.admit(app, ask.resource)
            if hold is not None and (hold.__class__ is tuple or hold.parent is not None):
                if self._held_too_long(res, hold, c.now):
                    continue  # cancelled: the ask is tried as any other, the node is free again
                c.blocked.add(ask)
                continue  # a user/group limit or a queue max holds it; the reservation stays
            if CHAIN.bind(ask, Purpose.ALLOCATE, apps, nodes=self._nodes).passes(node):
                target = node
            else:
                target = find_node(c, ask)
            if target is None:
                c.blocked.add(ask)
                if ask.required_node:
                    if node.node_id == ask.required_node:
                        self._preemption.required_node_preemption(app, ask, node, c.now)
                else:  # a reserved ask may still preempt (its node or another), once due
                    self._preemption.queue_preemption(c, app, ask)
                continue
            ledger.unreserve(res)
            self._allocate(app, ask, target, c.now)
            if ask.pending <= 0:
                app.mark_exhausted()
            n += 1
        return n

    def _held_too_long(self, res: "Reservation", hold: "tuple[Limit, str] | Queue", now: int) -> bool:
        """A reservation whose ask a queue max or a user/group limit (``hold``) holds is cancelled
        once YuniKorn's wait timeout has passed (compatibility 1.9+, YUNIKORN-3219: cancelled when
        now - (created + timeout) > timeout, twice the timeout after it was made), with a NODE
        event; True when it was."""
        settings = self._settings
        if not settings.compat.cancel_held_reservations \
                or now - res.created_ns <= 2 * settings.reservation_wait_timeout_ns:
            return False
        self._ledger.unreserve(res)
        held_by = f"a user/group limit of queue {hold[1]}" if hold.__class__ is tuple else f"the max of queue {hold.path}"
        self._outcomes.event(EventType.NODE, res.node_id, "ReservationCancelled", (
            f"reservation of node {res.node_id} for ask {res.ask_key} of application {res.app_id} cancelled: "
            f"{held_by} held the ask past the reservation wait timeout"), now, group=res.ask_key)
        return True

    # ------------------------------------------------------------------------------ queues
    def _try_queue(self, c: Cycle, q: Queue) -> "Allocation | None":
        """Descend into the children of ``q`` in fair order. The sorted child list is kept for the
        cycle; after an allocation only the child it went through is re-placed (its usage
        changed, no other child's did), so a parent with many children is not re-sorted."""
        if q.is_leaf:
            return self._try_leaf(c, q)
        order = c.queue_order.children.get(q)
        if order is None:
            prio = q.priority_enabled
            order = [(_queue_key(c, ch, prio), ch) for ch in q.children.values()
                     if ch.schedulable and not ch.pending.is_zero()]
            order = c.queue_order.children[q] = c.timed("queue", sorted, order)
        return _best_first(c, order, self._try_queue, _queue_key, q.priority_enabled)

    # ------------------------------------------------------------------------------ apps
    def _try_leaf(self, c: Cycle, q: Queue) -> "Allocation | None":
        """The apps of leaf ``q`` in its policy's order until one places an allocation: fifo and
        stateaware walk an order sorted once per cycle with a cursor, fair keeps a sorted list."""
        pol = q.sort_policy
        if pol is AppSortPolicy.FAIR:
            return self._try_leaf_fair(c, q)
        memo = c.app_order
        order = memo.fifo.get(q)
        if pol is AppSortPolicy.STATEAWARE:
            if order is None:
                order = memo.fifo[q] = c.timed("app", _stateaware_order, q)
                memo.fifo_cursor[q] = 0
                memo.sa_epoch[q] = q.sa_epoch
            elif memo.sa_epoch.get(q) != q.sa_epoch:
                # the leaf's last Starting app moved on: one Accepted app may start now
                memo.sa_epoch[q] = q.sa_epoch
                _stateaware_admit(c, q, order)
        elif order is None:
            # fifo order does not change within a cycle: sort once, then walk with a cursor
            # (apps backing off are left out: a backlog of them costs nothing per cycle)
            order = memo.fifo[q] = c.timed("app", _fifo_order, q, c.now)
            memo.fifo_cursor[q] = 0
        blocked = c.blocked
        i = cursor = memo.fifo_cursor[q]
        while i < len(order):  # (the order may change under the walk: stateaware, a priority drop)
            app = order[i]
            if app not in blocked:
                a = self._try_app(c, app)
                if a is not None:
                    memo.fifo_cursor[q] = cursor
                    return a
                blocked.add(app)
            if i == cursor:
                cursor += 1
            i += 1
        memo.fifo_cursor[q] = cursor
        return None

    def _try_leaf_fair(self, c: Cycle, q: Queue) -> "Allocation | None":
        """Fair: least usage share first. The sorted list is kept for the cycle; only the app that
        got an allocation is re-placed (bisect), so a leaf with many apps is not re-sorted."""
        order = c.app_order.fair.get(q)
        if order is None:
            now, g, prio = c.now, q.guaranteed, q.priority_enabled
            order = [(_fair_key(a, g, prio), a) for a in q.apps.values()
                     if a.has_pending() and a.backoff_deadline_ns <= now]
            order = c.app_order.fair[q] = c.timed("app", sorted, order)
        return _best_first(c, order, self._try_app, _fair_rekey, q)

    # ------------------------------------------------------------------------------ asks
    def _try_app(self, c: Cycle, app: "Application") -> "Allocation | None":
        """The app's asks in order, from its cursor, until one is placed. Every ask tried is done
        for the cycle: at the cursor the cursor moves past it, further on (behind a reserved
        ask, which is the reserved pass's) it is remembered as blocked."""
        if app.state not in _SCHEDULABLE_APP_STATES or app.backoff_deadline_ns > c.now:
            return None  # (or backing off: backoff.py)
        if not app.counted_running and self._max_apps_reached(c, app):
            return None
        asks, start = c.asks.of(app)
        blocked = c.blocked
        i = cursor = start
        n = len(asks)
        memo = c.sizes
        if memo.failed is not None or memo.unreservable is not None:
            memo.clear()  # a new attempt (the memo is per app attempt)
        backoff = app.queue.backoff_threshold  # unschedulable asks before the app backs off (0: off)
        unschedulable = 0
        while i < n:
            ask = asks[i]
            if ask.pending > 0 and ask not in blocked:
                if ask.reserved_node:  # the reserved pass's: not done here
                    i += 1
                    continue
                if backoff and unschedulable >= backoff:
                    start_backoff(self._outcomes, app, c.now)
                    break
                verdict = self._attempt(c, app, ask, memo)
                if verdict is UNSCHEDULABLE:
                    unschedulable += 1
                elif verdict is not WAITS:  # placed
                    c.asks.cursor[app] = cursor
                    c.visited += i - start + 1
                    if ask.pending <= 0:
                        app.mark_exhausted()  # compact at the next cycle
                        _priority_may_drop(c, app, ask, asks, cursor)
                    return verdict
                if i != cursor:
                    blocked.add(ask)  # done for the cycle (at the cursor, the cursor says so)
            if i == cursor:
                cursor += 1
            i += 1
        c.asks.cursor[app] = cursor
        c.visited += i - start
        return None

    def _max_apps_reached(self, c: Cycle, app: "Application") -> bool:
        """maxapplications: a new app may not start yet while a queue of its path is full; say why."""
        full = app.queue.max_apps_reached()
        if full is None:
            return False
        reason = f"queue {full.path} has reached its maxapplications ({full.max_apps})"
        for ask in app.ordered_asks():
            if ask.pending > 0:
                self._outcomes.sched_state(ask, SchedState.SKIPPED, reason, c.now)
        return True

    def _attempt(self, c: Cycle, app: "Application", ask: "Ask", memo: SizeMemo) -> "Allocation | _Verdict":
        """One try of ``ask``: a gang member takes its placeholder; any other ask is admitted
        (``admit``) and placed on the first node that takes it, or reports why it waits (and
        may preempt or reserve a node)."""
        if ask.task_group and not ask.placeholder:  # gang member (see gang.py)
            verdict = self._gang_member(c, app, ask)
            if verdict is not None:
                return verdict
        elif ask.topology is not None and ask.placeholder and not app.placeholders \
                and not self._gang_domain(c, app, ask, ask.topology):
            return WAITS
        res = ask.resource
        plain = is_plain(ask, c.nodes)
        if plain and memo.failed is not None and res == memo.failed:
            blocker = memo.blocker  # (it passed the limits: usage has not grown since)
        else:
            hold = self.admit(app, res)
            if hold.__class__ is tuple:  # a user/group limit holds it: no node, no reservation
                self._limit_blocked(c, app, ask, hold)
                return WAITS
            if hold is None:
                node = find_node(c, ask) if c.clock is None else c.clock.node_choice(find_node, c, ask)
                if node is not None:
                    return self._allocate(app, ask, node, c.now)
            blocker = hold if hold is not None and hold.parent is not None else None
            if plain:
                memo.failed, memo.blocker = res, blocker
        if blocker is not None:
            self._headroom_blocked(c, app, ask, blocker)
            return WAITS
        return self._fits_no_node(c, app, ask, plain, memo)

    def _gang_member(self, c: Cycle, app: "Application", ask: "Ask") -> "Allocation | _Verdict | None":
        """A real ask of a task group: it waits while any placeholder ask of its app is pending
        (all or nothing), then takes the oldest placeholder of its group; None when its group
        has no placeholder left (it is scheduled as any ask)."""
        if app.has_pending_placeholders():
            self._outcomes.sched_state(ask, SchedState.SKIPPED,
                                       f"waiting for the placeholders of application {app.app_id}", c.now)
            return WAITS
        group = app.placeholders.get(ask.task_group)
        if not group:
            return None
        ph = next(iter(group.values()))
        if self._gangs.reject_if_too_big(app, ask, ph, c.now):
            return WAITS  # (the ask was added before the group's placeholders were known)
        return self._replace_placeholder(app, ask, ph, c.now)

    def _gang_domain(self, c: Cycle, app: "Application", ask: "Ask", topo) -> bool:
        """A gang with a topology request and no placeholder allocated: choose its domain
        (``topology.choose``), once per cycle. False: it waits (its placeholder asks say why,
        an APP event when the reason changes). A gang of one task group at least as large as one
        of the same member shape that found no domain this cycle finds none either (room only
        shrinks within a cycle): a backlog of waiting gangs costs one decision per shape."""
        known = c.gangs.get(app)
        if known is not None:
            return known
        nodes, apps = self._nodes, self._apps
        before = topo.pin
        topo.pin = None  # (a pin no placeholder holds is chosen again)
        shape = (topo.level, topo.mode, ask.resource, signature(ask, nodes)) if app.ph_pending == ask.pending else None
        if shape is not None and c.gang_shapes.get(shape, app.ph_pending + 1) <= app.ph_pending:
            pin, waits = None, topo.mode == REQUIRED
            if waits and not topo.reason:
                topo.reason = (f"gang of application {app.app_id} waits for one {topo.level} (required): "
                               f"no domain fits {app.ph_pending} members")
        else:
            was = topo.reason
            pin, waits = choose(nodes.topology, nodes, app, topo, self._partition,
                                lambda a: CHAIN.bind(a, Purpose.ALLOCATE, apps, nodes=nodes).passes,
                                c.now, self._settings.gang_arrival_wait_ns)
            if pin is None and shape is not None and nodes.topology is not None \
                    and topo.waits_at == (nodes.topology.grown, app.ph_pending):  # (it found no domain)
                c.gang_shapes[shape] = min(app.ph_pending, c.gang_shapes.get(shape, app.ph_pending))
            topo.pin = pin
            if waits and topo.reason != was and not topo.arriving:
                self._outcomes.event(EventType.APP, app.app_id, REASON_WAITING, topo.reason, c.now)
        out, now = self._outcomes, c.now
        if pin is not None and (before is None or (before.level, before.name) != (pin.level, pin.name)):
            where = ", ".join(f"{lv} {d}" for lv, d in pin.path.items())
            out.event(EventType.APP, app.app_id, REASON_PLACED, (
                f"gang of application {app.app_id} placed in {where} ({topo.mode} {topo.level})"), now)
        elif waits and topo.reason and not topo.arriving:
            for a in app.asks.values():
                if a.placeholder and a.pending > 0:
                    out.sched_state(a, SchedState.FAILED, topo.reason, now)
        c.gangs[app] = not waits
        return not waits

    def _fits_no_node(self, c: Cycle, app: "Application", ask: "Ask", plain: bool,
                      memo: SizeMemo) -> _Verdict:
        """No node takes ``ask`` now (root's headroom, the cluster size, may be what is missing):
        it may preempt, or reserve a node that will hold it; FAILED while neither helps."""
        res = ask.resource
        if self._preemption.queue_preemption(c, app, ask):
            return WAITS
        if not c.budgets.reservations_full and not (plain and res == memo.unreservable):
            verdict = maybe_reserve(c, app, ask, self._settings)
            if verdict == RESERVED:
                return WAITS
            if verdict == NO_NODE and plain:
                memo.unreservable = res
        if ask.sched_state is not SchedState.FAILED:  # an ask with node terms: name the checks
            why = None if plain else why_unplaced(c.nodes, c.apps, ask, c.why_unplaced)
            self._outcomes.sched_state(ask, SchedState.FAILED, why or WAITING_FOR_CLUSTER, c.now)
        return WAITS if ask.required_node else UNSCHEDULABLE

    # ------------------------------------------------------------------------------ reporting
    def _headroom_blocked(self, c: Cycle, app: "Application", ask: "Ask", blocker: Queue) -> None:
        out = self._outcomes
        if ask.sched_state is not SchedState.SKIPPED and c.budgets.events > 0:
            c.budgets.events -= 1
            out.event(EventType.REQUEST, ask.key, "InsufficientQueueResources",
                      f"Application {app.app_id} does not fit into {blocker.path} queue", c.now,
                      group=app.app_id)
        out.sched_state(ask, SchedState.SKIPPED, f"request does not fit the headroom of queue {blocker.path}",
                        c.now)

    def _limit_blocked(self, c: Cycle, app: "Application", ask: "Ask", held: "tuple[Limit, str]") -> None:
        """The ask stays pending: SKIPPED, with a REQUEST event naming the limit (once per state
        change, within the cycle's event budget)."""
        lim, path = held
        reason, message = describe_limit(lim, path, app, self._limits.group_of(app))
        if (ask.sched_state is not SchedState.SKIPPED or ask.sched_reason != message) \
                and c.budgets.events > 0:
            c.budgets.events -= 1
            self._outcomes.event(EventType.REQUEST, ask.key, reason, message, c.now, group=app.app_id)
        self._outcomes.sched_state(ask, SchedState.SKIPPED, message, c.now)


# ------------------------------------------------------------------------------ best first
def _best_first(c: Cycle, order: list, attempt: Callable, rekey: Callable, arg) -> "Allocation | None":
    """Walk ``order`` (sorted ``[(key, item)]`` of queues or apps, kept for the cycle) best
    first: the head is tried (``attempt(c, item)``); one that fails is blocked for the cycle
    and leaves the list, one that places an allocation goes back in at its new place
    (``rekey(c, item, arg)``) while it has pending work; blocked heads and heads without
    pending work are dropped on the way."""
    blocked = c.blocked
    while order:
        item = order[0][1]
        if item in blocked or item.pending.is_zero():
            del order[0]
            continue
        a = attempt(c, item)
        del order[0]
        if a is None:
            blocked.add(item)
            continue
        if not item.pending.is_zero():
            if order:
                insort(order, (rekey(c, item, arg), item))
            else:
                order.append(((), item))  # the only one: no order to keep, skip the key
        return a
    return None


# ------------------------------------------------------------------------------ queue order
def _queue_priority(c: Cycle, q: Queue) -> int:
    """The queue's priority for sorting (max pending app priority, by ``priority.policy``),
    cached for the cycle; a leaf keeps a count of its apps per priority so a drop is cheap."""
    memo = c.queue_order
    v = memo.priorities.get(q)
    if v is None:
        cur = INT32_MIN
        if q.is_leaf:
            counts = memo.app_priorities.get(q)
            if counts is None:
                counts = {}
                for app in q.apps.values():
                    if app.has_pending():
                        pr = app.max_pending_priority()
                        counts[pr] = counts.get(pr, 0) + 1
                memo.app_priorities[q] = counts
            if counts:
                cur = max(counts)
        else:
            for ch in q.children.values():
                if not ch.pending.is_zero():
                    cur = max(cur, _queue_priority(c, ch))
        v = q.priority_value(cur)
        memo.priorities[q] = v
    return v


def usage_share(used: Resource, total: Resource | None) -> tuple[float, ...]:
    """Sort key of ``used`` as a share of ``total``, largest share first.

    Only the types defined in ``total`` count: a type without a guarantee says nothing
    about fairness (YuniKorn divides by 1 instead, so an unguaranteed ``vcore`` count
    outweighs every real share; Korral ignores such types). Without ``total`` the raw
    usage is the share, as in YuniKorn, so unguaranteed queues sort after guaranteed ones.
    """
    # share_key, unrolled: a key is computed on every allocation and resource dicts are tiny
    uv = used._v
    key = []
    if total is None:
        for v in uv.values():
            if v:
                key.append(float(v))
    else:
        for k, t in total._v.items():
            if t > 0:
                x = uv.get(k, 0) / t
                if x:
                    key.append(x)
    if len(key) > 1:
        key.sort(reverse=True)
    return tuple(key)


def _queue_key(c: Cycle, q: Queue, priority: bool) -> tuple:
    alloc = q.allocated
    keys = c.queue_order.keys
    cached = keys.get(q)
    if cached is not None and cached[0] is alloc:  # Resources are immutable: same object, same key
        return cached[1]
    if c.fair_share:  # compatibility 1.6+: one number per queue
        g, m = (fair_share(q),), ()
    else:
        g = usage_share(alloc, q.guaranteed)
        m = usage_share(alloc, q.max)
    more_pending_first = tuple([-x for x in usage_share(q.pending, q.guaranteed)])
    prio = -_queue_priority(c, q)
    if priority:  # YuniKorn: priority, usage share, larger pending (then path: stable)
        key = (prio, g, m, more_pending_first, q.path)
    else:  # YuniKorn: usage share, then priority, then larger pending
        key = (g, m, prio, more_pending_first, q.path)
    keys[q] = (alloc, key)
    return key


# ------------------------------------------------------------------------------ app order
def _fifo_key(prio: bool):
    if prio:
        return lambda a: (-a.max_pending_priority(), a.submission_time_ns, a.seq)
    return lambda a: (a.submission_time_ns, a.seq)


def _fair_key(a: "Application", g: Resource | None, prio: bool) -> tuple:
    share = usage_share(a.allocated, g)
    if prio:
        return (-a.max_pending_priority(), share, a.submission_time_ns, a.seq)
    return (share, a.submission_time_ns, a.seq)


def _fair_rekey(c: Cycle, app: "Application", leaf: Queue) -> tuple:
    return _fair_key(app, leaf.guaranteed, leaf.priority_enabled)


def _fifo_order(q: Queue, now: int) -> list:
    """The leaf's apps with pending work that are not backing off, in fifo order."""
    return sorted((a for a in q.apps.values() if a.has_pending() and a.backoff_deadline_ns <= now),
                  key=_fifo_key(q.priority_enabled))


def _stateaware_order(q: Queue) -> list:
    """YuniKorn's stateaware filter, then fifo: every app past Accepted with pending work, plus
    the oldest Accepted app with pending work only while no app is Starting (a Starting app
    without pending work blocks too)."""
    apps = sorted(q.apps.values(), key=lambda a: (a.submission_time_ns, a.seq))
    accepted_taken = any(a.state is AppState.STARTING for a in apps)
    out = []
    for a in apps:
        if a.state is AppState.ACCEPTED:
            if not accepted_taken and a.has_pending():
                accepted_taken = True
                out.append(a)
        elif a.has_pending():
            out.append(a)
    out.sort(key=_fifo_key(q.priority_enabled))
    return out


def _stateaware_admit(c: Cycle, q: Queue, order: list) -> None:
    """Add the oldest Accepted app with pending work to the cycle's order, at its fifo place,
    unless an app is Starting or an admitted Accepted app is still waiting.

    Within a cycle apps only leave Accepted, so the candidates are sorted once and walked
    with a cursor."""
    if q.starting_apps > 0:
        return
    memo = c.app_order
    blocked = c.blocked
    if any(a.state is AppState.ACCEPTED and a not in blocked for a in memo.sa_admitted.get(q, ())):
        return
    cands = memo.sa_candidates.get(q)
    if cands is None:
        cands = sorted((a for a in q.apps.values() if a.state is AppState.ACCEPTED),
                       key=lambda a: (a.submission_time_ns, a.seq))
        memo.sa_candidates[q] = cands
        memo.sa_cursor[q] = 0
    i = memo.sa_cursor[q]
    while i < len(cands):
        a = cands[i]
        i += 1
        if a.state is AppState.ACCEPTED and a.has_pending() and a not in blocked and a not in order:
            memo.sa_cursor[q] = i
            memo.sa_admitted.setdefault(q, []).append(a)
            key = _fifo_key(q.priority_enabled)
            idx = bisect_left(order, key(a), key=key)
            order.insert(idx, a)
            if idx < memo.fifo_cursor[q]:
                memo.fifo_cursor[q] = idx
            return
    memo.sa_cursor[q] = i


def _priority_may_drop(c: Cycle, app: "Application", done: "Ask", asks: list, cursor: int) -> None:
    """``done`` has no repeats left. If it was the last ask of the app's top priority, the app
    and its queues now rank lower: drop the cycle's cached priorities and fifo order so the
    next descent sees it (YuniKorn re-sorts every cycle; Korral only when a priority drops)."""
    i = cursor
    n = len(asks)
    while i < n and asks[i].pending <= 0:
        i += 1
    now_prio = asks[i].priority if i < n else INT32_MIN
    if now_prio >= done.priority:
        return
    leaf = app.queue
    queue_memo = c.queue_order
    counts = queue_memo.app_priorities.get(leaf)
    if counts is not None:  # move the app from its old to its new priority
        left = counts.get(done.priority, 0) - 1
        if left > 0:
            counts[done.priority] = left
        else:
            counts.pop(done.priority, None)
        if now_prio != INT32_MIN:
            counts[now_prio] = counts.get(now_prio, 0) + 1
        if left <= 0:  # the leaf's max may have dropped: its queues re-rank
            for q in leaf.chain():
                queue_memo.priorities.pop(q, None)
                queue_memo.keys.pop(q, None)
    memo = c.app_order
    order = memo.fifo.get(leaf)
    if order is not None and leaf.priority_enabled:  # fifo and stateaware keep a fifo order
        # the app ranks lower now: take it out (and back in at its new place if it still has
        # work) so the cycle's fifo order stays sorted by current keys
        try:
            j = order.index(app, memo.fifo_cursor[leaf])
        except ValueError:
            return
        del order[j]
        if now_prio != INT32_MIN:
            keyf = _fifo_key(True)
            order.insert(bisect_left(order, keyf(app), lo=memo.fifo_cursor[leaf], key=keyf), app)
