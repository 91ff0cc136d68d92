"""Discovery documents (/version, /api, /apis, /api/v1, /apis/GROUP/VERSION) built from the kinds
the double serves, in the shapes recorded from a real v1.24 server (file 01)."""

from __future__ import annotations

from typing import Any

from k8s_shim.fake.kinds import Kind

__all__ = ["VERSION", "api_versions", "group_list", "group", "resource_list", "served_group_versions"]

VERSION = {"major": "1", "minor": "24", "gitVersion": "v1.24.0+korral-fake", "gitCommit": "korral-fake",
           "gitTreeState": "clean", "buildDate": "2026-11-27T00:00:00Z", "goVersion": "python",
           "compiler": "gc", "platform": "linux/amd64"}

# the real server's group order (file 01), for the groups the double serves
_GROUP_ORDER = ("apps", "events.k8s.io", "batch", "policy", "storage.k8s.io", "scheduling.k8s.io",
                "coordination.k8s.io", "resource.k8s.io")
# served as a newer server serves them, but not listed: discovery stays the recorded v1.24's
# (pods/resize: in-place resize, Kubernetes 1.33 on)
_UNLISTED = ("resize",)
# groups served as a v1.36 server serves them (file 15 of k8s-wire/v1.36: /apis/GROUP and
# /apis/GROUP/v1 answer) but not listed in /apis, which stays the recorded v1.24's
_UNLISTED_GROUPS = ("resource.k8s.io",)
# subresources that belong to another group (pods/eviction is policy/v1)
_SUBRESOURCE_KIND = {"binding": "Binding", "eviction": "Eviction", "attach": "PodAttachOptions",
                     "exec": "PodExecOptions", "proxy": "NodeProxyOptions", "finalize": "Namespace"}


def served_group_versions(kinds: list[Kind]) -> set[str]:
    return {k.group_version for k in kinds}


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def group(name: str, kinds: list[Kind] | None = None) -> dict[str, Any]:
    """The group's discovery entry: v1 preferred, then the other versions served (an alpha turned
    on with --runtime-config, e.g. scheduling.k8s.io/v1alpha2)."""
    others = sorted({k.version for k in kinds or () if k.group == name and k.version != "v1"})
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in ("v1", *others)]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list(kinds: list[Kind]) -> dict[str, Any]:
    names = {k.group for k in kinds if k.group and k.group not in _UNLISTED_GROUPS}
    ordered = [g for g in _GROUP_ORDER if g in names] + sorted(names - set(_GROUP_ORDER))
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group(g, kinds) for g in ordered]}


def resource_list(kinds: list[Kind], group_version: str) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    mine = [k for k in kinds if k.group_version == group_version]
    if group_version == "v1":
        resources.append({"name": "bindings", "singularName": "", "namespaced": True, "kind": "Binding",
                          "verbs": ["create"]})
    for kind in sorted(mine, key=lambda k: k.plural):
        resources.append(kind.describe())
        for sub, verbs in sorted(kind.subresources.items()):
            if sub in _UNLISTED:
                continue
            entry: dict[str, Any] = {"name": f"{kind.plural}/{sub}", "singularName": "",
                                     "namespaced": kind.namespaced, "kind": _SUBRESOURCE_KIND.get(sub, kind.kind),
                                     "verbs": list(verbs)}
            if sub == "eviction":
                entry = {"name": entry["name"], "singularName": "", "namespaced": True, "group": "policy",
                         "version": "v1", "kind": "Eviction", "verbs": ["create"]}
            if sub == "log":
                entry["kind"] = "Pod"
            resources.append(entry)
    resources.sort(key=lambda r: r["name"])
    out: dict[str, Any] = {"kind": "APIResourceList"}
    if group_version != "v1":
        out["apiVersion"] = "v1"
    out["groupVersion"] = group_version
    out["resources"] = resources
    return out
