"""A fake kubelet (as KWOK's): it runs no containers but makes the pods bound to its nodes behave
as a kubelet would make them, through the same API the HTTP clients use.

- Nodes it serves: those annotated ``korral.io/fake-kubelet: "true"`` (every node ``--nodes``
  creates). It posts them Ready and, as the node-lifecycle controller would, removes the
  ``node.kubernetes.io/not-ready`` taint admission put on them.
- A pod bound to a served node becomes Running after ``start_seconds``: conditions, hostIP,
  podIP from the node's podCIDR, startTime and a running status per container.
- Annotation ``korral.io/fake-run-seconds: "S"`` makes its containers exit after S seconds with
  ``korral.io/fake-exit-code`` (default 0): restartPolicy Never ends in Succeeded (0) or Failed,
  OnFailure restarts a failed container, Always restarts any. Without the annotation a pod runs
  until it is deleted.
- A pod being deleted gracefully on a served node is finished after
  ``korral.io/fake-terminate-seconds`` (default 0, never more than its grace period) with the
  ``gracePeriodSeconds: 0`` DELETE a kubelet sends.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
from typing import Any

from rmproxy.k8s.fake.api import Api, DeleteOptions
from rmproxy.k8s.fake.errors import ApiError
from rmproxy.k8s.fake.store import Event

__all__ = ["FakeKubelet", "FAKE_KUBELET", "RUN_SECONDS", "EXIT_CODE", "TERMINATE_SECONDS"]

log = logging.getLogger("korral.k8s.fake.kubelet")

FAKE_KUBELET = "korral.io/fake-kubelet"
RUN_SECONDS = "korral.io/fake-run-seconds"
EXIT_CODE = "korral.io/fake-exit-code"
TERMINATE_SECONDS = "korral.io/fake-terminate-seconds"
MANAGER = "korral-fake-kubelet"


def _seconds(pod: dict[str, Any], key: str) -> float | None:
    value = (pod["metadata"].get("annotations") or {}).get(key)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        log.warning("fake kubelet: pod %s/%s: annotation %s=%r is not a number of seconds; ignored",
                    pod["metadata"].get("namespace"), pod["metadata"].get("name"), key, value)
        return None
    return max(seconds, 0.0)


class FakeKubelet:
    def __init__(self, api: Api, start_seconds: float = 0.0):
        self.api = api
        self.start_seconds = start_seconds
        self.pods = api.kind("v1", "pods")
        self.nodes = api.kind("v1", "nodes")
        self.served: dict[str, dict[str, Any]] = {}  # node name -> {"ip", "cidr", "next"}
        self.timers: dict[str, asyncio.TimerHandle] = {}  # pod key -> its next step
        self.state: dict[str, str] = {}  # pod key -> "starting" | "running" | "terminating"
        self.loop: asyncio.AbstractEventLoop | None = None
        api.store.listen("nodes", self._on_node)
        api.store.listen("pods", self._on_pod)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for entry in list(self.api.store.entries("nodes")):
            self._consider_node(entry.decode())
        for entry in list(self.api.store.entries("pods")):
            self._consider_pod(entry.key, entry.decode())

    async def stop(self) -> None:
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
        self.loop = None

    # -- nodes ---------------------------------------------------------------------------------

    def _on_node(self, event: Event) -> None:
        if event.type == "DELETED":
            self.served.pop(event.new.name, None)
        elif self.loop is not None and (event.new.name not in self.served or event.prev is None):
            if b'"%s"' % FAKE_KUBELET.encode() in event.new.raw:
                self._consider_node(event.new.decode())

    def _consider_node(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if (node["metadata"].get("annotations") or {}).get(FAKE_KUBELET) != "true" or name in self.served:
            return
        addresses = (node.get("status") or {}).get("addresses") or []
        ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "")
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24"
        self.served[name] = {"ip": ip, "cidr": ipaddress.ip_network(cidr, strict=False), "next": 0}
        assert self.loop is not None
        self.loop.call_soon(self._make_ready, name)

    def _make_ready(self, name: str) -> None:
        now = self.api.now()
        conditions = [
            {"type": t, "status": "False", "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": r,
             "message": m} for t, r, m in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))]
        conditions.append({"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now,
                           "reason": "KubeletReady", "message": "kubelet is posting ready status"})
        try:
            self.api.patch(self.nodes, "", name, "strategic", {"status": {"conditions": conditions}}, "status",
                           MANAGER)
            node = self.api.get(self.nodes, "", name)
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != "node.kubernetes.io/not-ready"]
            if taints != (node["spec"].get("taints") or []):
                self.api.patch(self.nodes, "", name, "merge", {"spec": {"taints": taints or None}},
                               manager="korral-fake-node-lifecycle")
        except ApiError as exc:
            log.warning("fake kubelet: node %s: %s", name, exc)

    # -- pods ----------------------------------------------------------------------------------

    def _on_pod(self, event: Event) -> None:
        if self.loop is None:
            return
        key = event.key
        if event.type == "DELETED":
            self._cancel(key)
            self.state.pop(key, None)
            return
        node = event.new.fields.get("spec.nodeName", "")
        if node not in self.served:
            return
        deleting = b'"deletionTimestamp"' in event.new.raw
        state = self.state.get(key)
        if deleting and state != "terminating":
            self._schedule(key, 0.0, self._terminate)
            self.state[key] = "terminating"
        elif state is None and not deleting and event.new.fields.get("status.phase") == "Pending":
            self.state[key] = "starting"
            self._schedule(key, self.start_seconds, self._run)

    def _consider_pod(self, key: str, pod: dict[str, Any]) -> None:
        node = pod["spec"].get("nodeName", "")
        if node not in self.served or key in self.state:
            return
        if pod["metadata"].get("deletionTimestamp"):
            self.state[key] = "terminating"
            self._schedule(key, 0.0, self._terminate)
        elif pod.get("status", {}).get("phase") == "Pending":
            self.state[key] = "starting"
            self._schedule(key, self.start_seconds, self._run)
        elif pod.get("status", {}).get("phase") == "Running":
            self.state[key] = "running"
            self._schedule_exit(key, pod)

    def _schedule(self, key: str, delay: float, step: Any) -> None:
        self._cancel(key)
        assert self.loop is not None
        self.timers[key] = self.loop.call_later(delay, self._step, key, step)

    def _cancel(self, key: str) -> None:
        handle = self.timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _step(self, key: str, step: Any) -> None:
        self.timers.pop(key, None)
        entry = self.api.store.get("pods", key)
        if entry is None:
            return
        try:
            step(key, entry.decode())
        except ApiError as exc:
            if exc.code != 404:
                log.warning("fake kubelet: pod %s: %s", key, exc)

    def _pod_ip(self, node: str) -> str:
        info = self.served[node]
        hosts = info["cidr"].num_addresses - 2
        info["next"] += 1
        return str(info["cidr"].network_address + 1 + (info["next"] - 1) % max(hosts, 1))

    def _run(self, key: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if meta.get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Pending":
            return
        node = spec.get("nodeName", "")
        if node not in self.served:
            return
        now = self.api.now()
        ip = self._pod_ip(node)
        conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                      for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
        status = {"phase": "Running", "conditions": conditions, "hostIP": self.served[node]["ip"], "podIP": ip,
                  "podIPs": [{"ip": ip}], "startTime": now,
                  "containerStatuses": [self._running(c, meta.get("uid", ""), now, 0) for c in spec["containers"]]}
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [self._terminated(self._running(c, meta.get("uid", ""), now, 0), now, 0)
                                               for c in spec["initContainers"]]
        self.api.patch(self.pods, meta["namespace"], meta["name"], "strategic", {"status": status}, "status", MANAGER)
        self.state[key] = "running"
        self._schedule_exit(key, pod)

    def _schedule_exit(self, key: str, pod: dict[str, Any]) -> None:
        run = _seconds(pod, RUN_SECONDS)
        if run is not None:
            self._schedule(key, run, self._exit)

    @staticmethod
    def _container_id(uid: str, name: str, restarts: int) -> str:
        return "containerd://" + hashlib.sha256(f"{uid}/{name}/{restarts}".encode()).hexdigest()

    def _running(self, c: dict[str, Any], uid: str, now: str, restarts: int) -> dict[str, Any]:
        image = c.get("image", "")
        return {"name": c["name"], "state": {"running": {"startedAt": now}}, "lastState": {}, "ready": True,
                "restartCount": restarts, "image": image,
                "imageID": f"{image}@sha256:" + hashlib.sha256(image.encode()).hexdigest(),
                "containerID": self._container_id(uid, c["name"], restarts), "started": True}

    @staticmethod
    def _terminated(status: dict[str, Any], now: str, code: int) -> dict[str, Any]:
        started = status["state"].get("running", {}).get("startedAt", now)
        out = dict(status)
        out["state"] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                       "startedAt": started, "finishedAt": now, "containerID": status["containerID"]}}
        out["ready"] = False
        out["started"] = False
        return out

    def _exit(self, key: str, pod: dict[str, Any]) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") != "Running":
            return
        annotations = meta.get("annotations") or {}
        try:
            code = int(annotations.get(EXIT_CODE, "0"))
        except ValueError:
            log.warning("fake kubelet: pod %s: annotation %s=%r is not an integer; exiting 0", key, EXIT_CODE,
                        annotations.get(EXIT_CODE))
            code = 0
        policy = spec.get("restartPolicy", "Always")
        now = self.api.now()
        current = status.get("containerStatuses") or []
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            restarted = []
            for cs, c in zip(current, spec["containers"]):
                fresh = self._running(c, meta.get("uid", ""), now, cs.get("restartCount", 0) + 1)
                fresh["lastState"] = self._terminated(cs, now, code)["state"]
                restarted.append(fresh)
            self.api.patch(self.pods, meta["namespace"], meta["name"], "strategic",
                           {"status": {"containerStatuses": restarted}}, "status", MANAGER)
            self._schedule_exit(key, pod)
            return
        phase = "Succeeded" if code == 0 else "Failed"
        conditions = [{"type": t, "status": "False", "lastProbeTime": None, "lastTransitionTime": now,
                       "reason": "PodCompleted" if code == 0 else "PodFailed"} for t in ("Ready", "ContainersReady")]
        done = {"phase": phase, "conditions": conditions,
                "containerStatuses": [self._terminated(cs, now, code) for cs in current]}
        self.api.patch(self.pods, meta["namespace"], meta["name"], "strategic", {"status": done}, "status", MANAGER)
        self.state[key] = "finished"

    def _terminate(self, key: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            return
        wait = _seconds(pod, TERMINATE_SECONDS) or 0.0
        grace = meta.get("deletionGracePeriodSeconds", 0)
        wait = min(wait, grace)
        if wait > 0 and self.state.get(key) != "killing":
            self.state[key] = "killing"
            self._schedule(key, wait, self._terminate)
            return
        self.api.delete(self.pods, meta["namespace"], meta["name"], DeleteOptions(grace_period=0,
                                                                                   uid=meta.get("uid")))
