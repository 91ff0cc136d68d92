"""What the double knows about each resource: names for discovery, selectable fields, and the
strategy hooks (defaulting, validation, admission, status-subresource rules) a write goes through.

A :class:`Kind` is the generic strategy; the subclasses below change only what their resource
does differently on a real v1.24 server (file numbers are the recordings in ``k8s-wire``).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import difflib
import json
import re
from typing import Any, Callable, Protocol

from k8s_shim.fake.errors import ApiError, Resource

__all__ = ["Kind", "Objects", "plain_kind", "dns_subdomain_causes", "dns_label_causes", "check_base64", "Causes"]

Causes = list[tuple[str, str, str]]  # (reason, field, message)


class Objects(Protocol):
    """What a kind's hooks may read of the objects the server holds (``api.Api`` is one)."""

    def lookup(self, group_version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def default_priority_class(self) -> dict[str, Any] | None: ...

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def dns_subdomain_causes(name: str, field: str = "metadata.name") -> Causes:
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        return [("FieldValueInvalid", field, f'Invalid value: "{name}": {_SUBDOMAIN_MSG}')]
    return []


def dns_label_causes(name: str, field: str = "metadata.name") -> Causes:
    if len(name) > 63 or not _LABEL.match(name):
        return [("FieldValueInvalid", field, f'Invalid value: "{name}": {_LABEL_MSG}')]
    return []


def _metadata_fields(obj: dict[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    return {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "")}


class Kind:
    """The generic strategy: objects stored as posted, validated only by name."""

    plural = ""
    kind = ""
    group = ""
    version = "v1"
    namespaced = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: dict[str, tuple[str, ...]] = {}
    storage_hash = ""
    has_status = False  # spec/status split: main writes keep status, status writes keep spec
    has_generation = False  # metadata.generation starts at 1 and grows when anything but status/metadata changes
    returns_object_on_delete = False  # DELETE answers the object rather than a Status
    deleted_at_once = False  # with returns_object_on_delete: no finalizer, one write (no deletionTimestamp)
    extra_fields: tuple[str, ...] = ()  # field selectors besides metadata.name/namespace
    grace_on_delete = True  # a DELETE that waits records deletionGracePeriodSeconds
    unconditional_update = True  # a PUT without metadata.resourceVersion overwrites (False: 422)
    view_of: str | None = None  # another version of a resource stored elsewhere (events.k8s.io/v1)
    to_view: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # stored form -> this version
    to_storage: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # this version -> stored form
    name_check: Callable[[str, str], Causes] = staticmethod(dns_subdomain_causes)
    singular = ""  # discovery's singularName (1.36 fills it for its newer groups; v1.24 left it empty)
    invalid_group = ""  # the group a 422 names ("Kind.group"), as 1.36 does for storage.k8s.io and resource.k8s.io

    def __init__(self) -> None:
        self.resource = Resource(self.plural, self.group)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    def prefix(self) -> bytes:
        """The bytes that start the object's JSON when kind and apiVersion are included."""
        return b'{"kind":"%s","apiVersion":"%s",' % (self.kind.encode(), self.api_version.encode())

    def supports_field(self, field: str) -> bool:
        return field in ("metadata.name", "metadata.namespace") or field in self.extra_fields

    def translate_field(self, field: str) -> str:
        """The stored form's name for a field selector of this version (identity but for views)."""
        return field

    top_level: tuple[str, ...] = ()  # the object's top-level fields, for strict decoding (empty: not checked)

    def top_level_fields(self) -> set[str]:
        return {"apiVersion", "kind", "metadata", *self.top_level} if self.top_level else set()

    def fields(self, obj: dict[str, Any]) -> dict[str, str]:
        return _metadata_fields(obj)

    # -- strategy hooks ---------------------------------------------------------------------

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        """Fill the defaults a create gets (decode-time defaulting)."""

    def admit_create(self, obj: dict[str, Any], api: Objects) -> None:
        """Admission plugins on create (after validation's 422s come 403s from admission)."""

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        meta = obj["metadata"]
        return self.name_check(meta.get("name", ""), "metadata.name") if old is None else []

    def prepare_create(self, obj: dict[str, Any], api: Objects) -> None:
        """What a create resets (e.g. a pod's status)."""

    def prepare_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> dict[str, Any]:
        """The object to store for an update of ``subresource`` ("" or "status")."""
        if self.has_status:
            if subresource == "status":
                merged = dict(old)
                merged["status"] = new.get("status") or {}
                meta = dict(old["metadata"])
                for key in ("labels", "annotations"):  # v1.24 applies these even through /status
                    if key in new["metadata"]:
                        meta[key] = new["metadata"][key]
                    else:
                        meta.pop(key, None)
                merged["metadata"] = meta
                return merged
            new["status"] = old.get("status", {})
            if "status" not in old:
                new.pop("status", None)
        return new

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        return []

    def after_delete_request(self, obj: dict[str, Any]) -> None:
        """What a DELETE changes besides deletionTimestamp (a namespace turns Terminating)."""

    def bookmark(self, rv: int) -> dict[str, Any]:
        return {"kind": self.kind, "apiVersion": self.api_version,
                "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}}

    def describe(self) -> dict[str, Any]:
        """This resource's entry in an APIResourceList."""
        out: dict[str, Any] = {"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                               "kind": self.kind, "verbs": list(self.verbs)}
        if self.short_names:
            out["shortNames"] = list(self.short_names)
        if self.categories:
            out["categories"] = list(self.categories)
        if self.storage_hash:
            out["storageVersionHash"] = self.storage_hash
        return out


class Namespaces(Kind):
    top_level = ("spec", "status")
    plural, kind, namespaced, short_names = "namespaces", "Namespace", False, ("ns",)
    verbs = ("create", "delete", "get", "list", "patch", "update", "watch")
    subresources = {"finalize": ("update",), "status": ("get", "patch", "update")}
    storage_hash = "Q3oi5N2YM8M="
    has_status = True
    returns_object_on_delete = True
    grace_on_delete = False  # a namespace's DELETE sets deletionTimestamp only (file 05)
    extra_fields = ("status.phase",)
    name_check = staticmethod(dns_label_causes)

    def fields(self, obj: dict[str, Any]) -> dict[str, str]:
        return {"metadata.name": obj["metadata"]["name"], "status.phase": (obj.get("status") or {}).get("phase", "")}

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        meta = obj["metadata"]
        meta["labels"] = dict(meta.get("labels") or {}, **{"kubernetes.io/metadata.name": meta.get("name", "")})
        spec = obj.setdefault("spec", {})
        spec.setdefault("finalizers", ["kubernetes"])

    def prepare_create(self, obj: dict[str, Any], api: Objects) -> None:
        obj["status"] = {"phase": "Active"}

    def prepare_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> dict[str, Any]:
        new = super().prepare_update(old, new, subresource)
        labels = new["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = new["metadata"]["name"]
        if subresource == "":
            new["spec"] = old.get("spec", {})  # finalizers change only through /finalize
        return new

    def after_delete_request(self, obj: dict[str, Any]) -> None:
        obj.setdefault("status", {})["phase"] = "Terminating"


class Nodes(Kind):
    top_level = ("spec", "status")
    plural, kind, namespaced, short_names = "nodes", "Node", False, ("no",)
    subresources = {"status": ("get", "patch", "update"), "proxy": ("create", "delete", "get", "patch", "update")}
    storage_hash = "XwShjMxG9Fs="
    has_status = True
    extra_fields = ("spec.unschedulable",)

    def fields(self, obj: dict[str, Any]) -> dict[str, str]:
        spec = obj.get("spec") or {}
        return {"metadata.name": obj["metadata"]["name"],
                "spec.unschedulable": "true" if spec.get("unschedulable") else "false"}

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        obj.setdefault("spec", {})
        status = obj.setdefault("status", {})
        status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 0}})
        info = status.setdefault("nodeInfo", {})
        for key in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                    "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture"):
            info.setdefault(key, "")
        for cond in status.get("conditions") or []:
            cond.setdefault("lastHeartbeatTime", None)
            cond.setdefault("lastTransitionTime", None)
        if status.get("capacity") and "allocatable" not in status:
            status["allocatable"] = dict(status["capacity"])

    def admit_create(self, obj: dict[str, Any], api: Objects) -> None:
        # TaintNodesByCondition: every new node starts not-ready for scheduling (file 02)
        taints = obj["spec"].setdefault("taints", [])
        if not any(t.get("key") == "node.kubernetes.io/not-ready" and t.get("effect") == "NoSchedule" for t in taints):
            taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})

    def prepare_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> dict[str, Any]:
        new = super().prepare_update(old, new, subresource)
        spec = new.get("spec") or {}
        if spec.get("unschedulable") is False:
            spec.pop("unschedulable")  # omitempty: false is not stored (file 03)
        for cond in (new.get("status") or {}).get("conditions") or []:
            cond.setdefault("lastHeartbeatTime", None)
            cond.setdefault("lastTransitionTime", None)
        return new

    def bookmark(self, rv: int) -> dict[str, Any]:
        out = super().bookmark(rv)
        out["spec"] = {}
        out["status"] = {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "nodeInfo": {
            k: "" for k in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage",
                            "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion", "operatingSystem",
                            "architecture")}}
        return out


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


class ConfigMaps(Kind):
    top_level = ("data", "binaryData", "immutable")
    plural, kind, short_names = "configmaps", "ConfigMap", ("cm",)
    storage_hash = "qFsyl6wFWjQ="

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        data = obj.get("data") or {}
        binary = obj.get("binaryData") or {}
        for section, values in (("data", data), ("binaryData", binary)):
            for key in values:
                if len(key) > 253 or not _CONFIG_KEY.match(key):
                    causes.append(("FieldValueInvalid", f"{section}[{key}]",
                                   f'Invalid value: "{key}": a valid config key must consist of alphanumeric '
                                   "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', "
                                   "regex used for validation is '[-._a-zA-Z0-9]+')"))
        for key in data:
            if key in binary:
                causes.append(("FieldValueInvalid", f"data[{key}]",
                               f'Invalid value: "{key}": duplicate of key present in binaryData'))
        return causes


def check_base64(obj: dict[str, Any]) -> str | None:
    """The first binaryData key whose value is not base64 (a decode error on a real server)."""
    for key, value in (obj.get("binaryData") or {}).items():
        try:
            if not isinstance(value, str):
                return key
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return key
    return None


class PriorityClasses(Kind):
    top_level = ("value", "globalDefault", "description", "preemptionPolicy")
    plural, kind, group, short_names = "priorityclasses", "PriorityClass", "scheduling.k8s.io", ("pc",)
    namespaced = False
    storage_hash = "1QwjyaZjj3Y="
    has_generation = True
    SYSTEM = {"system-cluster-critical": (2000000000, "Used for system critical pods that must run in the "
                                          "cluster, but can be moved to another node if necessary."),
              "system-node-critical": (2000001000, "Used for system critical pods that must not be moved from "
                                       "their current node.")}

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        if obj.get("globalDefault") is False:
            obj.pop("globalDefault")

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        value = obj.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            causes.append(("FieldValueRequired", "value", "Required value"))
        elif value > 1000000000 and obj["metadata"].get("name") not in self.SYSTEM:
            causes.append(("FieldValueForbidden", "value",
                           "Forbidden: maximum allowed value of a user defined priority is 1000000000"))
        if obj.get("preemptionPolicy") not in ("PreemptLowerPriority", "Never"):
            causes.append(("FieldValueNotSupported", "preemptionPolicy",
                           f'Unsupported value: "{obj.get("preemptionPolicy")}": supported values: '
                           '"Never", "PreemptLowerPriority"'))
        if old is not None:
            for key in ("value", "preemptionPolicy"):
                if obj.get(key) != old.get(key):
                    causes.append(("FieldValueForbidden", key, "Forbidden: may not be changed in an update."))
        return causes


_MICRO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\.(\d{6})(Z|[+-]\d{2}:\d{2})$")
_LEASE_FIELDS = {"holderIdentity": str, "leaseDurationSeconds": int, "acquireTime": str, "renewTime": str,
                 "leaseTransitions": int, "strategy": str, "preferredHolder": str}
_GO_TYPES = {str: "string", int: "int32"}
_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "bool", list: "array", dict: "object"}


class Leases(Kind):
    """coordination.k8s.io/v1: what leader election reads and writes. Writes are optimistic
    updates (a stale ``resourceVersion`` is a 409, none at all a 422); the spec is typed as a real
    server's decoder types it (a string where a number goes is a 400), its times are MicroTimes
    (six fractional digits, stored in UTC) and it is validated as ``ValidateLeaseSpec`` does."""

    top_level = ("spec",)
    plural, kind, group = "leases", "Lease", "coordination.k8s.io"
    storage_hash = "gqkMMb/YqFM="
    unconditional_update = False  # every update names the version it read
    STRATEGIES = ("OldestEmulationVersion",)

    def to_storage(self, obj: dict[str, Any]) -> dict[str, Any]:
        spec = obj.get("spec")
        if spec is None:
            return obj
        if not isinstance(spec, dict):
            raise self._undecodable(f"json: cannot unmarshal {_JSON_TYPES.get(type(spec), 'value')} into Go "
                                    "struct field Lease.spec of type v1.LeaseSpec")
        for key, value in list(spec.items()):
            want = _LEASE_FIELDS.get(key)
            if want is None or value is None:
                if value is None:
                    spec.pop(key)  # null is "not set"
                continue
            if type(value) is not want:
                raise self._undecodable(f"json: cannot unmarshal {_JSON_TYPES.get(type(value), 'value')} into Go "
                                        f"struct field LeaseSpec.spec.{key} of type {_GO_TYPES[want]}")
            if key in ("acquireTime", "renewTime"):
                spec[key] = self._micro_time(value)
        return obj

    def _micro_time(self, text: str) -> str:
        """A MicroTime as a real server stores it: UTC, six fractional digits."""
        m = _MICRO_TIME.match(text)
        if m is None:
            raise self._undecodable(f'parsing time "{text}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse '
                                    f'"{text}" as a MicroTime')
        zone = "+00:00" if m.group(3) == "Z" else m.group(3)
        try:
            when = datetime.datetime.fromisoformat(f"{m.group(1)}.{m.group(2)}{zone}")
        except ValueError:
            raise self._undecodable(f'parsing time "{text}": day or month out of range') from None
        return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def _undecodable(self, why: str) -> Exception:
        return ApiError.bad_request(f'Lease in version "v1" cannot be handled as a Lease: {why}')

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            causes.append(("FieldValueInvalid", "spec.leaseDurationSeconds",
                           f"Invalid value: {duration}: must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and transitions < 0:
            causes.append(("FieldValueInvalid", "spec.leaseTransitions",
                           f"Invalid value: {transitions}: must be greater than or equal to 0"))
        strategy = spec.get("strategy")
        if strategy is not None and strategy not in self.STRATEGIES:
            causes.append(("FieldValueNotSupported", "spec.strategy",
                           f'Unsupported value: "{strategy}": supported values: '
                           + ", ".join(f'"{s}"' for s in self.STRATEGIES)))
        if spec.get("preferredHolder") and not strategy:
            causes.append(("FieldValueForbidden", "spec.preferredHolder",
                           "Forbidden: may only be specified if `strategy` is defined"))
        return causes


class StorageClasses(Kind):
    plural, kind, group, namespaced, short_names = "storageclasses", "StorageClass", "storage.k8s.io", False, ("sc",)
    storage_hash = "K+m6uJwbjGY="
    invalid_group = "storage.k8s.io"

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        if new.get("volumeBindingMode") != old.get("volumeBindingMode"):  # file 10 (v1.36)
            return [("FieldValueInvalid", "volumeBindingMode",
                     f'Invalid value: "{new.get("volumeBindingMode")}": field is immutable')]
        return []

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        if not obj.get("provisioner"):
            causes.append(("FieldValueRequired", "provisioner", "Required value"))
        if obj.get("volumeBindingMode") not in ("Immediate", "WaitForFirstConsumer"):
            causes.append(("FieldValueNotSupported", "volumeBindingMode",
                           f'Unsupported value: "{obj.get("volumeBindingMode")}": supported values: '
                           '"Immediate", "WaitForFirstConsumer"'))
        return causes


class _InUseProtected(Kind):
    """A claim or a volume: created Pending with the StorageObjectInUseProtection admission
    plugin's finalizer (file 43), so its DELETE leaves it Terminating until a controller lets go."""

    top_level = ("spec", "status")
    subresources = {"status": ("get", "patch", "update")}
    has_status = True
    returns_object_on_delete = True
    protection = ""

    def admit_create(self, obj: dict[str, Any], api: Objects) -> None:
        fin = obj["metadata"].setdefault("finalizers", [])
        if self.protection not in fin:
            fin.append(self.protection)

    def prepare_create(self, obj: dict[str, Any], api: Objects) -> None:
        obj["status"] = {"phase": "Pending"}


class PersistentVolumeClaims(_InUseProtected):
    plural, kind, short_names = "persistentvolumeclaims", "PersistentVolumeClaim", ("pvc",)
    storage_hash = "QWTyNDq0dC4="
    protection = "kubernetes.io/pvc-protection"

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        """A claim's spec is immutable but for the binder's volumeName (set once), and, once bound,
        its storage request; the 422 carries a diff of the Go struct, as 1.36 prints it (file 02)."""
        if subresource == "status":
            return []
        before, after = dict(old.get("spec") or {}), dict(new.get("spec") or {})
        if not before.get("volumeName"):
            before["volumeName"] = after.get("volumeName")
        if (old.get("status") or {}).get("phase") == "Bound":
            requests = dict((after.get("resources") or {}).get("requests") or {})
            if "storage" in requests:
                requests["storage"] = ((before.get("resources") or {}).get("requests") or {}).get("storage")
                after["resources"] = {**(after.get("resources") or {}), "requests": requests}
        before.pop("volumeAttributesClassName", None)
        after.pop("volumeAttributesClassName", None)
        old_text, new_text = _go_claim_spec(before), _go_claim_spec(after)
        if old_text == new_text:
            return []
        hunks = list(difflib.unified_diff(old_text.split("\n"), new_text.split("\n"), lineterm="", n=3))[2:]
        return [("FieldValueForbidden", "spec", "Forbidden: spec is immutable after creation except resources.requests "
                 "and volumeAttributesClassName for bound claims\n" + "\n".join(hunks) + "\n")]


def _go_claim_spec(spec: dict[str, Any]) -> str:
    """A claim's spec as Go's json.MarshalIndent prints the internal struct (one-space indent)."""
    def go_keys(value: Any, names: dict[str, str]) -> Any:
        if not isinstance(value, dict):
            return value
        return {names.get(k, k[:1].upper() + k[1:]): v for k, v in value.items()}
    resources = spec.get("resources") or {}
    selector = spec.get("selector")
    if selector is not None:
        selector = {"MatchLabels": selector.get("matchLabels"),
                    "MatchExpressions": [go_keys(e, {}) for e in selector["matchExpressions"]]
                    if selector.get("matchExpressions") is not None else None}
    ref = spec.get("dataSourceRef")
    go = {"AccessModes": spec.get("accessModes"), "Selector": selector,
          "Resources": {"Limits": resources.get("limits"), "Requests": resources.get("requests")},
          "VolumeName": spec.get("volumeName") or "", "StorageClassName": spec.get("storageClassName"),
          "VolumeMode": spec.get("volumeMode"), "DataSource": go_keys(spec.get("dataSource"), {"apiGroup": "APIGroup"}),
          "DataSourceRef": go_keys(ref, {"apiGroup": "APIGroup"}),
          "VolumeAttributesClassName": spec.get("volumeAttributesClassName")}
    return json.dumps(go, indent=1, sort_keys=False)


class PersistentVolumes(_InUseProtected):
    plural, kind, namespaced, short_names = "persistentvolumes", "PersistentVolume", False, ("pv",)
    storage_hash = "HN/zwEC+JgM="
    protection = "kubernetes.io/pv-protection"

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        before = (old.get("spec") or {}).get("nodeAffinity")
        after = (new.get("spec") or {}).get("nodeAffinity")
        if subresource != "status" and before is not None and after != before:  # file 11 (v1.36)
            return [("FieldValueInvalid", "nodeAffinity", f"Invalid value: {go_node_affinity(after)}: field is "
                     "immutable, except for updating from beta label to GA")]
        return []


def go_node_affinity(affinity: dict[str, Any] | None) -> str:
    """A volume node affinity as the API server prints the Go struct in its 422 message."""
    if affinity is None:
        return "null"

    def exprs(items: Any) -> Any:
        if items is None:
            return None
        return [{"Key": e.get("key", ""), "Operator": e.get("operator", ""), "Values": e.get("values")} for e in items]
    required = affinity.get("required")
    go = {"Required": None if required is None else {"NodeSelectorTerms": [
        {"MatchExpressions": exprs(t.get("matchExpressions")), "MatchFields": exprs(t.get("matchFields"))}
        for t in required.get("nodeSelectorTerms") or []]}}
    return json.dumps(go, separators=(",", ":"))


class CSINodes(Kind):
    """Stored as sent (file 13): drivers[].nodeID immutable, allocatable.count >= 0."""
    plural, kind, group, namespaced = "csinodes", "CSINode", "storage.k8s.io", False
    storage_hash = "Pe62DkZtjuo="
    invalid_group = "storage.k8s.io"

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes = super().validate(obj, old, api)
        for i, driver in enumerate((obj.get("spec") or {}).get("drivers") or []):
            count = (driver.get("allocatable") or {}).get("count")
            if isinstance(count, int) and count < 0:
                causes.append(("FieldValueInvalid", f"spec.drivers[{i}].allocatable.count",
                               f"Invalid value: {count}: must be greater than or equal to 0"))
        return causes

    def validate_update(self, old: dict[str, Any], new: dict[str, Any], subresource: str) -> Causes:
        before = {d.get("name"): d for d in (old.get("spec") or {}).get("drivers") or []}
        for driver in (new.get("spec") or {}).get("drivers") or []:
            was = before.get(driver.get("name"))
            if was is not None and was.get("nodeID") != driver.get("nodeID"):
                go = {"Name": driver.get("name"), "NodeID": driver.get("nodeID"),
                      "TopologyKeys": driver.get("topologyKeys"), "Allocatable": None}
                return [("FieldValueInvalid", "spec.drivers",
                         f"Invalid value: {json.dumps(go, separators=(',', ':'))}: field is immutable")]
        return []


def plain_kind(plural: str, kind: str, group: str = "", namespaced: bool = True, short: tuple[str, ...] = (),
           storage_hash: str = "", verbs: tuple[str, ...] = ALL_VERBS, status: bool = False,
           generation: bool = False, categories: tuple[str, ...] = ()) -> type[Kind]:
    """A resource the double stores without behaviour of its own (no controller runs for it)."""
    attrs = {"plural": plural, "kind": kind, "group": group, "namespaced": namespaced, "short_names": short,
             "storage_hash": storage_hash, "verbs": verbs, "has_status": status, "has_generation": generation,
             "categories": categories, "subresources": {"status": ("get", "patch", "update")} if status else {}}
    return type(kind + "Kind", (Kind,), attrs)

