"""The compatibility switch: which YuniKorn version's semantics an RM gets where the seeds
(YuniKorn v1.2) and today's YuniKorn disagree, and how that version is chosen for an RM.

The choice (``choose``), first that applies:

1. **explicit**: the key ``korral.compatibility`` of the RM's ``extraConfig`` (the map YuniKorn
   fills from its configmap): a released YuniKorn version from ``1.2`` to ``1.9``. ``1.10``
   (which older Korral docs offered for a master commit; YuniKorn has not released it) is read
   as ``1.9``, with a warning. Anything else is refused (``ValueError`` naming the key).
2. **buildInfo**: the registration's ``buildInfo`` ``buildVersion`` (what the k8s shim sends)
   names a release >= 1.6: the newest released behaviour (``NEWEST``).
3. **SI revision**: an RM speaking SI v1.8 (declared at registration or decided by its first
   messages, ``common.si_revision``) gets the newest released behaviour; one speaking the
   seed's SI keeps the seeds' (1.2). While the revision is undecided: the seeds', until the
   RM's first decisive message.

The registration (Redis, ``common.registry``) carries extraConfig and buildInfo to every worker;
rmproxy tells the workers the revision. Features with their own config keys (unschedulable-ask
backoff, quota preemption, the LDAP resolver, foreign allocations) do not depend on it.
docs/yunikorn-compat.md lists them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from common.si_revision import Revision, declared_revision

__all__ = ["Compat", "CompatChoice", "COMPAT_KEY", "BUILD_VERSION_KEY", "COMPAT_VERSIONS", "NEWEST", "SEEDS",
           "choose", "compat_warnings", "parse_compat"]

COMPAT_KEY = "korral.compatibility"
BUILD_VERSION_KEY = "buildVersion"  # the k8s shim's buildInfo key: its release, e.g. "1.9.0"
# the values accepted: YuniKorn's released minor versions, oldest first; "1.2" is the seeds'
COMPAT_VERSIONS = ("1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8", "1.9")
NEWEST = (1, 9)  # the newest released YuniKorn (1.9.0, 2026-07-29)
# values read as another, each with why: existing configs may carry them
ALIASES = {"1.10": ("1.9", "YuniKorn 1.10 is not released; older Korral docs used '1.10' for a master "
                           "commit whose behaviour Korral has under 1.9")}
_FIRST_TODAY = (1, 6)  # a build declaring this release or a later one gets NEWEST
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:[.\-+].*)?$")
_V1_4, _V1_6, _V1_8, _V1_9 = (1, 4), (1, 6), (1, 8), (1, 9)


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
    preemption_on_by_default = property(lambda self: self.since(_V1_4), doc=(
        "1.4 (YUNIKORN-2107): queue preemption is on when the partition's ``preemption.enabled`` "
        "is unset."))
    recovery_rule = property(lambda self: self.since(_V1_4), doc=(
        "1.4 (YUNIKORN-1793): a forced app no rule places goes to ``root.@recovery@``."))
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
    cancel_held_reservations = property(lambda self: self.since(_V1_9), doc=(
        "1.9 (YUNIKORN-3219): a reservation whose ask a queue max or a user/group limit holds is "
        "cancelled after YuniKorn's reservation wait timeout."))


SEEDS = Compat()


@dataclass(frozen=True, slots=True)
class CompatChoice:
    """The switch in effect for an RM and where it came from: ``source`` is ``explicit``,
    ``buildInfo``, ``SI revision`` or ``default``; ``detail`` says it for people."""

    compat: Compat
    source: str
    detail: str
    warnings: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.compat.text} ({self.source}: {self.detail})"

    def as_dict(self) -> dict[str, str]:
        """The JSON form REST and ``korral status`` show."""
        return {"version": self.compat.text, "source": self.source, "detail": self.detail}


def _explicit(extra_config: Mapping[str, str] | None) -> tuple[Compat, str, str] | None:
    """``korral.compatibility`` if set: (the switch, the value as given, a warning or "");
    ``ValueError`` naming the key and the accepted values for anything else."""
    raw = (extra_config or {}).get(COMPAT_KEY)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    warning = ""
    if text in ALIASES:
        text, why = ALIASES[text]
        warning = f"extraConfig {COMPAT_KEY}: {raw.strip()!r} is read as {text}: {why}"
    if text not in COMPAT_VERSIONS:
        raise ValueError(f"extraConfig {COMPAT_KEY}: unknown value {raw!r}, use one of "
                         f"{', '.join(COMPAT_VERSIONS)} (a released YuniKorn version; absent: chosen by the "
                         "RM's build and SI revision)")
    major, minor = text.split(".")
    return Compat((int(major), int(minor))), raw.strip(), warning


def parse_compat(extra_config: Mapping[str, str] | None) -> Compat | None:
    """The explicit switch of an RM's ``extraConfig`` (None when it sets none); ``ValueError``
    naming the key and the accepted values for an unknown value."""
    found = _explicit(extra_config)
    return found[0] if found is not None else None


def declared_release(build_info: Mapping[str, str] | None) -> tuple[int, int] | None:
    """The (major, minor) release ``buildInfo`` declares (``buildVersion``: ``1.9.0``, ``v1.8.1``);
    None when it declares none or something else (a dev build's ``latest``)."""
    m = _RELEASE.match((build_info or {}).get(BUILD_VERSION_KEY, "").strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def choose(extra_config: Mapping[str, str] | None, build_info: Mapping[str, str] | None,
           revision: Revision | None) -> CompatChoice:
    """The switch in effect for an RM (module doc): its explicit value, else what its build
    declares, else what its SI revision says (``revision``: decided by rmproxy; None: the one
    ``buildInfo`` declares, if any). ``ValueError`` for an unknown explicit value."""
    explicit = _explicit(extra_config)
    if explicit is not None:
        compat, given, warning = explicit
        return CompatChoice(compat, "explicit", f"extraConfig {COMPAT_KEY}={given}", (warning,) if warning else ())
    release = declared_release(build_info)
    newest = Compat(NEWEST)
    if release is not None and release >= _FIRST_TODAY:
        return CompatChoice(newest, "buildInfo", f"buildInfo {BUILD_VERSION_KEY}="
                                                 f"{(build_info or {})[BUILD_VERSION_KEY].strip()}")
    if revision is None:
        try:
            revision = declared_revision(build_info or {})
        except ValueError:
            revision = None  # refused at registration; nothing to choose by
    if revision is Revision.V18:
        return CompatChoice(newest, "SI revision", "v1.8")
    if revision is Revision.SEED:
        return CompatChoice(SEEDS, "SI revision", "seed")
    return CompatChoice(SEEDS, "default", "SI revision not decided yet: the seeds' until the RM's first "
                                          "message that only one revision has")


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
