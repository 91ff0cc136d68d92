"""One scheduling cycle (seed 003's pseudo code, without YuniKorn's one-allocation-per-cycle cap).

What it owns: the order of work within a cycle (queues, apps, asks) and the cycle's memos.
Who may use it: the partition (``run_cycle``). It places asks through the partition's public
parts: ``ledger.allocate``, ``gangs`` (replacement), ``node_choice.find_node`` (the
feasibility chain), ``reservations``, ``preemption``, ``limits``, ``sched_state``/``event``.

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
from typing import TYPE_CHECKING

from common.resources import Resource

from .app_state import AppState
from .backoff import start_backoff
from .diagnosis import why_unplaced
from .fair_share import fair_share
from .feasibility import is_plain
from .limits import describe as describe_limit
from .outcomes import EventType, SchedState
from .node_choice import find_node
from .preemption import budgeted_queue_preemption
from .reservations import NO_NODE, NOT_RESERVED, RESERVED, maybe_reserve, try_reserved
from .queue import AppSortPolicy, Queue

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .objects import Allocation, Ask
    from .partition import Partition

__all__ = ["run_cycle", "usage_share", "WAITING_FOR_CLUSTER"]

WAITING_FOR_CLUSTER = "request is waiting for cluster resources become available"
# queue preemption attempts per cycle, failed ones included (each scans the nodes once and
# examines victims on up to PREEMPTION_CANDIDATE_NODES of them)
MAX_PREEMPTION_ATTEMPTS_PER_CYCLE = 32
_SCHEDULABLE_APP_STATES = frozenset({AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING,
                                     AppState.COMPLETING})
# REQUEST events are a diagnosis aid; a cycle over 200k quota-blocked asks must not emit 200k
MAX_REQUEST_EVENTS_PER_CYCLE = 100
INT32_MIN = -(1 << 31)
# node selection's stage time: the first selections of a cycle are timed, then one in 16
NODE_TIMED_ALWAYS = 16
NODE_TIMED_EVERY = 16


class _Cycle:
    __slots__ = ("p", "now", "blocked", "ask_lists", "ask_cursor", "fifo", "fifo_cursor",
                 "failed_shapes", "unreservable", "qprio", "qkey", "event_budget",
                 "no_reserve", "visited", "fair", "sa_version",
                 "sa_cands", "sa_cursor", "sa_admitted", "prio_count",
                 "kids", "preempt_budget", "timer", "stages", "node_calls", "node_timed", "fair_share",
                 "why_unplaced")

    def __init__(self, p: "Partition", now: int) -> None:
        self.p = p
        self.now = now
        self.blocked: set[object] = set()  # queues, apps and asks done for this cycle
        self.ask_lists: dict[object, list] = {}
        self.ask_cursor: dict[object, int] = {}
        self.fifo: dict[object, list] = {}
        self.fifo_cursor: dict[object, int] = {}
        self.failed_shapes: dict[object, list[Resource]] = {}  # node_choice.known_to_fail
        self.unreservable: dict[object, list[Resource]] = {}
        self.why_unplaced: dict[object, str | None] = {}  # diagnosis.why_unplaced, per signature and size
        self.qprio: dict[object, int] = {}
        self.qkey: dict[object, tuple] = {}  # queue -> (allocated it was computed for, key)
        self.event_budget = MAX_REQUEST_EVENTS_PER_CYCLE
        self.no_reserve = False  # the partition's reservation limit is reached
        self.preempt_budget = MAX_PREEMPTION_ATTEMPTS_PER_CYCLE
        self.visited = 0  # ask positions looked at: the cost of this cycle
        self.fair: dict[object, list] = {}
        self.sa_version: dict[object, int] = {}
        self.sa_cands: dict[object, list] = {}
        self.sa_cursor: dict[object, int] = {}
        self.sa_admitted: dict[object, list] = {}
        self.prio_count: dict[object, dict[int, int]] = {}  # leaf -> {app priority: apps}
        self.kids: dict[object, list] = {}  # parent -> sorted [(key, child)] for this cycle
        self.timer = p.settings.stage_timer
        self.stages = {"queue": 0.0, "app": 0.0, "node": 0.0}  # seconds per stage (timer set)
        self.node_calls = 0  # node selections in this cycle, and how many of them were timed
        self.node_timed = 0
        self.fair_share = p.settings.compat.fair_share_queue_sort  # 1.6+ queue order (fair_share.py)


def _timed(c: _Cycle, stage: str, fn, *args):
    """fn(*args), its time added to the cycle's stage when a stage timer is injected."""
    timer = c.timer
    if timer is None:
        return fn(*args)
    start = timer()
    try:
        return fn(*args)
    finally:
        c.stages[stage] += timer() - start


def run_cycle(p: "Partition", now: int) -> tuple[int, int]:
    """Allocate as many asks as fit now, in policy order.

    Returns (allocations made, ask positions visited); the second measures the cycle's
    cost so the partition can space out idle cycles over many waiting asks."""
    root = p.root
    if root.max is None or not p.nodes.nodes:
        return 0, 0  # no nodes: nothing to schedule on (YuniKorn skips the partition)
    c = _Cycle(p, now)
    try:
        n = try_reserved(c) if p.reservations else 0
        if root.pending.is_zero():
            return n, c.visited
        limit = p.settings.cycle_allocation_limit
        while _try_queue(c, root) is not None:
            n += 1
            if n == limit:
                break
        return n, c.visited
    finally:
        if c.timer is not None:
            if c.node_timed < c.node_calls:  # the sample's time scaled to every selection
                c.stages["node"] *= c.node_calls / c.node_timed
            p.last_cycle_stages = dict(c.stages)


# ------------------------------------------------------------------------------ queues
def _queue_priority(c: _Cycle, q: Queue) -> int:
    """The queue's priority for sorting (max pending app priority, by ``priority.policy``),
    cached for the cycle; a leaf keeps a count of its apps per priority so a drop is cheap."""
    v = c.qprio.get(q)
    if v is None:
        cur = INT32_MIN
        if q.is_leaf:
            counts = c.prio_count.get(q)
            if counts is None:
                counts = {}
                for app in q.apps.values():
                    if app.has_pending():
                        pr = app.max_pending_priority()
                        counts[pr] = counts.get(pr, 0) + 1
                c.prio_count[q] = counts
            if counts:
                cur = max(counts)
        else:
            for ch in q.children.values():
                if not ch.pending.is_zero():
                    cur = max(cur, _queue_priority(c, ch))
        v = q.priority_value(cur)
        c.qprio[q] = v
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


def _queue_key(c: _Cycle, q: Queue, priority: bool) -> tuple:
    alloc = q.allocated
    cached = c.qkey.get(q)
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
    c.qkey[q] = (alloc, key)
    return key


def _try_queue(c: _Cycle, q: Queue) -> "Allocation | None":
    """Descend into the children of ``q`` in fair order. The sorted child list is kept for the
    cycle; after an allocation only the child it went through is re-placed (its usage
    changed, no other child's did), so a parent with many children is not re-sorted."""
    if q.is_leaf:
        return _try_leaf(c, q)
    blocked = c.blocked
    prio = q.priority_enabled
    lst = c.kids.get(q)
    if lst is None:
        lst = _timed(c, "queue", sorted, [(_queue_key(c, ch, prio), ch) for ch in q.children.values()
                                           if ch.schedulable and not ch.pending.is_zero()])
        c.kids[q] = lst
    while lst:
        ch = lst[0][1]
        if ch in blocked or ch.pending.is_zero():
            del lst[0]
            continue
        a = _try_queue(c, ch)
        del lst[0]
        if a is None:
            blocked.add(ch)
            continue
        if not ch.pending.is_zero():
            if lst:
                insort(lst, (_queue_key(c, ch, prio), ch))
            else:
                lst.append(((), ch))  # the only child: no order to keep, skip the key
        return a
    return None


# ------------------------------------------------------------------------------ apps
def _fifo_key(prio: bool):
    if prio:
        return lambda a: (-a.max_pending_priority(), a.submission_time_ns, a.seq)
    return lambda a: (a.submission_time_ns, a.seq)


def _fair_key(a: "Application", g: Resource | None, prio: bool) -> tuple:
    share = usage_share(a.allocated, g)
    if prio:
        return (-a.max_pending_priority(), share, a.submission_time_ns, a.seq)
    return (share, a.submission_time_ns, a.seq)


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


def _try_leaf(c: _Cycle, q: Queue) -> "Allocation | None":
    pol = q.sort_policy
    if pol is AppSortPolicy.FAIR:
        return _try_leaf_fair(c, q)
    order = c.fifo.get(q)
    if pol is AppSortPolicy.STATEAWARE:
        if order is None:
            order = _timed(c, "app", _stateaware_order, q)
            c.fifo[q] = order
            c.fifo_cursor[q] = 0
            c.sa_version[q] = q.sa_epoch
        elif c.sa_version.get(q) != q.sa_epoch:
            # the leaf's last Starting app moved on: one Accepted app may start now
            c.sa_version[q] = q.sa_epoch
            _stateaware_admit(c, q, order)
    elif order is None:
        # fifo order does not change within a cycle: sort once, then walk with a cursor
        # (apps backing off are left out: a backlog of them costs nothing per cycle)
        now = c.now
        order = _timed(c, "app", lambda: sorted((a for a in q.apps.values()
                                                 if a.has_pending() and a.backoff_deadline_ns <= now),
                                                key=_fifo_key(q.priority_enabled)))
        c.fifo[q] = order
        c.fifo_cursor[q] = 0
    blocked = c.blocked
    i = cursor = c.fifo_cursor[q]
    while i < len(order):
        app = order[i]
        if app in blocked:
            if i == cursor:
                cursor += 1
            i += 1
            continue
        a = _try_app(c, app)
        if a is not None:
            c.fifo_cursor[q] = cursor
            return a
        blocked.add(app)
        if i == cursor:
            cursor += 1
        i += 1
    c.fifo_cursor[q] = cursor
    return None


def _stateaware_admit(c: _Cycle, q: Queue, order: list) -> None:
    """Add the oldest Accepted app with pending work to the cycle's order, at its fifo place,
    unless an app is Starting or an admitted Accepted app is still waiting.

    Within a cycle apps only leave Accepted, so the candidates are sorted once and walked
    with a cursor."""
    if q.starting_apps > 0:
        return
    blocked = c.blocked
    if any(a.state is AppState.ACCEPTED and a not in blocked for a in c.sa_admitted.get(q, ())):
        return
    cands = c.sa_cands.get(q)
    if cands is None:
        cands = sorted((a for a in q.apps.values() if a.state is AppState.ACCEPTED),
                       key=lambda a: (a.submission_time_ns, a.seq))
        c.sa_cands[q] = cands
        c.sa_cursor[q] = 0
    i = c.sa_cursor[q]
    while i < len(cands):
        a = cands[i]
        i += 1
        if a.state is AppState.ACCEPTED and a.has_pending() and a not in blocked and a not in order:
            c.sa_cursor[q] = i
            c.sa_admitted.setdefault(q, []).append(a)
            key = _fifo_key(q.priority_enabled)
            idx = bisect_left(order, key(a), key=key)
            order.insert(idx, a)
            if idx < c.fifo_cursor[q]:
                c.fifo_cursor[q] = idx
            return
    c.sa_cursor[q] = i


def _try_leaf_fair(c: _Cycle, q: Queue) -> "Allocation | None":
    """Fair: least usage share first. The sorted list is kept for the cycle; only the app that
    got an allocation is re-placed (bisect), so a leaf with many apps is not re-sorted."""
    g = q.guaranteed
    prio = q.priority_enabled
    lst = c.fair.get(q)
    if lst is None:
        now = c.now
        lst = _timed(c, "app", sorted, [(_fair_key(a, g, prio), a) for a in q.apps.values()
                                        if a.has_pending() and a.backoff_deadline_ns <= now])
        c.fair[q] = lst
    blocked = c.blocked
    while lst:
        entry = lst[0]
        app = entry[1]
        if app in blocked:
            del lst[0]
            continue
        a = _try_app(c, app)
        del lst[0]
        if a is None:
            blocked.add(app)
            continue
        insort(lst, (_fair_key(app, g, prio), app))
        return a
    return None


def _try_app(c: _Cycle, app: "Application") -> "Allocation | None":
    if app.state not in _SCHEDULABLE_APP_STATES or app.backoff_deadline_ns > c.now:
        return None  # (or backing off: backoff.py)
    p = c.p
    if not app.counted_running:
        full = app.queue.max_apps_reached()
        if full is not None:  # maxapplications: a new app may not start yet; say why
            reason = f"queue {full.path} has reached its maxapplications ({full.max_apps})"
            for ask in app.ordered_asks():
                if ask.pending > 0:
                    p.sched_state(ask, SchedState.SKIPPED, reason)
            return None
    asks = c.ask_lists.get(app)
    if asks is None:
        asks = app.ordered_asks()
        c.ask_lists[app] = asks
        c.ask_cursor[app] = 0
    blocked = c.blocked
    i = cursor = start = c.ask_cursor[app]
    queue = app.queue
    limits = p.limits
    n = len(asks)
    # Within a cycle a failure is final, so the next plain ask of the same size in this app
    # fails the same way: reuse the verdict instead of re-checking headroom and nodes.
    last_res: Resource | None = None
    last_blocker: Queue | None = None
    no_reserve_res: Resource | None = None  # a size no node can ever hold (no reservation)
    backoff = queue.backoff_threshold  # unschedulable asks before the app backs off (0: off)
    unschedulable = 0
    while i < n:
        ask = asks[i]
        if ask.pending <= 0 or ask in blocked:
            if i == cursor:
                cursor += 1
            i += 1
            continue
        if ask.reserved_node:  # handled by the reserved pass
            i += 1
            continue
        if backoff and unschedulable >= backoff:
            start_backoff(p, app, c.now)
            break
        res = ask.resource
        if ask.task_group and not ask.placeholder:  # gang member (see gang.py)
            if app.has_pending_placeholders():  # all or nothing: the whole gang is placed first
                p.sched_state(ask, SchedState.SKIPPED,
                              f"waiting for the placeholders of application {app.app_id}")
                if i == cursor:
                    cursor += 1
                else:
                    blocked.add(ask)
                i += 1
                continue
            group = app.placeholders.get(ask.task_group)
            if group and p.gangs.reject_if_too_big(app, ask, next(iter(group.values()))):
                i += 1  # (the ask was added before the group's placeholders were known)
                continue
            if group:  # take the oldest placeholder of the group, on its node
                c.ask_cursor[app] = cursor
                c.visited += i - start + 1
                alloc = p.gangs.replace(app, ask, next(iter(group.values())), c.now)
                if ask.pending <= 0:
                    app.mark_exhausted()
                    _priority_may_drop(c, app, ask, asks, cursor)
                return alloc
        if limits.active:
            held = limits.check(app, res)
            if held is not None:  # a user/group limit holds it: no node, no reservation
                _limit_blocked(c, app, ask, held)
                if i == cursor:
                    cursor += 1
                else:
                    blocked.add(ask)
                i += 1
                continue
        plain = is_plain(ask, p.nodes)
        if plain and last_res is not None and res == last_res:
            blocker = last_blocker
        else:
            blocker = queue.fits_headroom(res)
            if blocker is not None and blocker.parent is None:
                blocker = None  # root's max is the cluster size: no node fits (see below)
                node = None
            elif blocker is not None:
                node = None
            elif c.timer is None:
                node = find_node(c, ask)
            else:
                calls = c.node_calls
                c.node_calls = calls + 1
                if calls < NODE_TIMED_ALWAYS or not calls % NODE_TIMED_EVERY:
                    # timed inline (a _timed call costs a third of the timing), and only a sample
                    # of a big cycle's selections: the clock cost 3 % of a 10,000-allocation burst
                    started = c.timer()
                    node = find_node(c, ask)
                    c.stages["node"] += c.timer() - started
                    c.node_timed += 1
                else:
                    node = find_node(c, ask)
            if node is not None:
                c.ask_cursor[app] = cursor
                c.visited += i - start + 1
                alloc = p.ledger.allocate(app, ask, node, c.now)
                if ask.pending <= 0:
                    app.mark_exhausted()  # compact at the next cycle
                    _priority_may_drop(c, app, ask, asks, cursor)
                return alloc
            if plain:
                last_res, last_blocker = res, blocker
        if blocker is not None:
            _headroom_blocked(c, app, ask, blocker)
        else:
            # no node fits now; root's headroom (the cluster size) may be what is missing
            if budgeted_queue_preemption(p, c, app, ask):
                verdict = RESERVED
            elif not c.no_reserve and not (plain and res == no_reserve_res):
                verdict = maybe_reserve(c, app, ask)
                if verdict == NO_NODE and plain:
                    no_reserve_res = res
            else:
                verdict = NOT_RESERVED
            if verdict != RESERVED:
                unschedulable += not ask.required_node
                if ask.sched_state is not SchedState.FAILED:  # an ask with node terms: name the checks
                    why = WAITING_FOR_CLUSTER if plain else why_unplaced(p, ask, c.why_unplaced) or WAITING_FOR_CLUSTER
                    p.sched_state(ask, SchedState.FAILED, why)
        if i == cursor:
            cursor += 1
        else:
            blocked.add(ask)
        i += 1
    c.ask_cursor[app] = cursor
    c.visited += i - start
    return None


def _priority_may_drop(c: _Cycle, app: "Application", done: "Ask", asks: list, cursor: int) -> None:
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
    counts = c.prio_count.get(leaf)
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
                c.qprio.pop(q, None)
                c.qkey.pop(q, None)
    order = c.fifo.get(leaf)
    if order is not None and leaf.priority_enabled:  # fifo and stateaware keep c.fifo
        # the app ranks lower now: take it out (and back in at its new place if it still has
        # work) so the cycle's fifo order stays sorted by current keys
        try:
            j = order.index(app, c.fifo_cursor[leaf])
        except ValueError:
            return
        del order[j]
        if now_prio != INT32_MIN:
            keyf = _fifo_key(True)
            order.insert(bisect_left(order, keyf(app), lo=c.fifo_cursor[leaf], key=keyf), app)


def _headroom_blocked(c: _Cycle, app: "Application", ask: "Ask", blocker: Queue) -> None:
    p = c.p
    if ask.sched_state is not SchedState.SKIPPED and c.event_budget > 0:
        c.event_budget -= 1
        p.event(EventType.REQUEST, ask.key, "InsufficientQueueResources",
                f"Application {app.app_id} does not fit into {blocker.path} queue", c.now,
                group=app.app_id)
    p.sched_state(ask, SchedState.SKIPPED,
                  f"request does not fit the headroom of queue {blocker.path}")


def _limit_blocked(c: _Cycle, app: "Application", ask: "Ask", held) -> None:
    """The ask stays pending: SKIPPED, with a REQUEST event naming the limit (once per state
    change, within the cycle's event budget)."""
    p = c.p
    lim, path = held
    reason, message = describe_limit(lim, path, app, p.limits.group_of(app))
    if (ask.sched_state is not SchedState.SKIPPED or ask.sched_reason != message) \
            and c.event_budget > 0:
        c.event_budget -= 1
        p.event(EventType.REQUEST, ask.key, reason, message, c.now, group=app.app_id)
    p.sched_state(ask, SchedState.SKIPPED, message)
