"""Core test harness (STYLE.md #14): a queues config, builders with valid defaults, a fake
clock, and recorded outcomes (allocations, rejections, app states, events)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from common.config.model import (NodeSortPolicyConfig, PartitionConfig, PlacementRuleConfig,
                                 QueueConfig, ResourcesConfig)
from common.resources import Resource
from partition_worker.core import (AddApp, AddAsk, AddNode, CoreSettings, Partition,
                                   RecoveredAlloc)
from partition_worker.core.outcomes import Outcomes
from partition_worker.core.settings import SECOND

START = 1_700_000_000 * SECOND


def q(name: str, *children: QueueConfig, guaranteed=None, max=None, parent=False,
      props=None, submitacl="", adminacl="", maxapps=0, template=None, limits=()) -> QueueConfig:
    """Queue config builder: ``q("root", q("a", max={"memory": 10}))``."""
    return QueueConfig(name=name, parent=parent,
                       resources=ResourcesConfig(guaranteed=guaranteed or {}, max=max or {}),
                       maxapplications=maxapps, properties=props or {}, adminacl=adminacl,
                       submitacl=submitacl, childtemplate=template, queues=tuple(children),
                       limits=tuple(limits))


def partition_config(root: QueueConfig | None = None, policy: str = "fair",
                     weights=None, rules: tuple[PlacementRuleConfig, ...] = ()) -> PartitionConfig:
    if root is None:
        root = q("root", q("default"), submitacl="*")
    return PartitionConfig(name="default", queues=(root,), placementrules=rules,
                           nodesortpolicy=NodeSortPolicyConfig(type=policy,
                                                               resourceweights=weights or {}))


def res(**kw: int) -> Resource:
    return Resource(kw)


@dataclass
class Harness:
    """Drives one Partition with a fake clock and keeps every outcome it produced."""

    config: PartitionConfig = field(default_factory=partition_config)
    settings: CoreSettings = field(default_factory=CoreSettings)
    now: int = START
    log: Outcomes = field(default_factory=Outcomes)

    def __post_init__(self) -> None:
        counter = itertools.count(1)
        self.p = Partition("default", self.config, self.settings, rm_id="rm1",
                           new_uuid=lambda: f"uuid-{next(counter)}", created_ns=self.now)

    # -------------------------------------------------------------- time and commands
    def do(self, *cmds) -> "Harness":
        for c in cmds:
            self.p.handle(c, self.now)
        self._collect()
        return self

    def advance(self, ns: int) -> "Harness":
        self.now += ns
        self.p.tick(self.now)
        self._collect()
        return self

    def step(self, ns: int = 0) -> int:
        self.now += ns
        n = self.p.step(self.now)
        self._collect()
        return n

    def _collect(self) -> None:
        o = self.p.outcomes.drain()
        for name in Outcomes.__slots__:
            getattr(self.log, name).extend(getattr(o, name))

    # -------------------------------------------------------------- builders
    def node(self, node_id: str, memory: int = 1000, vcore: int = 1000, **kw) -> "Harness":
        cap = {"memory": memory, "vcore": vcore, **{k: v for k, v in kw.items() if isinstance(v, int)}}
        attrs = kw.get("attrs", {})
        occupied = kw.get("occupied")
        existing = kw.get("existing", ())
        return self.do(AddNode(node_id, Resource(cap), Resource(occupied or {}), dict(attrs), tuple(existing)))

    def nodes(self, count: int, **kw) -> "Harness":
        """``count`` nodes like ``node(**kw)``, named n0, n1, ... (zero-padded: n00..n49 for 50)."""
        width = len(str(count - 1))
        for i in range(count):
            self.node(f"n{i:0{width}d}", **kw)
        return self

    def app(self, app_id: str, queue: str = "root.default", user: str = "alice", **kw) -> "Harness":
        return self.do(AddApp(app_id, queue, user, **kw))

    def ask(self, key: str, app_id: str, memory: int = 10, vcore: int = 1, repeat: int = 1,
            priority: int = 0, **kw) -> "Harness":
        return self.do(AddAsk(key, app_id, Resource({"memory": memory, "vcore": vcore}),
                              max_allocations=repeat, priority=priority, **kw))

    # -------------------------------------------------------------- reading the record
    def allocated_keys(self) -> list[str]:
        return [a.alloc.key for a in self.log.allocations]

    def allocs_of(self, key: str) -> list:
        return [a.alloc for a in self.log.allocations if a.alloc.key == key]

    def states(self, app_id: str) -> list[str]:
        return [s.state for s in self.log.app_states if s.app_id == app_id]

    def app_state(self, app_id: str) -> str:
        a = self.p.apps.get(app_id) or self.p.finished_apps.get(app_id)
        return a.state.value if a else "gone"

    def rejected_ask_reasons(self) -> dict[str, str]:
        return {r.allocation_key: r.reason for r in self.log.rejected_asks}

    def rejected_app_reasons(self) -> dict[str, str]:
        return {r.app_id: r.reason for r in self.log.apps_rejected}

    def events(self, reason: str) -> list:
        return [e for e in self.log.events if e.reason == reason]


__all__ = ["Harness", "q", "partition_config", "res", "START", "SECOND", "RecoveredAlloc"]


def harness_from_yaml(text: str, **kw) -> Harness:
    """A harness for the first partition of a queues.yaml text (``common.config.load_config``)."""
    from common.config import load_config
    cfg = load_config(text)
    return Harness(config=cfg.partitions[0], **kw)
