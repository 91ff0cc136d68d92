"""Topology-aware gang placement (issue 35): network domains and where a gang goes in them.

What it owns: the partition's topology levels (config ``topology.levels``, widest first, each
read from a node attribute or else its k8s label; the host is the implicit last level), the
free room of every domain (kept as nodes change and allocations land and leave, never by
scanning every node per gang), the gang-topology tag of an app (``korral.io/gang-topology``,
JSON ``{"level": LEVEL, "mode": "required"|"preferred"}``, LEVEL a level's name or its label
key) and the choice of a gang's domain (``choose``). Who may use it: ``node`` (the collection
feeds the index), ``feasibility`` (the pin is a node check), ``node_choice`` (a pinned ask walks
its domain in packing order), the ``scheduler`` (chooses when a gang's first placeholder is
due), the partition (config, tag rejections) and ``dao`` (REST ``korralTopology``).

The choice: the gang is the app's pending placeholder asks (every task group). From the
narrowest level up to the requested one (``required``) or to the widest (``preferred``; then
the whole partition, no pin), the domains whose aggregate free room holds the whole gang are
tried best fit first (the least room left over, then the domain name); aggregate room is only a
prefilter, so each is checked by packing the members onto its nodes (sub-domains with the most
room first, so the gang spans as few of them as it can; the nodes must pass the ask's node
checks). The first that holds every member pins the app: its asks pass only that domain's
nodes, which they walk in the packing order. The pin holds while a placeholder of the app is
allocated (``Application.drop_placeholder`` lets go of it) and is chosen again when none is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from common.constants import TAG_GANG_TOPOLOGY

from .node import CLOSED

if TYPE_CHECKING:  # pragma: no cover
    from .application import Application
    from .node import Node, NodeCollection
    from .objects import Ask

__all__ = ["Level", "TopologyIndex", "GangTopology", "Pin", "parse_request", "request_of", "choose", "levels_of", "REQUIRED",
           "PREFERRED", "REASON_PLACED", "REASON_WAITING", "HOST"]

REQUIRED, PREFERRED = "required", "preferred"
HOST = "host"  # the implicit narrowest level
REASON_PLACED = "GangTopologyPlaced"  # APP events
REASON_WAITING = "GangTopologyWaiting"
MAX_PACKED = 16  # domains per level whose nodes a decision packs (the best fits by aggregate room)


@dataclass(frozen=True, slots=True)
class Level:
    """One configured level: its name and the node attribute / k8s label it is read from."""

    name: str
    label: str


class Domain:
    """One domain of one level: its nodes and their summed free room (of the nodes not closed to
    every ask: drained, not ready, reserved nodes count none)."""

    __slots__ = ("name", "nodes", "free")

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: set[str] = set()
        self.free: dict[str, int] = {}


def _room(node: "Node") -> dict[str, int]:
    """What the node adds to its domains' free room: its free room if some ask may use it (a
    tainted node counts: GPU nodes are, and the gangs that want them tolerate it)."""
    if node.gate == CLOSED:
        return {}
    return {k: v for k, v in node.available._v.items() if v > 0}


class TopologyIndex:
    """The levels and, per level, its domains (see module doc). ``Node.domains`` holds the
    node's domain per level (None: it lacks that level's label)."""

    __slots__ = ("levels", "domains", "grown", "_room")

    def __init__(self, levels: tuple[Level, ...], nodes: Iterable["Node"] = ()) -> None:
        self.levels = levels
        self.grown = 0  # bumps whenever some domain may have gained room (a gang that failed may fit)
        self.domains: list[dict[str, Domain]] = [{} for _ in levels]
        self._room: dict[str, dict[str, int]] = {}  # node -> the room it counts in its domains
        for node in nodes:
            self.relabel(node)

    def level_index(self, wanted: str) -> int | None:
        """The level a gang asks for by name or by label key; None when not configured."""
        for i, lv in enumerate(self.levels):
            if wanted in (lv.name, lv.label):
                return i
        return None

    def _count(self, node: "Node", room: Mapping[str, int], sign: int) -> None:
        for i, d in enumerate(node.domains):
            if d is None:
                continue
            free = self.domains[i][d].free
            for k, v in room.items():
                free[k] = free.get(k, 0) + sign * v

    def relabel(self, node: "Node") -> None:
        """The node is new or its attributes changed: read its domains again."""
        self.removed(node)
        path = tuple(node.attribute(lv.label) for lv in self.levels)
        node.domains = path
        for i, d in enumerate(path):
            if d is not None:
                dom = self.domains[i].get(d)
                if dom is None:
                    dom = self.domains[i][d] = Domain(d)
                dom.nodes.add(node.node_id)
        room = self._room[node.node_id] = _room(node)
        self._count(node, room, 1)
        self.grown += 1

    def changed(self, node: "Node") -> None:
        """The node's free room or gate changed (an allocation, a drain, ...)."""
        old = self._room.get(node.node_id)
        if old is None:
            return
        new = self._room[node.node_id] = _room(node)
        if new == old:
            return
        self._count(node, old, -1)
        self._count(node, new, 1)
        for k, v in new.items():
            if v > old.get(k, 0):
                self.grown += 1
                break

    def removed(self, node: "Node") -> None:
        old = self._room.pop(node.node_id, None)
        if old is None:
            return
        self._count(node, old, -1)
        for i, d in enumerate(node.domains):
            if d is None:
                continue
            dom = self.domains[i][d]
            dom.nodes.discard(node.node_id)
            if not dom.nodes:
                del self.domains[i][d]
        node.domains = ()


def levels_of(config) -> tuple[Level, ...]:
    """The levels of a partition config (``common.config.model.TopologyConfig``)."""
    return tuple(Level(lv.name, lv.label) for lv in config.topology.levels)


# ---------------------------------------------------------------------------- an app's request
class Pin:
    """A gang's domain: ``level`` (index), ``name``; ``path`` names it and its wider domains
    (REST); ``order``: its nodes in packing order (a pinned ask walks them so)."""

    __slots__ = ("level", "name", "path", "order")

    def __init__(self, level: int, name: str, path: dict[str, str], order: list[str]) -> None:
        self.level = level
        self.name = name
        self.path = path
        self.order = order


class GangTopology:
    """What an app's gang asked for (``level``: as written, a name or a label key; ``mode``),
    its pin (None: none now), the domain it last got (``domain``) and why it waits or went
    anywhere (``reason``)."""

    __slots__ = ("level", "mode", "pin", "domain", "reason", "waits_at", "arriving")

    def __init__(self, level: str, mode: str) -> None:
        self.level = level
        self.mode = mode
        self.pin: Pin | None = None
        self.domain: dict[str, str] | None = None  # the last pin's path: kept once the pin is let go (REST)
        self.reason = ""
        self.waits_at: tuple[int, int] | None = None  # (index.grown, members) when no domain fitted last
        self.arriving = False  # it waits for the rest of its placeholder asks (not reported)


def request_of(owner: str, tags: Mapping[str, str]) -> "GangTopology | str | None":
    """The gang-topology tag of an app or ask (``owner`` names it) as a request; what is wrong
    with it, naming the owner and the tag; None when it has none."""
    raw = tags.get(TAG_GANG_TOPOLOGY)
    if raw is None:
        return None
    req = parse_request(raw)
    return req if isinstance(req, GangTopology) else f"{owner}: invalid tag {TAG_GANG_TOPOLOGY}: {req}"


def parse_request(raw: str) -> "GangTopology | str":
    """The tag's value as a request, or what is wrong with it."""
    try:
        v = json.loads(raw)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(v, dict) or not isinstance(v.get("level"), str) or not v["level"]:
        return 'must be a JSON object {"level": LEVEL, "mode": "required"|"preferred"}'
    mode = v.get("mode", REQUIRED)
    if mode not in (REQUIRED, PREFERRED):
        return f"unknown mode {mode!r} (required or preferred)"
    return GangTopology(v["level"], mode)


# ---------------------------------------------------------------------------- the choice
Passes = Callable[["Ask"], Callable[["Node"], bool]]  # an ask -> its node checks (bound once)


def _members(app: "Application") -> list["Ask"]:
    """The gang still to place: the pending placeholder asks, largest first."""
    asks = [a for a in app.asks.values() if a.placeholder and a.pending > 0]
    asks.sort(key=lambda a: (-sum(a.resource._v.values()), a.key))
    return asks


def _fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    for k, v in need.items():
        if v > free.get(k, 0):
            return False
    return True


def _slack(need: Mapping[str, int], free: Mapping[str, int]) -> float:
    """How much room a domain has beyond the gang (best fit: least first)."""
    return sum(free.get(k, 0) / v for k, v in need.items() if v > 0)


def _pack(members: list["Ask"], checks: list[Callable[["Node"], bool]], node_ids: Iterable[str],
          sub: int | None, nodes: "NodeCollection") -> tuple[int, list[str]]:
    """Pack the members onto the domain's nodes: sub-domains (level ``sub``; None: hosts) with
    the most room for the largest member first, the roomiest nodes within. Returns how many
    members fit and the nodes in packing order (the pinned asks walk them so)."""
    byid = nodes.nodes
    first = [(k, v) for k, v in members[0].resource._v.items() if v > 0]
    per_sub: dict[str, int] = {}
    cands = []
    for nid in node_ids:
        node = byid.get(nid)
        if node is None or node.gate == CLOSED:
            continue
        room = node.available._v
        n = -1
        for k, v in first:  # members of the largest size the node holds (inlined: the hot loop)
            m = room.get(k, 0) // v
            if n < 0 or m < n:
                n = m
        if n < 0:
            n = 0
        s = node.domains[sub] if sub is not None else nid
        if s is None:
            s = ""
        per_sub[s] = per_sub.get(s, 0) + n
        cands.append((s, n, node))
    cands.sort(key=lambda t: (-per_sub[t[0]], t[0], -t[1], t[2].node_id))
    placed = 0
    if len(members) == 1:  # one task group: the counts above are what each node takes
        want = members[0].pending
        passes = checks[0]
        for _s, n, node in cands:
            if n > 0 and passes(node):
                placed += min(n, want - placed)
                if placed >= want:
                    break
        return placed, [t[2].node_id for t in cands]
    rooms: dict[str, dict[str, int]] = {}
    for ask, passes in zip(members, checks):
        want = ask.pending
        size = [(k, v) for k, v in ask.resource._v.items() if v > 0]
        for _s, _n, node in cands:
            if want <= 0:
                break
            room = rooms.get(node.node_id)
            if room is None:
                room = node.available._v
            k = want
            for r, v in size:
                k = min(k, room.get(r, 0) // v)
            if k <= 0 or not passes(node):
                continue
            room = rooms[node.node_id] = dict(room)
            for r, v in size:
                room[r] = room.get(r, 0) - v * k
            want -= k
            placed += k
    return placed, [t[2].node_id for t in cands]


def _room_for(need: Mapping[str, int], count: int, free: Mapping[str, int]) -> int:
    """How many of ``count`` members (``need`` in all) a domain's free room holds, in aggregate."""
    share = min((free.get(k, 0) / v for k, v in need.items() if v > 0), default=0.0)
    return min(count, int(count * share))


def _level_names(index: TopologyIndex, i: int, name: str, nodes: "NodeCollection") -> dict[str, str]:
    """The domain and its wider domains, by level name (from any of its nodes)."""
    dom = index.domains[i][name]
    node = nodes.nodes[next(iter(dom.nodes))]
    return {index.levels[j].name: node.domains[j] for j in range(i + 1) if node.domains[j] is not None}


def choose(index: "TopologyIndex | None", nodes: "NodeCollection", app: "Application",
           topo: GangTopology, partition: str, bind: Passes, now: int = 0,
           arrival_wait_ns: int = 0) -> tuple[Pin | None, bool]:
    """Choose the gang's domain (see module doc): ``(pin, False)``; ``(None, True)``: it waits,
    ``topo.reason`` says why (per level: the best domain's shortfall); ``(None, False)``:
    preferred found no domain, the gang goes anywhere (the reason says so). A gang whose pending
    placeholders do not yet cover the app's placeholderAsk waits for the rest (an RM sends one
    ask per placeholder pod, one after another) up to ``arrival_wait_ns`` after its oldest one."""
    topo.arriving = False
    want = index.level_index(topo.level) if index is not None else None
    if want is None:
        topo.reason = f"topology level {topo.level} is not configured in partition {partition}"
        return None, True
    members = _members(app)
    if not members:
        return None, False
    if topo.waits_at == (index.grown, app.ph_pending):
        return None, topo.mode == REQUIRED  # no domain gained room since none fitted (allocations only take room)
    need: dict[str, int] = {}
    count = 0
    for a in members:
        count += a.pending
        for k, v in a.resource._v.items():
            need[k] = need.get(k, 0) + v * a.pending
    declared = app.placeholder_ask._v
    if declared and any(v > need.get(k, 0) for k, v in declared.items()) \
            and now - min(a.create_time_ns for a in members) < arrival_wait_ns:
        topo.arriving = True
        topo.reason = (f"gang of application {app.app_id} waits for the rest of its placeholders "
                       f"({count} asked, not yet its placeholderAsk {app.placeholder_ask})")
        return None, True
    checks = [bind(a) for a in members]
    levels = index.levels
    top = want if topo.mode == REQUIRED else 0
    shortfalls = []
    for i in range(len(levels) - 1, top - 1, -1):
        doms = index.domains[i]
        sub = i + 1 if i + 1 < len(levels) else None
        cands = sorted((d for d in doms.values() if _fits(need, d.free)), key=lambda d: (_slack(need, d.free), d.name))
        best, best_name = -1, ""
        for d in cands[:MAX_PACKED]:
            placed, order = _pack(members, checks, d.nodes, sub, nodes)
            if placed >= count:
                topo.reason, topo.waits_at = "", None
                pin = Pin(i, d.name, _level_names(index, i, d.name, nodes), order)
                topo.domain = pin.path
                return pin, False
            if placed > best:
                best, best_name = placed, d.name
        lv = levels[i].name
        if best >= 0:
            shortfalls.append(f"{lv}: no {lv} fits {count} members; best {lv} {best_name} fits {best}")
        elif doms:  # none passed the prefilter: the roomiest one's room, in aggregate
            d = min(doms.values(), key=lambda d: (-_slack(need, d.free), d.name))
            shortfalls.append(f"{lv}: no {lv} fits {count} members; best {lv} {d.name} has room for "
                              f"{_room_for(need, count, d.free)}")
        else:
            shortfalls.append(f"{lv}: no node has label {levels[i].label}")
    topo.waits_at = (index.grown, app.ph_pending)
    if topo.mode == PREFERRED:
        topo.reason = "placed without a domain (preferred): " + "; ".join(shortfalls)
        return None, False
    topo.reason = (f"gang of application {app.app_id} waits for one {levels[want].name} "
                   f"(required): " + "; ".join(shortfalls))
    return None, True
