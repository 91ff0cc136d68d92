"""The Pod strategy of a v1.24 API server: defaults, validation, the admission plugins that touch
pods (Priority, DefaultTolerationSeconds, NamespaceLifecycle is generic), update rules and the
graceful-deletion period (files 06-08, 24-27, 29, 36); a v1.36 server's checks and merge of
pod affinity and topology spread (v1.36 files 04 and 14: ``k8s_shim.fake.constraints``)."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from k8s_shim.fake import constraints, quantity
from k8s_shim.fake.dra import pod_claim_causes
from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.kinds import Causes, Kind, Objects

__all__ = ["Pods", "qos_class", "decode_quantities", "grace_period"]

_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_UPDATE_FORBIDDEN = ("Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                     "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                     "additions to existing tolerations) or `spec.terminationGracePeriodSeconds` (allow it to be "
                     "set to 1 if it was previously negative)")
TERMINAL = ("Succeeded", "Failed")


def _containers(spec: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    return [(name, i, c) for name in _CONTAINER_LISTS for i, c in enumerate(spec.get(name) or [])
            if isinstance(c, dict)]


def decode_quantities(pod: dict[str, Any]) -> None:
    """Parse (and canonicalise) every resource quantity; a bad one is a decode error (400)."""
    spec = pod.get("spec") or {}
    sections = [c.get("resources") or {} for _, _, c in _containers(spec)]
    if isinstance(spec.get("overhead"), dict):
        sections.append({"overhead": spec["overhead"]})
    for res in sections:
        for key in ("requests", "limits", "overhead"):
            values = res.get(key)
            if not isinstance(values, dict):
                continue
            for name, value in list(values.items()):
                try:
                    values[name] = quantity.canonical(value)
                except quantity.QuantityError as exc:
                    raise ApiError.bad_request(f'Pod in version "v1" cannot be handled as a Pod: {exc}') from None


def qos_class(spec: dict[str, Any]) -> str:
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for name, _, c in _containers(spec):
        if name == "ephemeralContainers":
            continue
        res = c.get("resources") or {}
        req = {k: quantity.parse(v) for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: quantity.parse(v) for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        for k, v in req.items():
            if v > 0:
                requests[k] = requests.get(k, Decimal(0)) + v
        for k, v in lim.items():
            if v > 0:
                limits[k] = limits.get(k, Decimal(0)) + v
        if set(lim) != {"cpu", "memory"} or any(req.get(k, lim[k]) != lim[k] for k in lim):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed and limits else "Burstable"


def grace_period(pod: dict[str, Any], requested: int | None) -> int:
    """The grace period a DELETE gets: what was asked or the pod's own, 0 for an unbound or a
    terminated pod (those are removed at once, files 27 and 29)."""
    spec = pod.get("spec") or {}
    period = requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30) or 0
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL:
        period = 0
    return 1 if period < 0 else period


def _toleration_repr(t: dict[str, Any]) -> str:
    seconds = t.get("tolerationSeconds")
    secs = "(*int64)(nil)" if seconds is None else f"&{seconds}"
    return (f'core.Toleration{{Key:"{t.get("key", "")}", Operator:"{t.get("operator", "")}", '
            f'Value:"{t.get("value", "")}", Effect:"{t.get("effect", "")}", TolerationSeconds:{secs}}}')


class Pods(Kind):
    top_level = ("spec", "status")
    plural, kind, short_names, categories = "pods", "Pod", ("po",), ("all",)
    subresources = {"attach": ("create", "get"), "binding": ("create",), "eviction": ("create",),
                    "exec": ("create", "get"), "log": ("get",), "resize": ("get", "patch", "update"),
                    "status": ("get", "patch", "update")}
    storage_hash = "xPOwRZ+Yhw8="
    has_status = True
    returns_object_on_delete = True
    scheduling_group = False  # spec.schedulingGroup kept (GenericWorkload on: fake.catalog); else dropped
    extra_fields = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                    "status.phase", "status.podIP", "status.nominatedNodeName")

    def fields(self, obj: dict[str, Any]) -> dict[str, str]:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        return {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
                "spec.nodeName": spec.get("nodeName", ""), "spec.restartPolicy": spec.get("restartPolicy", ""),
                "spec.schedulerName": spec.get("schedulerName", ""),
                "spec.serviceAccountName": spec.get("serviceAccountName", ""),
                "status.phase": status.get("phase", ""), "status.podIP": status.get("podIP", ""),
                "status.nominatedNodeName": status.get("nominatedNodeName", "")}

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        decode_quantities(obj)
        spec = obj.setdefault("spec", {})
        for _, _, c in _containers(spec):
            res = c.setdefault("resources", {})
            limits = res.get("limits") or {}
            if limits:
                requests = res.setdefault("requests", {})
                for k, v in limits.items():
                    requests.setdefault(k, v)
            for port in c.get("ports") or []:
                port.setdefault("protocol", "TCP")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = c.get("image", "")
            tag = image.rsplit("/", 1)[-1]
            latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("enableServiceLinks", True)
        if not self.scheduling_group:
            spec.pop("schedulingGroup", None)  # a field of a disabled feature gate is dropped, as a real server does

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api) if obj["metadata"].get("name") else []
        if not obj["metadata"].get("name"):
            causes.append(("FieldValueRequired", "metadata.name",
                           "Required value: name or generateName is required"))
        spec = obj.get("spec") or {}
        if not spec.get("containers"):
            causes.append(("FieldValueRequired", "spec.containers", "Required value"))
        for list_name, i, c in _containers(spec):
            path = f"spec.{list_name}[{i}]"
            if not c.get("name"):
                causes.append(("FieldValueRequired", f"{path}.name", "Required value"))
            if not c.get("image") and list_name != "ephemeralContainers":
                causes.append(("FieldValueRequired", f"{path}.image", "Required value"))
            res = c.get("resources") or {}
            for section in ("limits", "requests"):
                for name, value in (res.get(section) or {}).items():
                    if quantity.parse(value) < 0:
                        causes.append(("FieldValueInvalid", f"{path}.resources.{section}[{name}]",
                                       f'Invalid value: "{value}": must be greater than or equal to 0'))
            limits = res.get("limits") or {}
            for name, value in (res.get("requests") or {}).items():
                if name in limits and quantity.parse(value) > quantity.parse(limits[name]):
                    causes.append(("FieldValueInvalid", f"{path}.resources.requests",
                                   f'Invalid value: "{value}": must be less than or equal to {name} limit'))
        causes += pod_claim_causes(spec)  # DRA (v1.36)
        policy = spec.get("restartPolicy")
        if policy not in ("Always", "OnFailure", "Never"):
            causes.append(("FieldValueNotSupported", "spec.restartPolicy",
                           f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"'))
        for i, t in enumerate(spec.get("tolerations") or []):
            op = t.get("operator") or "Equal"
            if op not in ("Equal", "Exists"):
                causes.append(("FieldValueNotSupported", f"spec.tolerations[{i}].operator",
                               f'Unsupported value: "{op}": supported values: "Equal", "Exists"'))
            elif op == "Exists" and t.get("value"):
                causes.append(("FieldValueInvalid", f"spec.tolerations[{i}].operator",
                               f"Invalid value: {_toleration_repr(t)}: value must be empty when `operator` is "
                               "'Exists'"))
            effect = t.get("effect", "")
            if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
                causes.append(("FieldValueNotSupported", f"spec.tolerations[{i}].effect",
                               f'Unsupported value: "{effect}": supported values: "NoSchedule", '
                               '"PreferNoSchedule", "NoExecute"'))
        if old is None:  # a stored pod's selectors hold its merged label keys (k8s_shim.fake.constraints)
            causes += constraints.causes(spec)
        return causes

    def admit_create(self, obj: dict[str, Any], api: Objects) -> None:
        spec = obj["spec"]
        name = obj["metadata"].get("name", "")
        # Priority (file 08): priority and preemptionPolicy come from the class
        class_name = spec.get("priorityClassName")
        value, policy = 0, "PreemptLowerPriority"
        if class_name:
            pc = api.lookup("scheduling.k8s.io/v1", "priorityclasses", "", class_name)
            if pc is None:
                raise ApiError.forbidden(self.resource, name, f"no PriorityClass with name {class_name} was found")
            value, policy = pc.get("value", 0), pc.get("preemptionPolicy", "PreemptLowerPriority")
        else:
            default = api.default_priority_class()
            if default is not None:
                class_name = default["metadata"]["name"]
                spec["priorityClassName"] = class_name
                value, policy = default.get("value", 0), default.get("preemptionPolicy", "PreemptLowerPriority")
        if "priority" in spec and spec["priority"] != value:
            raise ApiError.forbidden(self.resource, name, f"the integer value of priority ({spec['priority']}) must "
                                     "not be provided in pod spec; priority admission controller computed "
                                     f"{value} from the given PriorityClass name")
        spec["priority"] = value
        spec.setdefault("preemptionPolicy", policy)
        # DefaultTolerationSeconds (file 06)
        tolerations = spec.setdefault("tolerations", [])
        for key in _DEFAULT_TOLERATIONS:
            if not any((t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"))
                       and t.get("effect") in ("NoExecute", None, "") for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": 300})

    def prepare_create(self, obj: dict[str, Any], api: Objects) -> None:
        constraints.merge_label_keys(obj)
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}

    def prepare_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> dict[str, Any]:
        if subresource == "resize":
            return _resized(old, new)
        if subresource == "status":
            decode_quantities(new)
        new = super().prepare_update(old, new, subresource)
        if subresource == "status":
            status = new.get("status") or {}
            for cond in status.get("conditions") or []:
                cond.setdefault("lastProbeTime", None)
                cond.setdefault("lastTransitionTime", None)
            status.setdefault("phase", old.get("status", {}).get("phase", "Pending"))
            for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
                for cs in status.get(key) or []:  # what Go prints for a status's zero values
                    for field, zero in (("state", {}), ("lastState", {}), ("ready", False), ("restartCount", 0),
                                        ("image", ""), ("imageID", "")):
                        cs.setdefault(field, zero)
            if "qosClass" in (old.get("status") or {}):
                status.setdefault("qosClass", old["status"]["qosClass"])
            new["metadata"]["ownerReferences"] = old["metadata"].get("ownerReferences")
            if new["metadata"]["ownerReferences"] is None:
                new["metadata"].pop("ownerReferences")
        else:
            decode_quantities(new)
        return new

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        if subresource == "status":
            return []
        if subresource == "resize":
            return _resize_causes(old, new)
        before, after = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
        for spec in (before, after):
            for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
                spec.pop(key, None)
            for list_name in ("containers", "initContainers"):
                for c in spec.get(list_name) or []:
                    c.pop("image", None)
        old_tol, new_tol = before.pop("tolerations", None) or [], after.pop("tolerations", None) or []
        if before != after or any(t not in new_tol for t in old_tol):
            return [("FieldValueForbidden", "spec", _UPDATE_FORBIDDEN)]
        return []

    def bookmark(self, rv: int) -> dict[str, Any]:
        out = super().bookmark(rv)
        out["spec"] = {"containers": None}
        out["status"] = {}
        return out


# -- the resize subresource (Kubernetes 1.33 on: in-place pod resize, KEP-1287) -------------------

_RESIZABLE = ("cpu", "memory")


def _resizable(spec: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """The containers a resize may change: the containers and the native sidecars."""
    return [(name, i, c) for name, i, c in _containers(spec)
            if name == "containers" or (name == "initContainers" and c.get("restartPolicy") == "Always")]


def _resized(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What a write through ``pods/NAME/resize`` stores (as a real server's resize strategy): the
    stored pod with only its containers' resources taken from the body (anything else in it,
    metadata too, is dropped); ``metadata.generation`` grows when they changed (a pod without one counts as
    generation 1)."""
    decode_quantities(new)
    out = copy.deepcopy(old)
    changed = False
    by_place = {(name, c.get("name")): c for name, _, c in _containers(new.get("spec") or {})}
    for name, _, c in _containers(out.get("spec") or {}):
        wanted = by_place.get((name, c.get("name")))
        if wanted is not None and (wanted.get("resources") or {}) != (c.get("resources") or {}):
            c["resources"] = copy.deepcopy(wanted.get("resources") or {})
            changed = True
    out["metadata"] = {**out["metadata"], "managedFields": new["metadata"].get("managedFields")}  # metadata as stored
    if out["metadata"]["managedFields"] is None:
        out["metadata"].pop("managedFields")
    if changed:
        out["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
    return out


def _resize_causes(old: dict[str, Any], new: dict[str, Any]) -> Causes:
    """A real server's refusals of a resize: a terminal pod, anything but the cpu and memory of
    containers and native sidecars changed, a QoS class that would change."""
    resizable = {(name, c.get("name")) for name, _, c in _resizable(old.get("spec") or {})}
    before = {(name, c.get("name")): c.get("resources") or {} for name, _, c in _containers(old.get("spec") or {})}
    causes: Causes = []
    for name, i, c in _containers(new.get("spec") or {}):
        place, resources = (name, c.get("name")), c.get("resources") or {}
        if resources == before.get(place, resources):
            continue
        if (old.get("status") or {}).get("phase") in TERMINAL:
            return [("FieldValueForbidden", "spec", "Forbidden: pod resize is not allowed for a terminated pod")]
        if place not in resizable:
            causes.append(("FieldValueForbidden", f"spec.{name}[{i}].resources",
                           "Forbidden: only the resources of containers and restartable init containers may be resized"))
            continue
        for section in ("requests", "limits"):
            was, now = before[place].get(section) or {}, resources.get(section) or {}
            for key in sorted(set(was) | set(now)):
                if key not in _RESIZABLE and was.get(key) != now.get(key):
                    causes.append(("FieldValueForbidden", f"spec.{name}[{i}].resources.{section}[{key}]",
                                   "Forbidden: only cpu and memory resources are mutable"))
    if not causes and qos_class(new.get("spec") or {}) != qos_class(old.get("spec") or {}):
        causes.append(("FieldValueForbidden", "spec", "Forbidden: Pod QOS Class may not change as a result of resizing"))
    return causes
