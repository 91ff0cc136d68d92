"""The compatibility switch: which YuniKorn version's semantics an RM gets where the seeds
(YuniKorn v1.2) and today's YuniKorn disagree.

One key of the RM's ``extraConfig`` (the map YuniKorn fills from its configmap):
``korral.compatibility``. Absent or ``"1.2"``: the seeds' behaviour, what every existing
config gets. ``"1.6"`` to ``"1.10"``: each behaviour below from the version that brought it.
The value reaches every worker with the registration in Redis (``common.registry``).
Features with their own config keys (unschedulable-ask backoff, quota preemption, the LDAP
resolver, foreign allocations) do not depend on it. docs/yunikorn-compat.md lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

__all__ = ["Compat", "COMPAT_KEY", "COMPAT_VERSIONS", "SEEDS", "compat_warnings", "parse_compat"]

COMPAT_KEY = "korral.compatibility"
# the values accepted, oldest first; "1.2" is the seeds' (the default)
COMPAT_VERSIONS = ("1.2", "1.6", "1.7", "1.8", "1.9", "1.10")
_V1_6 = (1, 6)
_V1_8 = (1, 8)
_V1_9 = (1, 9)


@dataclass(frozen=True, slots=True)
class Compat:
    """The YuniKorn version to follow where the seeds and today differ; each property names
    one behaviour and the version it came in (YUNIKORN JIRA in docs/yunikorn-compat.md)."""

    version: tuple[int, int] = (1, 2)

    @property
    def text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def since(self, version: tuple[int, int]) -> bool:
        return self.version >= version

    # each behaviour and the version it came in (the JIRA in docs/yunikorn-compat.md)
    placement_fallback = property(lambda self: self.since(_V1_6), doc=(
        "1.6 (YUNIKORN-2703): an app no rule places goes to ``root.default`` if it exists."))
    stateaware_is_fifo = property(lambda self: self.since(_V1_6), doc=(
        "1.6 (YUNIKORN-2483): ``application.sort.policy: stateaware`` behaves as fifo."))
    no_starting_state = property(lambda self: self.since(_V1_6), doc=(
        "1.6 (YUNIKORN-2495): no ``Starting``; Accepted -> Running on the first allocation."))
    fair_share_queue_sort = property(lambda self: self.since(_V1_6), doc=(
        "1.6 (YUNIKORN-2678): child queues sort by one fair-share number each."))
    preemption_per_resource_type = property(lambda self: self.since(_V1_8), doc=(
        "1.8 (YUNIKORN-3113/3157): a victim's queue must be over its guarantee in a type the "
        "preemptor asks for; other types may be under their guarantee."))
    queue_metrics_by_label_only = property(lambda self: self.since(_V1_8), doc=(
        "1.8 (YUNIKORN-3087): queue metrics only as ``yunikorn_queue_app`` and "
        "``yunikorn_queue_resource`` with a ``queue`` label; ``yunikorn_<queue>_queue_*`` are gone."))
    node_capacity_without_zeros = property(lambda self: self.since(_V1_9), doc=(
        "1.9 (YUNIKORN-2826): a node's capacity (and so its available) leaves out zero-valued "
        "resources."))


SEEDS = Compat()


def parse_compat(extra_config: Mapping[str, str] | None) -> Compat:
    """The switch from an RM's ``extraConfig``; raises ``ValueError`` naming the key and the
    accepted values for anything else."""
    raw = (extra_config or {}).get(COMPAT_KEY)
    if raw is None or raw.strip() == "":
        return SEEDS
    text = raw.strip()
    if text not in COMPAT_VERSIONS:
        raise ValueError(f"extraConfig {COMPAT_KEY}: unknown value {raw!r}, use one of "
                         f"{', '.join(COMPAT_VERSIONS)} (absent: 1.2, the seeds' behaviour)")
    major, minor = text.split(".")
    return Compat((int(major), int(minor)))


def compat_warnings(config, compat: Compat) -> list[str]:
    """What ``compat`` changes in ``config`` (a ``SchedulerConfig``) that its author should
    know: today each ``stateaware`` queue, run as fifo (YuniKorn's deprecation warning)."""
    if not compat.stateaware_is_fifo:
        return []
    out: list[str] = []

    def walk(partition: str, queue, path: str) -> None:
        if queue.properties.get("application.sort.policy", "").strip().lower() == "stateaware":
            out.append(f"partition {partition}, queue {path}: Sort policy 'stateaware' is deprecated; "
                       f"using 'fifo' instead ({COMPAT_KEY} {compat.text})")
        for child in queue.queues:
            walk(partition, child, f"{path}.{child.name}")

    for part in config.partitions:
        if part.queues:
            walk(part.name, part.root, "root")
    return out
