"""A small JSON-Schema (draft-07 subset) validator for the compose schema of this folder.

``jsonschema`` is not in the project's virtualenv, so the compose test validates with
this when it is missing (and with ``jsonschema`` too when it is importable). It supports
exactly the keywords ``compose_schema.json`` uses and raises on any other keyword, so the
schema cannot silently rely on something this validator ignores.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_ANNOTATIONS = {"$schema", "$comment", "definitions", "description", "title"}


def validate(instance: Any, schema: dict, root: dict | None = None, path: str = "$") -> list[str]:
    """Every violation of schema by instance, as ``"<json path>: <what is wrong>"`` strings."""
    root = schema if root is None else root
    errors: list[str] = []
    if _MEMBERS & schema.keys():
        errors += _object_members(instance, schema, root, path)
    for key, value in schema.items():
        check = _KEYWORDS.get(key)
        if check is not None:
            errors += check(instance, value, schema, root, path)
        elif key not in _ANNOTATIONS and key not in _MEMBERS:
            raise ValueError(f"{path}: schema keyword {key!r} is not supported by minischema")
    return errors


def _ref(instance, ref, schema, root, path):
    if not ref.startswith("#/"):
        raise ValueError(f"{path}: only local $ref are supported, got {ref!r}")
    target = root
    for part in ref[2:].split("/"):
        target = target[part]
    return validate(instance, target, root, path)


def _type(instance, types, schema, root, path):
    types = [types] if isinstance(types, str) else types
    if any(_TYPES[t](instance) for t in types):
        return []
    return [f"{path}: expected {' or '.join(types)}, got {type(instance).__name__} {instance!r}"]


def _object_members(instance, schema, root, path):
    """properties + patternProperties + additionalProperties, evaluated together as the spec says."""
    if not isinstance(instance, dict):
        return []
    errors = []
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    additional = schema.get("additionalProperties", True)
    for key, value in instance.items():
        sub = f"{path}.{key}"
        matched = False
        if key in props:
            matched = True
            errors += validate(value, props[key], root, sub)
        for pattern, pschema in patterns.items():
            if re.search(pattern, key):
                matched = True
                errors += validate(value, pschema, root, sub)
        if not matched:
            if additional is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(additional, dict):
                errors += validate(value, additional, root, sub)
    return errors


def _required(instance, names, schema, root, path):
    if not isinstance(instance, dict):
        return []
    return [f"{path}: missing required key {n!r}" for n in names if n not in instance]


def _min_properties(instance, n, schema, root, path):
    if isinstance(instance, dict) and len(instance) < n:
        return [f"{path}: needs at least {n} keys"]
    return []


def _items(instance, item_schema, schema, root, path):
    if not isinstance(instance, list):
        return []
    return [e for i, item in enumerate(instance) for e in validate(item, item_schema, root, f"{path}[{i}]")]


def _min_items(instance, n, schema, root, path):
    if isinstance(instance, list) and len(instance) < n:
        return [f"{path}: needs at least {n} items"]
    return []


def _enum(instance, values, schema, root, path):
    return [] if instance in values else [f"{path}: {instance!r} is not one of {values}"]


def _pattern(instance, pattern, schema, root, path):
    if isinstance(instance, str) and not re.search(pattern, instance):
        return [f"{path}: {instance!r} does not match {pattern}"]
    return []


def _minimum(instance, n, schema, root, path):
    if isinstance(instance, (int, float)) and not isinstance(instance, bool) and instance < n:
        return [f"{path}: {instance} is below {n}"]
    return []


def _any_of(instance, options, schema, root, path):
    results = [validate(instance, option, root, path) for option in options]
    if any(not r for r in results):
        return []
    return [f"{path}: matches none of anyOf: " + " | ".join("; ".join(r) for r in results)]


_KEYWORDS = {
    "$ref": _ref,
    "type": _type,
    "required": _required,
    "minProperties": _min_properties,
    "items": _items,
    "minItems": _min_items,
    "enum": _enum,
    "pattern": _pattern,
    "minimum": _minimum,
    "anyOf": _any_of,
}
_MEMBERS = {"properties", "patternProperties", "additionalProperties"}
