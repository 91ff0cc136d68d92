"""The three PATCH flavours a kube-apiserver accepts, applied to plain JSON values.

- JSON merge patch (RFC 7386, ``application/merge-patch+json``): maps merge, ``null`` deletes,
  anything else (lists included) replaces.
- JSON patch (RFC 6902, ``application/json-patch+json``): add/remove/replace/move/copy/test.
- Strategic merge patch (``application/strategic-merge-patch+json``): like a merge patch, but
  lists of objects with a merge key (containers by ``name``, conditions by ``type``, ...) merge
  item by item, ``finalizers`` merge as a set, and the ``$patch``, ``$retainKeys``,
  ``$setElementOrder/…`` and ``$deleteFromPrimitiveList/…`` directives kubectl sends are honoured.
  The merge keys are the ones core/v1 declares; a list without one is replaced, as in Kubernetes.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

__all__ = ["PatchError", "merge_patch", "json_patch", "strategic_merge_patch", "MERGE_KEYS"]


class PatchError(ValueError):
    """A patch that cannot be applied; ``test_failed`` marks a failed JSON-patch test operation."""

    def __init__(self, message: str, test_failed: bool = False):
        super().__init__(message)
        self.test_failed = test_failed


# field name -> merge key of its items (core/v1's patchMergeKey tags)
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "ports": "containerPort", "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "volumes": "name", "imagePullSecrets": "name", "hostAliases": "ip", "conditions": "type",
    "addresses": "type", "ownerReferences": "uid", "podIPs": "ip", "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name", "schedulingGates": "name",
    "reservedFor": "uid", "resourceClaimStatuses": "name",  # resource.k8s.io/v1 claims; pod status (v1.36)
}
# lists of scalars that merge as sets
PRIMITIVE_MERGE = {"finalizers"}


# -- JSON merge patch --------------------------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# -- JSON patch --------------------------------------------------------------------------------

def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"doc is missing path: {path!r}: missing value")
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise PatchError(f"doc is missing path: {path!r}: missing value") from None
        else:
            raise PatchError(f"doc is missing path: {path!r}: missing value")
    return cur, parts[-1]


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for p in _pointer(path):
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError(f"doc is missing path: {path!r}: missing value")
    return cur


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                idx = int(last)
            except ValueError:
                raise PatchError(f"invalid array index {last!r} in {path!r}") from None
            if idx < 0 or idx > len(parent):
                raise PatchError(f"Unable to access invalid index: {idx}")
            parent.insert(idx, value)
    else:
        raise PatchError(f"doc is missing path: {path!r}: missing value")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        try:
            return doc, parent.pop(int(last))
        except (ValueError, IndexError):
            pass
    raise PatchError(f"remove operation does not apply: doc is missing path: {path!r}: missing value")


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("Unexpected kind: <nil>")
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            parts = _pointer(path)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                parent, last = _parent(doc, parts, path)
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op.get("value"))
                else:
                    parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            doc, value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op.get("from", ""))))
        elif kind == "test":
            try:
                have = _get(doc, path)
            except PatchError:
                have = None
            if have != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed", test_failed=True)
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


# -- strategic merge patch ---------------------------------------------------------------------

_DELETE = object()


def _strip(value: Any) -> Any:
    """A patch value with its directives removed (what gets stored when nothing is merged)."""
    return _strip_each(value)


def _strip_each(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_each(v) if isinstance(v, (dict, list)) else v for k, v in value.items()
                if v is not None and not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_each(v) if isinstance(v, (dict, list)) else v for v in value
                if not (isinstance(v, dict) and v.get("$patch") == "replace")]
    return value


def strategic_merge_patch(original: Any, patch: Any) -> Any:
    result = _smp_map(original, patch)
    return {} if result is _DELETE else result


def _smp_map(original: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip(patch)
    if directive == "delete":
        return _DELETE
    if directive is not None:
        raise PatchError(f"Unknown patch type: {directive}")
    result = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(result.get(key), value)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = value
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [x for x in result[field] if x not in value]
                if not result[field]:
                    result.pop(field)
        elif key.startswith("$setElementOrder/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = _ordered(field, result[field], value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _ordered(field: str, items: list, order: list) -> list:
    key = MERGE_KEYS.get(field)

    def ident(x: Any) -> Any:
        return x.get(key) if key and isinstance(x, dict) else x
    wanted = [ident(o) for o in order]
    rank = {w: i for i, w in enumerate(wanted) if isinstance(w, (str, int))}
    listed = sorted((x for x in items if ident(x) in rank), key=lambda x: rank[ident(x)])
    others = [x for x in items if ident(x) not in rank]
    return listed + others


def _hashable(value: Any) -> Any:
    """A merge key's value as a dict key (one that is itself a list or a map: as JSON text)."""
    if type(value) is str:  # noqa: E721 - the usual merge key, at once
        return value
    try:
        hash(value)
        return value
    except TypeError:
        return (_hashable, orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=repr))


def _smp_list(field: str, original: Any, patch: list) -> list:
    original = original if isinstance(original, list) else []
    if field in PRIMITIVE_MERGE:
        out = list(original)
        out += [x for x in patch if x not in out]
        return out
    key = MERGE_KEYS.get(field)
    if not key or not all(isinstance(p, dict) for p in patch):
        return _strip(patch)
    if any(p.get("$patch") == "replace" for p in patch):
        return [_strip(p) for p in patch if p.get("$patch") != "replace"]
    merged = list(original)  # items are replaced, never changed in place
    patched: list[Any] = []
    for item in patch:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        wanted = item[key]
        idx = None
        for i, x in enumerate(merged):
            if isinstance(x, dict) and x.get(key) == wanted:
                idx = i
                break
        if item.get("$patch") == "delete":
            if idx is not None:
                merged.pop(idx)
            continue
        if idx is None:
            merged.append(_strip(item))
        else:
            merged[idx] = _smp_map(merged[idx], item)
        patched.append(wanted)
    # Kubernetes' order: items the patch named and items only the server had, interleaved by their
    # place in the original list; a new item goes before server-only items that follow it.
    server_order: dict[Any, int] = {}  # key -> its first place in the original
    for i, x in enumerate(original):
        if isinstance(x, dict):
            server_order.setdefault(_hashable(x.get(key)), i)
    patch_order: dict[Any, int] = {}
    for i, k in enumerate(patched):
        patch_order.setdefault(_hashable(k), i)
    patch_items = sorted((x for x in merged if _hashable(x.get(key)) in patch_order),
                         key=lambda x: patch_order[_hashable(x.get(key))])
    server_only = [x for x in merged if _hashable(x.get(key)) not in patch_order]
    if not server_only:
        return patch_items
    if not patch_items:
        return server_only
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        else:
            li = server_order.get(_hashable(server_only[i].get(key)), -1)
            ri = server_order.get(_hashable(patch_items[j].get(key)), -1)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out
