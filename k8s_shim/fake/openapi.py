"""The OpenAPI v3 documents kubectl reads before ``apply``/``create``: one per group-version,
listing each resource's operations with the query parameters the double honours, so kubectl
chooses server-side field validation (``fieldValidation``) instead of downloading schemas.
They carry paths and parameters, not the resources' schemas."""

from __future__ import annotations

import hashlib
from typing import Any

from k8s_shim.fake.kinds import Kind

__all__ = ["root", "group_version_doc", "path_of"]


def path_of(group_version: str) -> str:
    return "api/v1" if group_version == "v1" else f"apis/{group_version}"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32].upper()


def root(kinds: list[Kind]) -> dict[str, Any]:
    gvs = sorted({k.group_version for k in kinds})
    return {"paths": {path_of(gv): {"serverRelativeURL": f"/openapi/v3/{path_of(gv)}?hash={_hash(gv)}"}
                      for gv in gvs}}


def _operation(kind: Kind, verb: str, params: list[str]) -> dict[str, Any]:
    return {"tags": [kind.group_version], "operationId": f"{verb}{kind.kind}",
            "x-kubernetes-action": verb,
            "x-kubernetes-group-version-kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
            "parameters": [{"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                           for p in params],
            "responses": {"200": {"description": "OK"}}}


def group_version_doc(kinds: list[Kind], group_version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    write = ["dryRun", "fieldManager", "fieldValidation", "pretty"]
    for kind in kinds:
        if kind.group_version != group_version:
            continue
        base = f"/{path_of(group_version)}/"
        collection = base + (f"namespaces/{{namespace}}/{kind.plural}" if kind.namespaced else kind.plural)
        paths[collection] = {"get": _operation(kind, "list", ["labelSelector", "fieldSelector", "limit",
                                                              "continue", "resourceVersion", "watch"]),
                             "post": _operation(kind, "post", write)}
        paths[collection + "/{name}"] = {"get": _operation(kind, "get", ["pretty"]),
                                         "put": _operation(kind, "put", write),
                                         "patch": _operation(kind, "patch", write + ["force"]),
                                         "delete": _operation(kind, "delete", ["gracePeriodSeconds",
                                                                               "propagationPolicy"])}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (korral fake)", "version": "v1.24.0"},
            "paths": paths, "components": {"schemas": {}}}
