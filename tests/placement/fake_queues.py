"""A tiny QueueTree built from queues.yaml: the edge of the placement component in unit tests.

Only what placement needs: paths, leaf/parent, submit+admin ACL checked up to
root. The real queue objects belong to the scheduling core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from common.acl import ACL, queue_allows
from common.config import load_config
from common.config.model import PartitionConfig, QueueConfig


@dataclass(eq=False)
class FakeQueue:
    path: str
    is_leaf: bool
    parent: "FakeQueue | None" = None
    submit_acl: ACL = field(default_factory=ACL)
    admin_acl: ACL = field(default_factory=ACL)
    accepts_new_work: bool = True

    def check_submit_access(self, user: str, groups: Sequence[str]) -> bool:
        return queue_allows(self, user, groups, submit=True)


class FakeQueueTree:
    def __init__(self, partition: PartitionConfig) -> None:
        self.queues: dict[str, FakeQueue] = {}
        self._add(partition.root, None)

    @classmethod
    def from_yaml(cls, text: str, partition: str = "default") -> "FakeQueueTree":
        config = load_config(text).partition(partition)
        assert config is not None
        return cls(config)

    def _add(self, cfg: QueueConfig, parent: FakeQueue | None) -> None:
        path = f"{parent.path}.{cfg.name}" if parent else cfg.name
        q = FakeQueue(path, not cfg.is_parent, parent, ACL.parse(cfg.submitacl), ACL.parse(cfg.adminacl))
        self.queues[path] = q
        for child in cfg.queues:
            self._add(child, q)

    def find(self, path: str) -> FakeQueue | None:
        return self.queues.get(path.lower())

    def create(self, path: str) -> None:
        """Create a dynamic queue path the way the core would after placement (leaf last)."""
        parts = path.split(".")
        for depth in range(2, len(parts) + 1):
            sub = ".".join(parts[:depth])
            if sub not in self.queues:
                parent = self.queues[".".join(parts[: depth - 1])]
                parent.is_leaf = False
                self.queues[sub] = FakeQueue(sub, depth == len(parts), parent)
