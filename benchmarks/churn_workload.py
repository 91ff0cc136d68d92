"""The churn workload of ``korral bench churn``: a cluster at steady state, seeded.

Shape (per partition; ``partitions`` of them, nodes and apps split evenly):

- queues: ``root.p0`` .. ``root.p9`` (guaranteed and max set, ``p0``-``p4`` with a per-user
  limit), each with leaves ``q0`` .. ``q9`` (guaranteed and max, fair app sort): 100 leaves;
- 1,000 applications, 10 per leaf, users ``u0`` .. ``u19``;
- 5,000 nodes of 16 GB / 16 cores;
- tasks of three sizes (small, medium, large: 3 : 2 : 1), each for a random application;
- at arrival rate ``rate`` tasks/s the durations are exponential with mean ``running / rate``,
  so completions balance arrivals with ``running`` tasks running (Little's law); the cluster
  is then about 70 % full (50,000 tasks of 1.17 GB on average in 80 TB) and no queue max or
  user limit binds on average, so a backlog that grows is the scheduler's, not the quotas'.

Everything random comes from one ``random.Random(seed)``: the same seed gives the same apps,
sizes and durations. Pure: no I/O, no clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["ChurnShape", "Task", "TaskSource", "config_yaml", "TASK_SIZES"]

GB = 1_000_000_000
# (memory bytes, vcore milli-cores), weight
TASK_SIZES = (((GB // 2, 250), 3), ((GB, 500), 2), ((3 * GB, 1000), 1))


@dataclass(frozen=True)
class ChurnShape:
    nodes: int = 5_000  # in all partitions
    running: int = 50_000  # tasks running at steady state, in all partitions
    apps: int = 1_000  # spread over the leaves in turn
    parents: int = 10  # under root; the first half carry a per-user limit
    leaves_per_parent: int = 10
    users: int = 20  # the apps' users in turn
    partitions: int = 1  # each on its own worker
    node_memory: int = 16 * GB
    node_vcore: int = 16_000  # milli-cores

    def __post_init__(self) -> None:
        for name in ("nodes", "running", "apps", "parents", "leaves_per_parent", "users", "partitions"):
            if getattr(self, name) <= 0:
                raise ValueError(f"churn workload: {name} must be positive, got {getattr(self, name)}")
        if self.apps < self.leaves or self.nodes < self.partitions:
            raise ValueError(f"churn workload: {self.apps} apps and {self.nodes} nodes do not cover "
                             f"{self.leaves} leaf queues and {self.partitions} partitions")

    @property
    def leaves(self) -> int:
        return self.parents * self.leaves_per_parent

    def partition_names(self) -> list[str]:
        return ["default"] + [f"part{i}" for i in range(1, self.partitions)]

    def leaf(self, app_index: int) -> str:
        leaf = app_index % self.leaves
        return f"root.p{leaf // self.leaves_per_parent}.q{leaf % self.leaves_per_parent}"

    def app_partition(self, app_index: int) -> str:
        return self.partition_names()[(app_index // self.leaves) % self.partitions]

    def node_partition(self, node_index: int) -> str:
        return self.partition_names()[node_index % self.partitions]

    def user(self, app_index: int) -> str:
        return f"u{app_index % self.users}"


def config_yaml(shape: ChurnShape) -> str:
    """queues.yaml for the shape: every partition the same tree, sized from its share of the load."""
    mean_mem = _mean_task_memory()
    per_part = shape.running * mean_mem // shape.partitions  # expected memory in use per partition
    per_parent = per_part // shape.parents
    per_leaf = per_parent // shape.leaves_per_parent
    per_user = per_parent // 2  # a parent's apps belong to 10 users: 5x a user's share, rarely binding
    lines = ["partitions:"]
    for name in shape.partition_names():
        lines += [f"  - name: {name}", "    queues:", "      - name: root", "        submitacl: '*'",
                  "        queues:"]
        for p in range(shape.parents):
            lines += [f"          - name: p{p}",
                      f"            resources: {{guaranteed: {{memory: {per_parent}}}, "
                      f"max: {{memory: {per_parent * 2}}}}}"]
            if p < shape.parents // 2:
                lines += ["            limits:",
                          f"              - {{limit: per user, users: ['*'], maxresources: {{memory: {per_user}}}}}"]
            lines.append("            queues:")
            for q in range(shape.leaves_per_parent):
                lines += [f"              - name: q{q}",
                          "                properties: {application.sort.policy: fair}",
                          f"                resources: {{guaranteed: {{memory: {per_leaf // 2}}}, "
                          f"max: {{memory: {per_leaf * 3}}}}}"]
    return "\n".join(lines) + "\n"


def _mean_task_memory() -> int:
    total = sum(w for _, w in TASK_SIZES)
    return sum(size[0] * w for size, w in TASK_SIZES) // total


@dataclass(frozen=True, slots=True)
class Task:
    key: str
    app_index: int
    memory: int
    vcore: int


class TaskSource:
    """Seeded tasks and durations: ``next_task()`` for the next arrival, ``duration(rate)``
    for how long it runs when tasks arrive at ``rate`` per second."""

    def __init__(self, shape: ChurnShape, seed: int) -> None:
        self.shape = shape
        self.rng = random.Random(seed)
        self._sizes = [s for s, _ in TASK_SIZES]
        self._weights = [w for _, w in TASK_SIZES]
        self.count = 0

    def next_task(self) -> Task:
        self.count += 1
        mem, vcore = self.rng.choices(self._sizes, self._weights)[0]
        return Task(f"t{self.count}", self.rng.randrange(self.shape.apps), mem, vcore)

    def duration(self, rate: float) -> float:
        """Seconds a task runs: exponential, mean ``running / rate`` (memoryless, so a running
        task's remaining time can be drawn again when the rate changes)."""
        if rate <= 0:
            raise ValueError(f"churn workload: arrival rate must be positive, got {rate}")
        return self.rng.expovariate(rate / self.shape.running)
