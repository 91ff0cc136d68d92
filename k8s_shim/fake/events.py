"""Events, stored once and served in two versions: core/v1 and events.k8s.io/v1 (files 33, 34).

The stored form is core/v1's. events.k8s.io/v1 renames fields on the way in and out
(note <-> message, regarding <-> involvedObject, reportingController <-> reportingComponent,
deprecated* <-> source/firstTimestamp/lastTimestamp/count). Validation is the server's: a core
event needs only a name and an involvedObject in its namespace, unless it carries an eventTime,
which switches on the events.k8s.io rules.
"""

from __future__ import annotations

import re
from typing import Any

from k8s_shim.fake.kinds import Causes, Kind, Objects

__all__ = ["CoreEvents", "Events", "to_events_v1", "from_events_v1"]

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_NAME_PART = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
              "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")

# events.k8s.io/v1 name -> core/v1 name
_RENAMES = {"note": "message", "regarding": "involvedObject", "reportingController": "reportingComponent",
            "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
            "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}
_CORE_ORDER = ("metadata", "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp",
               "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
               "reportingInstance")
_V1_ORDER = ("metadata", "eventTime", "series", "reportingController", "reportingInstance", "action", "reason",
             "regarding", "related", "note", "type", "deprecatedSource", "deprecatedFirstTimestamp",
             "deprecatedLastTimestamp", "deprecatedCount")


def _normalise_core(obj: dict[str, Any]) -> dict[str, Any]:
    """The core/v1 form with the server's null/empty defaults, in the server's key order."""
    obj.setdefault("source", {})
    obj.setdefault("firstTimestamp", None)
    obj.setdefault("lastTimestamp", None)
    obj.setdefault("eventTime", None)
    obj.setdefault("reportingComponent", "")
    obj.setdefault("reportingInstance", "")
    if not obj.get("count"):
        obj.pop("count", None)
    for key in ("reason", "message", "type", "action"):
        if obj.get(key) == "":
            obj.pop(key)
    ordered = {k: obj[k] for k in _CORE_ORDER if k in obj}
    ordered.update((k, v) for k, v in obj.items() if k not in ordered and k not in ("kind", "apiVersion"))
    return ordered


def from_events_v1(obj: dict[str, Any]) -> dict[str, Any]:
    out = {_RENAMES.get(k, k): v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    return out


def to_events_v1(obj: dict[str, Any]) -> dict[str, Any]:
    back = {v: k for k, v in _RENAMES.items()}
    renamed = {back.get(k, k): v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    renamed.setdefault("deprecatedSource", {})
    renamed.setdefault("deprecatedFirstTimestamp", None)
    renamed.setdefault("deprecatedLastTimestamp", None)
    renamed.setdefault("eventTime", None)
    for key in ("reportingController", "reportingInstance", "note", "action", "reason", "type"):
        if renamed.get(key) == "":
            renamed.pop(key)
    out = {k: renamed[k] for k in _V1_ORDER if k in renamed}
    out.update((k, v) for k, v in renamed.items() if k not in out)
    return out


class CoreEvents(Kind):
    plural, kind, short_names = "events", "Event", ("ev",)
    storage_hash = "r2yiGXH7wu8="
    extra_fields = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")

    def name_check(self, name: str, field: str) -> Causes:  # type: ignore[override]
        return []  # event names are not DNS names (pod.hash)

    def fields(self, obj: dict[str, Any]) -> dict[str, str]:
        meta = obj["metadata"]
        inv = obj.get("involvedObject") or {}
        out = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
               "reason": obj.get("reason", ""), "reportingComponent": obj.get("reportingComponent", ""),
               "source": (obj.get("source") or {}).get("component", ""), "type": obj.get("type", "")}
        for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
            out[f"involvedObject.{key}"] = inv.get(key, "")
        return out

    def default(self, obj: dict[str, Any], api: Objects) -> None:
        obj.update(_normalise_core(obj))

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes: Causes = []
        namespace = obj["metadata"].get("namespace", "")
        inv = obj.get("involvedObject") or {}
        strict = obj.get("eventTime") is not None
        if not strict and inv.get("namespace", "") != namespace and inv.get("kind") not in ("Node", "Namespace"):
            causes.append(("FieldValueInvalid", "involvedObject.namespace",
                           f'Invalid value: "{inv.get("namespace", "")}": does not match event.namespace'))
        if strict:
            controller = obj.get("reportingComponent", "")
            if not controller:
                causes += [("FieldValueRequired", "reportingController", "Required value"),
                           ("FieldValueInvalid", "reportingController",
                            'Invalid value: "": name part must be non-empty'),
                           ("FieldValueInvalid", "reportingController", f'Invalid value: "": {_NAME_PART}')]
            elif not _QUALIFIED_NAME.match(controller.rpartition("/")[2]):
                causes.append(("FieldValueInvalid", "reportingController", f'Invalid value: "{controller}": '
                                                                            f'{_NAME_PART}'))
            if not obj.get("reportingInstance"):
                causes.append(("FieldValueRequired", "reportingInstance", "Required value"))
            if not obj.get("action"):
                causes.append(("FieldValueRequired", "action", "Required value"))
            if not obj.get("reason"):
                causes.append(("FieldValueRequired", "reason", "Required value"))
            if obj.get("type") not in ("Normal", "Warning"):
                causes.append(("FieldValueInvalid", "type", f'Invalid value: "": has invalid value: '
                                                            f'{obj.get("type", "")}'))
            if len(obj.get("message") or "") > 1024:
                causes.append(("FieldValueInvalid", "message", 'Invalid value: "": can have at most 1024 characters'))
        return causes


class Events(CoreEvents):
    """events.k8s.io/v1: a view of the core events (same storage, same resourceVersions)."""

    group = "events.k8s.io"
    short_names = ("ev",)
    view_of = "events"  # the bucket it reads and writes
    extra_fields = ("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                    "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason",
                    "reportingController", "type")

    def translate_field(self, field: str) -> str:
        if field.startswith("regarding."):
            return "involvedObject." + field.split(".", 1)[1]
        return {"reportingController": "reportingComponent"}.get(field, field)

    def to_storage(self, obj: dict[str, Any]) -> dict[str, Any]:
        return from_events_v1(obj)

    def to_view(self, obj: dict[str, Any]) -> dict[str, Any]:
        return to_events_v1(obj)

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None, api: Objects) -> Causes:
        causes: Causes = []
        if obj.get("eventTime") is None:
            causes.append(("FieldValueRequired", "eventTime", "Required value"))
        inv = obj.get("involvedObject")
        if not inv:
            causes.append(("FieldValueInvalid", "involvedObject.namespace",
                           'Invalid value: "": does not match event.namespace'))
            return causes
        if obj.get("eventTime") is None:
            return causes
        return super().validate(obj, old, api)
