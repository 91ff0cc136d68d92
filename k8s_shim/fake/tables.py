"""Server-side printing: the ``meta.k8s.io/v1`` Table that ``kubectl get`` asks for
(``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``), with the columns a real server
prints for pods and nodes (priority 1 columns are the ``-o wide`` ones) and NAME/AGE for the rest.
"""

from __future__ import annotations

from typing import Any, Callable

from k8s_shim.fake.api import parse_time

__all__ = ["table", "wants_table"]

Column = tuple[str, str, int, str, Callable[[dict[str, Any], float], Any]]  # name, type, priority, format, cell


def wants_table(accept: str) -> bool:
    for part in accept.split(","):
        params = part.replace(" ", "").split(";")[1:]
        if "as=Table" in params and "g=meta.k8s.io" in params:
            return True
        if params == [] and part.strip():
            return False  # a plain media type came first
    return False


def _age(obj: dict[str, Any], now: float) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = max(0, int(now - parse_time(created)))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m" if seconds < 8 * 3600 else f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _pod_ready(obj: dict[str, Any], now: float) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: dict[str, Any], now: float) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            return state["waiting"]["reason"]
        if "terminated" in state and status.get("phase") == "Running":
            return state["terminated"].get("reason") or "Completed"
    if status.get("phase") == "Succeeded":
        return "Completed"
    if status.get("phase") == "Failed":
        return status.get("reason") or "Error"
    return status.get("reason") or status.get("phase") or "Unknown"


def _restarts(obj: dict[str, Any], now: float) -> int:
    return sum(cs.get("restartCount", 0) for cs in (obj.get("status") or {}).get("containerStatuses") or [])


def _node_status(obj: dict[str, Any], now: float) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles(obj: dict[str, Any], now: float) -> str:
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    return ",".join(roles) or "<none>"


def _address(kind: str) -> Callable[[dict[str, Any], float], str]:
    def cell(obj: dict[str, Any], now: float) -> str:
        for a in (obj.get("status") or {}).get("addresses") or []:
            if a.get("type") == kind:
                return a.get("address", "<none>")
        return "<none>"
    return cell


def _get(*path: str, default: Any = "<none>") -> Callable[[dict[str, Any], float], Any]:
    def cell(obj: dict[str, Any], now: float) -> Any:
        cur: Any = obj
        for p in path:
            cur = cur.get(p) if isinstance(cur, dict) else None
        return default if cur in (None, "") else cur
    return cell


NAME: Column = ("Name", "string", 0, "name", lambda o, n: o["metadata"]["name"])
AGE: Column = ("Age", "string", 0, "", _age)
COLUMNS: dict[str, list[Column]] = {
    "pods": [NAME, ("Ready", "string", 0, "", _pod_ready), ("Status", "string", 0, "", _pod_status),
             ("Restarts", "string", 0, "", _restarts), AGE, ("IP", "string", 1, "", _get("status", "podIP")),
             ("Node", "string", 1, "", _get("spec", "nodeName")),
             ("Nominated Node", "string", 1, "", _get("status", "nominatedNodeName")),
             ("Readiness Gates", "string", 1, "", lambda o, n: "<none>")],
    "nodes": [NAME, ("Status", "string", 0, "", _node_status), ("Roles", "string", 0, "", _node_roles), AGE,
              ("Version", "string", 0, "", _get("status", "nodeInfo", "kubeletVersion", default="")),
              ("Internal-IP", "string", 1, "", _address("InternalIP")),
              ("External-IP", "string", 1, "", _address("ExternalIP")),
              ("OS-Image", "string", 1, "", _get("status", "nodeInfo", "osImage", default="")),
              ("Kernel-Version", "string", 1, "", _get("status", "nodeInfo", "kernelVersion", default="")),
              ("Container-Runtime", "string", 1, "", _get("status", "nodeInfo", "containerRuntimeVersion",
                                                         default=""))],
    "namespaces": [NAME, ("Status", "string", 0, "", _get("status", "phase", default="")), AGE],
    "events": [("Last Seen", "string", 0, "", lambda o, n: _age({"metadata": {"creationTimestamp": o.get(
                   "lastTimestamp") or o.get("eventTime", "")[:19] + "Z" if o.get("lastTimestamp") or o.get(
                   "eventTime") else o["metadata"].get("creationTimestamp")}}, n)),
               ("Type", "string", 0, "", _get("type", default="")), ("Reason", "string", 0, "", _get("reason")),
               ("Object", "string", 0, "", lambda o, n: f"{(o.get('involvedObject') or {}).get('kind', '').lower()}/"
                                                        f"{(o.get('involvedObject') or {}).get('name', '')}"),
               ("Message", "string", 0, "", _get("message", default=""))],
    "priorityclasses": [NAME, ("Value", "integer", 0, "", _get("value", default=0)),
                        ("Global-Default", "boolean", 0, "", _get("globalDefault", default=False)), AGE],
}


def table(plural: str, objects: list[dict[str, Any]], resource_version: str, now: float,
          continue_token: str | None = None) -> dict[str, Any]:
    columns = COLUMNS.get(plural, [NAME, AGE])
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    rows = []
    for obj in objects:
        m = obj["metadata"]
        partial = {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                                     "deletionTimestamp", "labels", "annotations", "ownerReferences")
                   if k in m}
        rows.append({"cells": [col[4](obj, now) for col in columns],
                     "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                "metadata": partial}})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": [{"name": name, "type": typ, "format": fmt, "description": name,
                                   "priority": priority} for name, typ, priority, fmt, _ in columns],
            "rows": rows}
