"""Dynamic Resource Allocation, resource.k8s.io/v1, as a v1.36 server serves it (files 06-09 and
15 of ``k8s-wire/v1.36``): DeviceClass, ResourceSlice, ResourceClaim (with its status
subresource) and ResourceClaimTemplate.

What the server checks: a class's CEL selectors compile and are bool-typed; a slice's pool and
node selection; a claim's status shape (each result's pool, its request naming one of the claim's
requests, reservedFor uids, reservedFor only with an allocation, an allocation never changed once
set). What it does not: whether devices exist or are free, or where a pod with a claim is bound
(the scheduler's job).
"""

from __future__ import annotations

import json
import re
from typing import Any

import cel

from k8s_shim.fake.kinds import ALL_VERBS, Causes, Kind, Objects

__all__ = ["DeviceClasses", "ResourceSlices", "ResourceClaims", "ResourceClaimTemplates", "DRA_KINDS",
           "DELETE_PROTECTION", "POD_CLAIM_NAME", "pod_claim_causes"]

GROUP = "resource.k8s.io"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"  # kube-scheduler's finalizer on claims
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"  # annotation of a claim made from a template
_PARSE_PREFIX = re.compile(r"^Failed to parse expression '.*?': ", re.S)


class _Dra(Kind):
    group = invalid_group = GROUP
    returns_object_on_delete = deleted_at_once = True  # file 06: the slice answered, one write
    verbs = ALL_VERBS
    top_level = ("spec", "status")

    def field_error(self, field: str) -> str:
        return f"field label not supported for {GROUP}/{self.version}, Kind={self.kind}: {field}"


# -- CEL: compiled here only to refuse what a real server refuses ---------------------------------

_SAMPLE_DEVICE = {"driver": "", "attributes": {}, "capacity": {}, "allowMultipleAllocations": False}


def cel_causes(expression: Any, field: str) -> Causes:
    """The 422 causes of a selector's expression: it must compile and be a bool (kube type-checks;
    this evaluates against an empty device, so a non-bool constant or field is caught)."""
    if not isinstance(expression, str) or not expression:
        return [("FieldValueRequired", field, "Required value")]
    try:
        program = cel.compile(expression)
    except (ValueError, RuntimeError) as exc:
        detail = _PARSE_PREFIX.sub("", str(exc)).replace("\n| ", "\n | ")
        return [("FieldValueInvalid", field, f'Invalid value: "{expression}": compilation failed: {detail}')]
    try:
        value = program.execute({"device": _SAMPLE_DEVICE})
    except Exception:  # a missing key of the empty device: its type is not known here (kube: unknown)
        return []
    if not isinstance(value, bool):
        type_name = {str: "string", int: "int", float: "double", list: "list", dict: "map"}.get(type(value), "dyn")
        return [("FieldValueInvalid", field,
                 f'Invalid value: "{expression}": must evaluate to bool or the unknown type, not {type_name}')]
    return []


def _selectors_causes(selectors: Any, field: str) -> Causes:
    causes: Causes = []
    for i, sel in enumerate(selectors or []):
        expression = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, dict) else None
        causes += cel_causes(expression, f"{field}[{i}].cel.expression")
    return causes


class DeviceClasses(_Dra):
    plural, kind, namespaced, singular = "deviceclasses", "DeviceClass", False, "deviceclass"
    storage_hash = "Yk2PTc1Ybxk="
    has_generation = True
    top_level = ("spec",)

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        return causes + _selectors_causes((obj.get("spec") or {}).get("selectors"), "spec.selectors")


_NODE_CHOICES = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


class ResourceSlices(_Dra):
    plural, kind, namespaced, singular = "resourceslices", "ResourceSlice", False, "resourceslice"
    storage_hash = "KsC072WgaEY="
    has_generation = True
    extra_fields = ("spec.nodeName", "spec.driver")
    top_level = ("spec",)

    def fields(self, obj: dict[str, Any]) -> dict[str, str]:
        spec = obj.get("spec") or {}
        return {"metadata.name": obj["metadata"]["name"], "spec.nodeName": spec.get("nodeName") or "",
                "spec.driver": spec.get("driver") or ""}

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        spec = obj.get("spec") or {}
        if not spec.get("driver"):
            causes.append(("FieldValueRequired", "spec.driver", "Required value"))
        pool = spec.get("pool") or {}
        if not pool.get("name"):
            causes.append(("FieldValueRequired", "spec.pool.name", "Required value"))
        count = pool.get("resourceSliceCount") or 0
        if not isinstance(count, int) or count <= 0:
            causes.append(("FieldValueInvalid", "spec.pool.resourceSliceCount",
                           f"Invalid value: {count}: must be greater than zero"))
        chosen = [k for k in _NODE_CHOICES if spec.get(k)]
        if len(chosen) > 1:
            names = ", ".join(f"`{k}`" for k in chosen)
            causes.append(("FieldValueInvalid", "spec",
                           f'Invalid value: "{{{names}}}": exactly one of `nodeName`, `nodeSelector`, `allNodes`, '
                           "`perDeviceNodeSelection` is required, but multiple fields are set"))
        elif not chosen:
            causes.append(("FieldValueRequired", "spec", "Required value: exactly one of `nodeName`, "
                           "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"))
        for i, device in enumerate(spec.get("devices") or []):
            if not isinstance(device, dict) or not device.get("name"):
                causes.append(("FieldValueRequired", f"spec.devices[{i}].name", "Required value"))
        return causes


def _default_exactly(exactly: dict[str, Any]) -> None:
    exactly.setdefault("allocationMode", "ExactCount")
    if exactly["allocationMode"] == "ExactCount":
        exactly.setdefault("count", 1)


def default_claim_spec(spec: dict[str, Any]) -> None:
    """A claim spec's defaults (a claim's, or a template's): ExactCount of 1 (files 07 and 08)."""
    for request in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_exactly(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                _default_exactly(sub)


def _request_names(spec: dict[str, Any]) -> set[str]:
    names = set()
    for request in (spec.get("devices") or {}).get("requests") or []:
        name = request.get("name", "")
        names.add(name)
        for sub in request.get("firstAvailable") or []:
            names.add(f"{name}/{sub.get('name', '')}")
    return names


class ResourceClaims(_Dra):
    plural, kind, singular = "resourceclaims", "ResourceClaim", "resourceclaim"
    storage_hash = "wgAZaHcZxUg="
    subresources = {"status": ("get", "patch", "update")}
    has_status = True

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        default_claim_spec(obj.setdefault("spec", {}))

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
        for i, request in enumerate(requests):
            exactly = (request or {}).get("exactly") or {}
            causes += _selectors_causes(exactly.get("selectors"), f"spec.devices.requests[{i}].exactly.selectors")
        if old is not None and obj.get("spec") != old.get("spec"):
            causes.append(("FieldValueInvalid", "spec", "Invalid value: field is immutable"))
        return causes

    def prepare_create(self, obj: dict[str, Any], api: Objects) -> None:
        obj["status"] = {}

    def prepare_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> dict[str, Any]:
        new = super().prepare_update(old, new, subresource)
        if subresource == "status":
            new["status"] = {k: v for k, v in (new.get("status") or {}).items() if v not in (None, [], {})}
        return new

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        if subresource != "status":
            return []
        status, before = new.get("status") or {}, old.get("status") or {}
        causes: Causes = []
        allocation = status.get("allocation")
        names = _request_names(new.get("spec") or {})
        if allocation:
            for i, result in enumerate((allocation.get("devices") or {}).get("results") or []):
                where = f"status.allocation.devices.results[{i}]"
                for key in ("driver", "pool", "device"):
                    if not result.get(key):
                        causes.append(("FieldValueRequired", f"{where}.{key}", "Required value"))
                if result.get("request") not in names:
                    causes.append(("FieldValueInvalid", f"{where}.request",
                                   f'Invalid value: "{result.get("request", "")}": must be the name of a request in '
                                   "the claim or the name of a request and a subrequest separated by '/'"))
            if before.get("allocation") and allocation != before["allocation"]:
                causes.append(("FieldValueInvalid", "status.allocation",
                               f"Invalid value: {allocation}: field is immutable"))
        reserved = status.get("reservedFor") or []
        if reserved and not allocation:
            causes.append(("FieldValueForbidden", "status.reservedFor",
                           "Forbidden: may not be specified when `allocated` is not set"))
        for i, ref in enumerate(reserved):
            for key in ("resource", "name", "uid"):
                if not (ref or {}).get(key):
                    causes.append(("FieldValueRequired", f"status.reservedFor[{i}].{key}", "Required value"))
        return causes


class ResourceClaimTemplates(_Dra):
    plural, kind, singular = "resourceclaimtemplates", "ResourceClaimTemplate", "resourceclaimtemplate"
    storage_hash = "TuzjC49aUfM="
    top_level = ("spec",)

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        default_claim_spec(((obj.setdefault("spec", {})).setdefault("spec", {})))


def pod_claim_causes(spec: dict[str, Any]) -> Causes:
    """A pod's DRA fields as a v1.36 server validates them (file 09): each pod claim has exactly
    one source; a container's claim names a pod claim."""
    causes: Causes = []
    names = []
    for i, pc in enumerate(spec.get("resourceClaims") or []):
        if not isinstance(pc, dict):
            continue
        names.append(pc.get("name", ""))
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if pc.get(k)]
        if len(sources) != 1:
            dump = json.dumps({"Name": pc.get("name", ""), "ResourceClaimName": pc.get("resourceClaimName"),
                               "ResourceClaimTemplateName": pc.get("resourceClaimTemplateName")},
                              separators=(",", ":"))
            why = ("at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified" if sources
                   else "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`")
            causes.append(("FieldValueInvalid", f"spec.resourceClaims[{i}]", f"Invalid value: {dump}: {why}"))
    for list_name in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(list_name) or []):
            for j, claim in enumerate(((c or {}).get("resources") or {}).get("claims") or []):
                if (claim or {}).get("name") not in names:
                    causes.append(("FieldValueNotFound", f"spec.{list_name}[{i}].resources.claims[{j}]",
                                   f'Not found: "{(claim or {}).get("name", "")}": must be one of the names in '
                                   f"pod.spec.resourceClaims: {', '.join(names)}" if names else
                                   f'Not found: "{(claim or {}).get("name", "")}": must be one of the names in '
                                   "pod.spec.resourceClaims"))
    return causes


DRA_KINDS: tuple[type[Kind], ...] = (DeviceClasses, ResourceClaims, ResourceClaimTemplates, ResourceSlices)
