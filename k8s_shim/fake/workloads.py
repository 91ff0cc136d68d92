"""Kubernetes' own gang API, ``scheduling.k8s.io/v1alpha2`` (Workload and PodGroup), as a v1.36
server with ``--runtime-config=scheduling.k8s.io/v1alpha2=true`` and the ``GenericWorkload``
feature gate serves it (file 05 of ``k8s-wire/v1.36``). Off by default, as on a real server:
``korral k8s-fake --runtime-config scheduling.k8s.io/v1alpha2=true`` turns it on.

What the server does: a scheduling policy is exactly one of ``basic`` / ``gang`` and a gang's
``minCount`` is at least 1 (422s as recorded); a PodGroup gets ``disruptionMode: Pod`` and the
``scheduling.k8s.io/podgroup-protection`` finalizer, so its DELETE leaves it with a
deletionTimestamp until kube-controller-manager's protection controller
(``fake.podgroup_protection``) sees no running pod naming it; its ``minCount`` cannot change. What it does not: check
that a pod's ``spec.schedulingGroup`` names a PodGroup that exists (file 05 exchange 7).
"""

from __future__ import annotations

from typing import Any

from k8s_shim.fake.kinds import Causes, Kind, Objects

__all__ = ["Workloads", "PodGroups", "WORKLOAD_KINDS", "GROUP_VERSION", "RUNTIME_CONFIG", "PROTECTION"]

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha2"
GROUP_VERSION = f"{GROUP}/{VERSION}"
RUNTIME_CONFIG = f"{GROUP_VERSION}=true"  # the kube-apiserver flag value that turns the group on
PROTECTION = "scheduling.k8s.io/podgroup-protection"


def policy_causes(policy: Any, field: str) -> Causes:
    """A scheduling policy's 422 causes: exactly one of basic/gang; a gang's minCount >= 1."""
    if not isinstance(policy, dict):
        policy = {}
    chosen = sorted(k for k in ("basic", "gang") if policy.get(k) is not None)
    if len(chosen) != 1:
        shown = "{" + ", ".join(chosen) + "}"
        return [("FieldValueInvalid", field,
                 f'Invalid value: "{shown}": must specify exactly one of: `basic`, `gang`')]
    if chosen == ["gang"]:
        count = (policy["gang"] or {}).get("minCount") if isinstance(policy["gang"], dict) else None
        if not count:  # 0 and missing alike (file 05 exchange 4)
            return [("FieldValueRequired", f"{field}.gang.minCount", "Required value")]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return [("FieldValueInvalid", f"{field}.gang.minCount",
                     f"Invalid value: {count}: must be greater than or equal to 0")]
    return []


class _Scheduling(Kind):
    group, version, invalid_group = GROUP, VERSION, GROUP
    top_level = ("spec", "status")


class Workloads(_Scheduling):
    plural, kind, singular = "workloads", "Workload", "workload"
    storage_hash = "vSX7gJe5Mx8="
    has_generation = False

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        for template in (obj.get("spec") or {}).get("podGroupTemplates") or []:
            if isinstance(template, dict):
                template.setdefault("schedulingConstraints", None)  # a pointer without omitempty (file 05)

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        for i, template in enumerate((obj.get("spec") or {}).get("podGroupTemplates") or []):
            causes += policy_causes((template or {}).get("schedulingPolicy"),
                                    f"spec.podGroupTemplates[{i}].schedulingPolicy")
        return causes


class PodGroups(_Scheduling):
    plural, kind, singular = "podgroups", "PodGroup", "podgroup"
    storage_hash = "YYgX3v5V204="
    subresources = {"status": ("get", "patch", "update")}
    has_status = True
    returns_object_on_delete = True

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        ordered = {"podGroupTemplateRef": spec.get("podGroupTemplateRef")}
        ordered.update(spec)
        ordered.setdefault("disruptionMode", "Pod")
        obj["spec"] = ordered

    def admit_create(self, obj: dict[str, Any], api: Objects) -> None:
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if PROTECTION not in finalizers:
            finalizers.append(PROTECTION)

    def prepare_create(self, obj: dict[str, Any], api: Objects) -> None:
        obj["status"] = {}

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        return causes + policy_causes((obj.get("spec") or {}).get("schedulingPolicy"), "spec.schedulingPolicy")

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        if subresource == "status":
            return []
        before = (((old.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
        after = (((new.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
        if before != after:  # the docs: a gang's size is fixed once created
            return [("FieldValueInvalid", "spec.schedulingPolicy.gang.minCount",
                     f"Invalid value: {after}: field is immutable")]
        return []


WORKLOAD_KINDS: tuple[type[Kind], ...] = (PodGroups, Workloads)
