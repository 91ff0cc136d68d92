"""The API server's operations on plain JSON objects, shared by the HTTP front and the in-process
controllers (fake kubelet, garbage collector), so both go through the same rules.

Each write runs the resource's strategy (:mod:`kinds`): defaulting, validation (422),
admission (403), status-subresource rules, then the store at the next resourceVersion.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import orjson

from k8s_shim.fake.catalog import all_kinds
from k8s_shim.fake.errors import ApiError, Resource, success_status
from k8s_shim.fake.kinds import Kind, check_base64
from k8s_shim.fake.patch import MERGE_KEYS, PatchError, json_patch, merge_patch, strategic_merge_patch
from k8s_shim.fake.pods import Pods, grace_period
from k8s_shim.fake.selectors import FieldSelector, LabelSelector
from k8s_shim.fake.store import Entry, Filter, Store

__all__ = ["Api", "ListResult", "DeleteOptions", "format_time", "NAME_SUFFIX_CHARS"]

NAME_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what apimachinery's generateName draws from
PATCH_TYPES = {"application/merge-patch+json": "merge", "application/strategic-merge-patch+json": "strategic",
               "application/json-patch+json": "json", "application/apply-patch+yaml": "apply"}


@lru_cache(maxsize=256)  # one string per second of the clock
def _format_second(second: int) -> str:
    return dt.datetime.fromtimestamp(second, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time(t: float) -> str:
    return _format_second(int(t))


def parse_time(text: str) -> float:
    return dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()


@dataclass(slots=True)
class ListResult:
    entries: list[Entry]
    rv: int
    continue_token: str | None
    remaining: int | None


@dataclass(slots=True)
class DeleteOptions:
    grace_period: int | None = None
    propagation: str | None = None
    uid: str | None = None
    resource_version: str | None = None


def _uuid4(bits: int) -> str:
    """``str(uuid.UUID(int=bits, version=4))``, without the UUID object."""
    bits = (bits & ~(0xc000 << 48)) | (0x8000 << 48)  # the RFC 4122 variant
    bits = (bits & ~(0xf000 << 64)) | (4 << 76)  # version 4
    h = "%032x" % bits
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _token(rv: int, start: str) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_token(token: str) -> tuple[int, str]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        rv, start = int(data["rv"]), str(data["start"])
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError, UnicodeDecodeError):
        raise ApiError.bad_request("invalid continue token: continue key is not valid: invalid character "
                                   "looking for beginning of value") from None
    return rv, start.rstrip("\x00")


def _fields_v1(value: Any, field: str = "", depth: int = 4) -> Any:
    """A managedFields fieldsV1 tree for ``value`` (maps by key, merge-key lists by their key),
    ``depth`` levels deep: enough to say which fields a manager set, cheap on a hot path."""
    if depth <= 0:
        return {}
    below = depth - 1
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():  # leaves (most values) without a call
            out["f:" + k] = _fields_v1(v, k, below) if below > 0 and (
                isinstance(v, dict) or (isinstance(v, list) and k in MERGE_KEYS)) else {}
        return {".": {}, **out} if out and field else out
    if isinstance(value, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        out = {}
        for item in value:
            if isinstance(item, dict) and key in item:
                ident = {key: item[key]}
                if field == "ports":
                    ident["protocol"] = item.get("protocol", "TCP")
                out["k:" + orjson.dumps(ident).decode()] = {".": {}, **_fields_v1(item, "", below)}
        return out
    return {}


class Api:
    """The operations of one fake API server over one :class:`Store`."""

    def __init__(self, store: Store | None = None, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, runtime_config: frozenset[str] = frozenset()):
        self.store = store or Store()
        self.clock = clock
        self.rng = rng or random.Random()
        self.kinds = all_kinds(runtime_config)
        self.by_path = {(k.group_version, k.plural): k for k in self.kinds}
        for k in self.kinds:
            self.store.bucket(self.bucket_name(k), k.fields)
        self.default_priority: str | None = None
        # pods/binding requests per pod (namespace/name): how often it was asked to be bound, and
        # bound; a scheduler that binds a pod twice shows as more than one request
        self.bind_requests: dict[str, dict[str, int]] = {}

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def bucket_name(kind: Kind) -> str:
        view = kind.view_of
        return view or (f"{kind.group}/{kind.plural}" if kind.group else kind.plural)

    def kind(self, group_version: str, plural: str) -> Kind:
        return self.by_path[(group_version, plural)]

    @staticmethod
    def key(kind: Kind, namespace: str, name: str) -> str:
        return f"{namespace}/{name}" if kind.namespaced else name

    def now(self) -> str:
        return format_time(self.clock())

    def entry(self, kind: Kind, namespace: str, name: str) -> Entry:
        entry = self.store.get(self.bucket_name(kind), self.key(kind, namespace, name))
        if entry is None:
            raise ApiError.not_found(kind.resource, name)
        return entry

    def lookup(self, group_version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        kind = self.kind(group_version, plural)
        entry = self.store.get(self.bucket_name(kind), self.key(kind, namespace, name))
        return None if entry is None else entry.decode()

    def default_priority_class(self) -> dict[str, Any] | None:
        for entry in self.store.entries("scheduling.k8s.io/priorityclasses"):
            if b'"globalDefault"' not in entry.raw:
                continue  # most classes: not the default, and not decoded to say so
            obj = entry.decode()
            if obj.get("globalDefault"):
                return obj
        return None

    def view(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        to_view = kind.to_view
        return to_view(obj) if to_view else obj

    def view_raw(self, kind: Kind, raw: bytes) -> bytes:
        to_view = kind.to_view
        return orjson.dumps(to_view(orjson.loads(raw))) if to_view else raw

    def full(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as a GET answers it: kind and apiVersion first."""
        return {"kind": kind.kind, "apiVersion": kind.api_version, **self.view(kind, obj)}

    def _write(self, kind: Kind, obj: dict[str, Any], *, delete: bool = False) -> Entry:
        meta = obj["metadata"]
        key = self.key(kind, meta.get("namespace", ""), meta["name"])
        return self.store.write(self.bucket_name(kind), key, obj, delete=delete)

    @staticmethod
    def _fields_set(body: Any, subresource: str = "") -> dict[str, Any]:
        """The fieldsV1 of what a request's body sets (its managedFields entry)."""
        fields = _fields_v1({k: v for k, v in body.items() if k not in ("kind", "apiVersion", "metadata", "status")
                             or (k == "status" and subresource == "status")}) if isinstance(body, dict) else {}
        bmeta = body.get("metadata") if isinstance(body, dict) else None
        if isinstance(bmeta, dict):
            picked = {k: v for k, v in bmeta.items() if k in ("labels", "annotations", "ownerReferences",
                                                               "finalizers", "generateName")}
            if picked:
                fields = {"f:metadata": _fields_v1(picked), **fields}
        return fields

    def _managed(self, meta: dict[str, Any], manager: str, kind: Kind, body: Any, subresource: str = "",
                 fields: dict[str, Any] | None = None) -> None:
        if fields is None:
            fields = self._fields_set(body, subresource)
        entry: dict[str, Any] = {"manager": manager, "operation": "Update", "apiVersion": kind.api_version,
                                 "time": self.now(), "fieldsType": "FieldsV1", "fieldsV1": fields}
        if subresource:
            entry["subresource"] = subresource
        managed = [m for m in meta.get("managedFields") or []
                   if not (m.get("manager") == manager and m.get("subresource", "") == subresource)]
        managed.append(entry)
        meta["managedFields"] = managed

    def _check_namespace(self, kind: Kind, namespace: str, name: str) -> None:
        if not kind.namespaced:
            return
        ns = self.store.get("namespaces", namespace)
        if ns is None:
            raise ApiError.not_found(Resource("namespaces"), namespace)
        if ns.fields.get("status.phase") == "Terminating":
            raise ApiError.forbidden(kind.resource, name, f"unable to create new content in namespace {namespace} "
                                     "because it is being terminated",
                                     [{"reason": "NamespaceTerminating",
                                       "message": f"namespace {namespace} is being terminated",
                                       "field": "metadata.namespace"}])

    def _decode_body(self, kind: Kind, body: Any, namespace: str, fresh: bool = False) -> dict[str, Any]:
        """What the server's decoder checks: the kind and apiVersion, the namespace."""
        if not isinstance(body, dict):
            raise ApiError.bad_request(f"the object provided is unrecognized (must be of type {kind.kind}): "
                                       "couldn't get version/kind; json parse error: unexpected end of JSON input")
        body_kind, body_version = body.get("kind"), body.get("apiVersion")
        if body_kind and body_kind != kind.kind:
            raise ApiError.bad_request(f'{body_kind} in version "{body_version or kind.version}" cannot be handled '
                                       f"as a {kind.kind}: converting ({body_version or kind.version}.{body_kind}) "
                                       f"to (core.{kind.kind}): unknown conversion")
        if body_version and body_version != kind.api_version:
            raise ApiError.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                       f'{kind.kind}: no kind "{kind.kind}" is registered for version '
                                       f'"{body_version}" in scheme "k8s.io/kubernetes/pkg/api/legacyscheme/'
                                       'scheme.go:30"')
        obj = {k: v for k, v in body.items() if k not in ("kind", "apiVersion")}
        if not fresh:  # the caller keeps its body: work on a copy
            obj = orjson.loads(orjson.dumps(obj))
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise ApiError.bad_request(f"{kind.kind} in version \"{kind.version}\" cannot be handled as a "
                                       f"{kind.kind}: metadata must be an object")
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError.bad_request("the namespace of the provided object does not match the namespace "
                                           "sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        to_storage = kind.to_storage
        if to_storage:
            obj = to_storage(obj)
        if check_base64(obj) is not None:
            raise ApiError.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                       f"{kind.kind}: illegal base64 data")
        return obj

    def _invalid(self, kind: Kind, obj: dict[str, Any], causes: list) -> None:
        if causes:
            raise ApiError.invalid(kind.kind, obj["metadata"].get("name", ""), causes, kind.invalid_group)

    # -- create -----------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str, body: Any, manager: str = "unknown",
               fresh: bool = False) -> dict[str, Any]:
        """``fresh``: the body is the caller's to give away (decoded for this request), so it is
        taken over rather than copied."""
        fields = self._fields_set(body)  # before defaulting can touch a fresh body
        obj = self._decode_body(kind, body, namespace, fresh=fresh)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(self.rng.choice(NAME_SUFFIX_CHARS) for _ in range(5))
        kind.default(obj, self)
        self._invalid(kind, obj, kind.validate(obj, None, self))
        name = meta["name"]
        self._check_namespace(kind, namespace, name)
        kind.admit_create(obj, self)
        if self.store.get(self.bucket_name(kind), self.key(kind, namespace, name)) is not None:
            raise ApiError.already_exists(kind.resource, name)
        kind.prepare_create(obj, self)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(key, None)
        meta["uid"] = _uuid4(self.rng.getrandbits(128))
        meta["creationTimestamp"] = self.now()
        if kind.has_generation:
            meta["generation"] = 1
        self._managed(meta, manager, kind, body, fields=fields)
        meta["resourceVersion"] = ""  # keeps its place; the store fills it in
        obj = {"metadata": _ordered_meta(meta), **{k: v for k, v in obj.items() if k not in ("metadata", "status")},
               **({"status": obj["status"]} if "status" in obj else {})}
        self._write(kind, obj)
        return obj

    # -- read -------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        return self.entry(kind, namespace, name).decode()

    async def list(self, kind: Kind, namespace: str | None, labels: LabelSelector | None,
                   fields: FieldSelector | None, resource_version: str | None, match: str | None,
                   limit: int | None, continue_token: str | None) -> ListResult:
        bucket = self.store.buckets[self.bucket_name(kind)]
        if match and not resource_version:
            raise ApiError.invalid("ListOptions", "", [
                ("FieldValueForbidden", "resourceVersionMatch",
                 "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")], "meta.k8s.io")
        if match == "Exact" and resource_version == "0":
            raise ApiError.invalid("ListOptions", "", [
                ("FieldValueForbidden", "resourceVersionMatch",
                 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"')], "meta.k8s.io")
        if match not in (None, "", "Exact", "NotOlderThan"):
            raise ApiError.invalid("ListOptions", "", [
                ("FieldValueNotSupported", "resourceVersionMatch",
                 f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""')], "meta.k8s.io")
        rv = None
        if resource_version:
            try:
                rv = int(resource_version)
                if rv < 0:
                    raise ValueError
            except ValueError:
                raise ApiError.internal(f'resourceVersion: Invalid value: "{resource_version}": '
                                        f'strconv.ParseUint: parsing "{resource_version}": invalid syntax') from None
        start = ""
        snapshot_rv = None
        if continue_token:
            token_rv, start = _read_token(continue_token)
            if token_rv < bucket.compacted_rv or token_rv > self.store.rv:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent "
                               "list result. You can start a new list without the continue parameter, or use the "
                               "continue token in this response to retrieve the remainder of the results. "
                               "Continuing with the provided token results in an inconsistent list - objects that "
                               "were created, modified, or deleted between the time the first chunk was returned "
                               "and now may show up in the list.", extra_metadata={"continue": _token(-1, start)})
            snapshot_rv = token_rv if token_rv >= 0 else None
        elif rv is not None and rv > 0:
            if rv > self.store.rv and not await self.store.wait_for_rv(rv, 3.0):
                raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {rv}, current: "
                               f"{self.store.rv}", {"causes": [{"reason": "ResourceVersionTooLarge",
                                                                "message": "Too large resource version"}],
                                                    "retryAfterSeconds": 1})
            if match == "Exact":
                if rv < bucket.compacted_rv:
                    raise ApiError.expired("The resourceVersion for the provided list is too old.")
                snapshot_rv = rv
        if rv == 0 and not continue_token:
            limit = None  # served from the watch cache: limit ignored (file 12)
        items = bucket.items if snapshot_rv is None or snapshot_rv == self.store.rv else bucket.snapshot(snapshot_rv)
        if snapshot_rv is not None:
            list_rv = snapshot_rv
        elif rv is not None and not continue_token:
            # served from the watch cache: the newest version this resource has seen (files 14, 42)
            list_rv = max(bucket.last_rv, rv)
        else:
            list_rv = self.store.rv
        keys = sorted(items) if items is not bucket.items else bucket.sorted_keys()
        prefix = f"{namespace}/" if namespace and kind.namespaced else ""
        if prefix:
            import bisect
            lo = bisect.bisect_left(keys, prefix)
            hi = bisect.bisect_left(keys, prefix[:-1] + "0")  # "0" sorts right after "/"
            keys = keys[lo:hi]
        if start:
            import bisect
            keys = keys[bisect.bisect_right(keys, prefix + start):]
        flt = Filter(None, labels if labels and not labels.empty else None,
                     fields if fields and not fields.empty else None)
        out: list[Entry] = []
        token = None
        remaining = None
        selective = flt.labels is not None or flt.fields is not None
        for i, key in enumerate(keys):
            entry = items[key]
            if selective and not flt.matches(entry):
                continue
            if limit and len(out) >= limit:
                last = out[-1].key[len(prefix):]
                token = _token(list_rv, last)
                if not selective:
                    remaining = len(keys) - i
                break
            out.append(entry)
        return ListResult(out, list_rv, token, remaining)

    # -- update and patch -------------------------------------------------------------------

    def update(self, kind: Kind, namespace: str, name: str, body: Any, subresource: str = "",
               manager: str = "unknown") -> dict[str, Any]:
        new = self._decode_body(kind, body, namespace)
        if new["metadata"].get("name") and new["metadata"]["name"] != name:
            raise ApiError.bad_request(f"the name of the object ({new['metadata']['name']}) does not match the "
                                       f"name on the URL ({name})")
        new["metadata"]["name"] = name
        entry = self.entry(kind, namespace, name)
        want_rv = new["metadata"].get("resourceVersion")
        if want_rv and want_rv != str(entry.rv):
            raise ApiError.modified(kind.resource, name)
        if not want_rv and not kind.unconditional_update:  # the registry names the resource, not the Kind
            raise ApiError.invalid(kind.plural, name, [("FieldValueInvalid", "metadata.resourceVersion",
                                                        "Invalid value: 0x0: must be specified for an update")],
                                   group=kind.group)
        return self._store_update(kind, entry.decode(), new, subresource, manager, body)

    def patch(self, kind: Kind, namespace: str, name: str, patch_type: str, patch: Any, subresource: str = "",
              manager: str = "unknown", stored: dict[str, Any] | None = None) -> dict[str, Any]:
        """``stored``: the object as a controller just read it (left unchanged), used when it is
        still the stored version, so that it is not decoded twice."""
        entry = self.entry(kind, namespace, name)
        if stored is not None and stored["metadata"].get("resourceVersion") == str(entry.rv):
            old = stored
        else:
            old = entry.decode()
        current = self.view(kind, old)
        try:
            if patch_type == "merge":
                if not isinstance(patch, dict):
                    raise PatchError("a merge patch must be a JSON object")
                patched = merge_patch(current, patch)
            elif patch_type == "strategic":
                if not isinstance(patch, dict):
                    raise PatchError("a strategic merge patch must be a JSON object")
                patched = strategic_merge_patch(current, patch)
            else:
                patched = json_patch(current, patch)
        except PatchError as exc:
            if exc.test_failed:
                raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                               {}) from None
            raise ApiError(422, "Invalid", str(exc), {}) from None
        if not isinstance(patched, dict):
            raise ApiError.bad_request("the patched object is not a JSON object")
        want_rv = (patched.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != str(entry.rv):
            raise ApiError.modified(kind.resource, name)
        bad = check_base64(patched)
        if bad is not None:
            raise ApiError.invalid(kind.kind, "", [("FieldValueInvalid", "patch",
                                                    f'Invalid value: "{orjson.dumps(patched).decode()}": '
                                                    "illegal base64 data")])
        new = self._decode_body(kind, {"kind": kind.kind, "apiVersion": kind.api_version, **patched}, namespace,
                                fresh=True)
        new["metadata"]["name"] = name
        return self._store_update(kind, old, new, subresource, manager, patch)

    def _store_update(self, kind: Kind, old: dict[str, Any], new: dict[str, Any], subresource: str,
                      manager: str, body: Any) -> dict[str, Any]:
        meta, old_meta = new["metadata"], old["metadata"]
        old_rv = old_meta.get("resourceVersion")  # a merge patch may share old's metadata with new
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                    "managedFields", "namespace", "generateName"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        new = kind.prepare_update(old, new, subresource)
        meta = new["metadata"]
        # a status write keeps the stored spec and metadata name: only its own rules apply
        causes = kind.validate(new, old, self) if subresource != "status" else []
        self._invalid(kind, new, causes + kind.validate_update(old, new, subresource))
        if kind.has_generation and subresource == "" and _spec_of(new) != _spec_of(old):
            meta["generation"] = old_meta.get("generation", 1) + 1
        if (meta.get("finalizers") == []):
            meta.pop("finalizers")
        meta.pop("resourceVersion", None)
        compare = {k: v for k, v in new.items()}
        if _same(compare, old):
            if old_rv is not None:
                old["metadata"]["resourceVersion"] = old_rv
            return old  # a no-op write stores nothing (and sends no watch event)
        self._managed(meta, manager, kind, body if isinstance(body, dict) else {}, subresource)
        meta["resourceVersion"] = ""
        new["metadata"] = _ordered_meta(meta)
        self._write(kind, new)
        self._maybe_finish_deletion(kind, new)
        return new

    def _maybe_finish_deletion(self, kind: Kind, obj: dict[str, Any]) -> bool:
        """Remove an object whose deletion waited only for finalizers that are now gone."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers") or _blocked(kind, obj):
            return False
        if isinstance(kind, Pods) and meta.get("deletionGracePeriodSeconds", 0) > 0:
            return False  # the kubelet finishes it
        self._write(kind, obj, delete=True)
        return True

    # -- delete -----------------------------------------------------------------------------

    def delete(self, kind: Kind, namespace: str, name: str,
               options: DeleteOptions | None = None) -> tuple[dict[str, Any], bool]:
        """Returns (answer body without kind/apiVersion for objects, is_object)."""
        options = options or DeleteOptions()
        entry = self.entry(kind, namespace, name)
        obj = entry.decode()
        meta = obj["metadata"]
        label = "Pod" if isinstance(kind, Pods) else kind.resource.qualified
        if options.uid is not None and options.uid != meta.get("uid"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {label} "{name}": the UID in the '
                           f"precondition ({options.uid}) does not match the UID in record ({meta.get('uid')}). "
                           "The object might have been deleted and then recreated", {"name": name, "kind": kind.kind})
        if options.resource_version is not None and options.resource_version != str(entry.rv):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {label} "{name}": the '
                           f"ResourceVersion in the precondition ({options.resource_version}) does not match the "
                           f"ResourceVersion in record ({entry.rv}). The object might have been modified",
                           {"name": name, "kind": kind.kind})
        is_pod = isinstance(kind, Pods)
        grace = grace_period(obj, options.grace_period) if is_pod else 0
        finalizers = list(meta.get("finalizers") or [])
        if options.propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        elif options.propagation == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if meta.get("deletionTimestamp"):
            current = meta.get("deletionGracePeriodSeconds", 0)
            if is_pod and grace < current:
                deadline = parse_time(meta["deletionTimestamp"]) - current + grace
                meta["deletionTimestamp"] = format_time(deadline)
                meta["deletionGracePeriodSeconds"] = grace
                self._write(kind, obj)
                self._maybe_finish_deletion(kind, obj)
            elif finalizers != list(meta.get("finalizers") or []):
                meta["finalizers"] = finalizers
                self._write(kind, obj)
            return obj, True
        two_step = is_pod or grace > 0 or finalizers or _blocked(kind, obj) or kind.returns_object_on_delete
        if two_step and kind.deleted_at_once and not (is_pod or finalizers or _blocked(kind, obj)):
            return self._write(kind, obj, delete=True).decode(), True  # one write, the object answered
        if not two_step:
            self._write(kind, obj, delete=True)
            return success_status(details={**kind.resource.details(name), "uid": meta.get("uid", "")}), False
        meta["deletionTimestamp"] = format_time(self.clock() + grace)
        if kind.grace_on_delete:
            meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            meta["finalizers"] = finalizers
        kind.after_delete_request(obj)
        obj["metadata"] = _ordered_meta(meta)
        self._write(kind, obj)
        self._maybe_finish_deletion(kind, obj)
        return obj, True

    def remove_finalizer(self, kind: Kind, obj: dict[str, Any], finalizer: str) -> None:
        """What a controller does when its finalizer's work is done (garbage collector)."""
        meta = obj["metadata"]
        left = [f for f in meta.get("finalizers") or [] if f != finalizer]
        if meta.get("deletionTimestamp") and not left and not _blocked(kind, obj) and not (
                isinstance(kind, Pods) and meta.get("deletionGracePeriodSeconds", 0) > 0):
            # the finalizer's removal and the final removal are one step (file 31)
            self._write(kind, obj, delete=True)
            return
        if left:
            meta["finalizers"] = left
        else:
            meta.pop("finalizers", None)
        self._write(kind, obj)

    # -- pods/binding and pods/eviction -----------------------------------------------------

    def bind(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        pods = self.kind("v1", "pods")
        if not isinstance(body, dict):
            raise ApiError.bad_request("the object provided is unrecognized (must be of type Binding)")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise ApiError.bad_request("name in URL does not match name in Binding object")
        counts = self.bind_requests.setdefault(f"{namespace}/{name}", {"requests": 0, "bound": 0})
        counts["requests"] += 1
        target = body.get("target") or {}
        if target.get("kind", "") not in ("", "Node"):
            raise ApiError.internal(f'target.kind: Unsupported value: "{target.get("kind")}": supported values: '
                                    '"Node", "<empty>"')
        if not target.get("name"):
            raise ApiError.internal("target.name: Required value")
        entry = self.entry(pods, namespace, name)
        pod = entry.decode()
        uid = meta.get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": StorageError: invalid '
                           f"object, Code: 4, Key: /registry/pods/{namespace}/{name}, ResourceVersion: 0, "
                           f"AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object "
                           f"meta: {pod['metadata'].get('uid')}", Resource("pods").details(name))
        if pod["metadata"].get("deletionTimestamp"):
            raise ApiError.conflict(Resource("pods"), name, f"pod {name} is being deleted, cannot be assigned to a "
                                    "host", kind="pods/binding")
        node = pod["spec"].get("nodeName")
        if node:
            raise ApiError.conflict(Resource("pods"), name, f'pod {name} is already assigned to node "{node}"',
                                    kind="pods/binding")
        pod["spec"]["nodeName"] = target["name"]
        if meta.get("annotations"):
            pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **meta["annotations"]}
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": self.now()})
        status["conditions"] = conditions
        status_order = {k: status[k] for k in ("phase", "conditions") if k in status}
        status_order.update((k, v) for k, v in status.items() if k not in status_order)
        pod["status"] = status_order
        pod["spec"] = _ordered_spec(pod["spec"])
        self._write(pods, pod)
        counts["bound"] += 1
        return success_status(201)

    def evict(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """policy/v1 Eviction: no PodDisruptionBudget is evaluated; the pod is deleted gracefully."""
        pods = self.kind("v1", "pods")
        options = (body or {}).get("deleteOptions") or {} if isinstance(body, dict) else {}
        self.delete(pods, namespace, name, DeleteOptions(grace_period=options.get("gracePeriodSeconds")))
        return success_status(201)


def _spec_of(obj: dict[str, Any]) -> Any:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _same(new: dict[str, Any], old: dict[str, Any]) -> bool:
    def strip(o: dict[str, Any]) -> dict[str, Any]:
        m = {k: v for k, v in o.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
        return {**o, "metadata": m}
    return strip(new) == strip(old)


def _blocked(kind: Kind, obj: dict[str, Any]) -> bool:
    """A namespace waits for its spec.finalizers (the namespace controller empties it)."""
    return kind.plural == "namespaces" and not kind.group and bool((obj.get("spec") or {}).get("finalizers"))


_META_ORDER = ("name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
               "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
               "finalizers", "managedFields")
_SPEC_ORDER = ("volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
               "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
               "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork",
               "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
               "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName",
               "priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks",
               "preemptionPolicy", "overhead", "topologySpreadConstraints")


def _ordered_meta(meta: dict[str, Any]) -> dict[str, Any]:
    for key in ("labels", "annotations", "ownerReferences", "finalizers"):
        if key in meta and not meta[key]:
            del meta[key]  # Go's omitempty: an empty map or list is not stored
    out = {k: meta[k] for k in _META_ORDER if k in meta}
    out.update((k, v) for k, v in meta.items() if k not in out)
    return out


def _ordered_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: spec[k] for k in _SPEC_ORDER if k in spec}
    out.update((k, v) for k, v in spec.items() if k not in out)
    return out
