"""What the shim reads from namespaces and priority classes, as YuniKorn's shim reads it.

A namespace's annotations become application tags (``read_namespace``):
``yunikorn.apache.org/namespace.quota`` (JSON map of quantities; the deprecated
``namespace.max.cpu`` / ``namespace.max.memory`` when it is absent) -> ``namespace.resourcequota``,
``yunikorn.apache.org/namespace.guaranteed`` -> ``namespace.resourceguaranteed``,
``yunikorn.apache.org/namespace.maxApps`` (an integer >= 0) -> ``namespace.resourcemaxapps``,
``yunikorn.apache.org/parentqueue`` -> ``namespace.parentqueue``. Korral's
``yunikorn.apache.org/partition`` names the partition of the namespace's applications
(``k8s_shim.pools``). Resources are written as
YuniKorn writes an SI ``Resource`` in JSON (``{"resources": {"vcore": {"value": 500}}}``). A value
that cannot be read leaves its tag out and is a ``Problem`` naming the namespace's annotation.
A namespace's labels are kept: a pod affinity term's ``namespaceSelector`` matches them
(``k8s_shim.translate.interpod``).

A PriorityClass's ``yunikorn.apache.org/allow-preemption: "false"`` keeps the pods of that class
from being preempted unless the pod says otherwise (``read_priority_class``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from common.constants import (APP_TAG_NAMESPACE_RESOURCE_GUARANTEED, APP_TAG_NAMESPACE_RESOURCE_MAX_APPS,
                              APP_TAG_NAMESPACE_RESOURCE_QUOTA, DOMAIN_YUNIKORN)
from k8s_shim.translate import quantity
from k8s_shim.translate.pods import ANNOTATION_ALLOW_PREEMPTION, ANNOTATION_PARTITION, Problem

__all__ = ["NamespaceInfo", "read_namespace", "read_priority_class", "APP_TAG_NAMESPACE_PARENT_QUEUE"]

ANNOTATION_QUOTA = DOMAIN_YUNIKORN + "namespace.quota"
ANNOTATION_MAX_CPU = DOMAIN_YUNIKORN + "namespace.max.cpu"
ANNOTATION_MAX_MEMORY = DOMAIN_YUNIKORN + "namespace.max.memory"
ANNOTATION_GUARANTEED = DOMAIN_YUNIKORN + "namespace.guaranteed"
ANNOTATION_MAX_APPS = DOMAIN_YUNIKORN + "namespace.maxApps"
ANNOTATION_PARENT_QUEUE = DOMAIN_YUNIKORN + "parentqueue"
APP_TAG_NAMESPACE_PARENT_QUEUE = "namespace.parentqueue"


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str
    tags: dict[str, str]
    problems: tuple[Problem, ...] = ()
    partition: str = ""  # the yunikorn.apache.org/partition annotation (k8s_shim.pools)
    labels: dict[str, str] = field(default_factory=dict)  # what pod affinity's namespaceSelector matches


def _field(name: str) -> str:
    return f"metadata.annotations[{name}]"


def _si_json(values: dict[str, int]) -> str:
    return orjson.dumps({"resources": {k: {"value": v} for k, v in values.items()}}).decode()


def _resource_map(text: str, annotation: str, problems: list[Problem]) -> dict[str, int] | None:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        problems.append(Problem(_field(annotation), f"not JSON ({exc}): ignored"))
        return None
    if not isinstance(doc, dict):
        problems.append(Problem(_field(annotation), 'expected a JSON map such as {"cpu": "2", "memory": "4Gi"}: ignored'))
        return None
    out = {}
    for name, text_value in doc.items():
        try:
            si_name, amount = quantity.si_value(str(name), text_value if isinstance(text_value, str) else str(text_value))
        except ValueError as exc:
            problems.append(Problem(f"{_field(annotation)}.{name}", f"{exc}: the annotation is ignored"))
            return None
        if amount < 0:
            problems.append(Problem(f"{_field(annotation)}.{name}", "negative quantity: the annotation is ignored"))
            return None
        out[si_name] = amount
    return out


def read_namespace(raw: dict) -> NamespaceInfo:
    meta = raw.get("metadata") or {}
    name = meta.get("name", "")
    ann = meta.get("annotations") or {}
    tags: dict[str, str] = {}
    problems: list[Problem] = []
    quota = None
    if ann.get(ANNOTATION_QUOTA):
        quota = _resource_map(ann[ANNOTATION_QUOTA], ANNOTATION_QUOTA, problems)
    elif ann.get(ANNOTATION_MAX_CPU) or ann.get(ANNOTATION_MAX_MEMORY):
        quota = {}
        for annotation, kind in ((ANNOTATION_MAX_CPU, "cpu"), (ANNOTATION_MAX_MEMORY, "memory")):
            if ann.get(annotation):
                try:
                    si_name, amount = quantity.si_value(kind, ann[annotation])
                    quota[si_name] = amount
                except ValueError as exc:
                    problems.append(Problem(_field(annotation), f"{exc}: the quota annotations are ignored"))
                    quota = None
                    break
    if quota and any(quota.values()):
        tags[APP_TAG_NAMESPACE_RESOURCE_QUOTA] = _si_json(quota)
    if ann.get(ANNOTATION_GUARANTEED):
        guaranteed = _resource_map(ann[ANNOTATION_GUARANTEED], ANNOTATION_GUARANTEED, problems)
        if guaranteed and any(guaranteed.values()):
            tags[APP_TAG_NAMESPACE_RESOURCE_GUARANTEED] = _si_json(guaranteed)
    if ann.get(ANNOTATION_MAX_APPS):
        value = ann[ANNOTATION_MAX_APPS]
        if value.strip().lstrip("+").isdigit():
            tags[APP_TAG_NAMESPACE_RESOURCE_MAX_APPS] = str(int(value))
        else:
            problems.append(Problem(_field(ANNOTATION_MAX_APPS), f"{value!r} is not an integer >= 0: ignored"))
    if ann.get(ANNOTATION_PARENT_QUEUE):
        tags[APP_TAG_NAMESPACE_PARENT_QUEUE] = ann[ANNOTATION_PARENT_QUEUE]
    return NamespaceInfo(name, tags, tuple(problems), ann.get(ANNOTATION_PARTITION, ""), dict(meta.get("labels") or {}))


def read_priority_class(raw: dict) -> bool:
    """Whether pods of this class may be preempted (no pod annotation saying otherwise)."""
    return ((raw.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_ALLOW_PREEMPTION) != "false"
