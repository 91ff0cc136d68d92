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
- An in-place resize of a running pod (``pods/NAME/resize``, its generation grows) is actuated as
  a 1.33+ kubelet does: its container statuses' ``allocatedResources`` and ``resources`` take
  the new cpu and memory when the node has room (its allocatable less the other running pods
  on it); a resize larger than the node's allocatable is ``Infeasible``, one that fits it but
  not the room left is ``Deferred`` (condition ``PodResizePending``, the statuses keep what
  the containers run with) and is tried again when a pod on the node ends.
- A pod being deleted gracefully on a served node is finished after
  ``korral.io/fake-terminate-seconds`` (default 0, never more than its grace period) with the
  ``gracePeriodSeconds: 0`` DELETE a kubelet sends.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import ipaddress
import logging
from decimal import Decimal
from functools import lru_cache
from typing import Any

from k8s_shim.fake.api import Api, DeleteOptions
from k8s_shim.fake import quantity
from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.store import Event

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
        self.served: dict[str, dict[str, Any]] = {}  # node name -> {"ip", "first", "hosts", "next"}
        self.timers: dict[str, asyncio.TimerHandle] = {}  # pod key -> its next step
        self.state: dict[str, str] = {}  # pod key -> "starting" | "running" | "terminating"
        self.actuated: dict[str, dict[str, Any]] = {}  # pod key -> container -> the resources it runs with
        self.generations: dict[str, int] = {}  # pod key -> the last generation whose resize it took up
        self.deferred: set[str] = set()  # pods whose resize waits for room on their node
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
        network = ipaddress.ip_network(cidr, strict=False)
        self.served[name] = {"ip": ip, "first": network.network_address + 1,
                             "hosts": max(network.num_addresses - 2, 1), "next": 0}
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
        node = event.new.fields.get("spec.nodeName", "")
        if event.type == "DELETED":
            self._cancel(key)
            self.state.pop(key, None)
            self.actuated.pop(key, None)
            self.generations.pop(key, None)
            self.deferred.discard(key)
            if self.deferred:
                self._room_freed(node)
            return
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
        elif state == "running" and not deleting and b'"generation"' in event.new.raw:
            generation = event.new.decode()["metadata"].get("generation", 1)
            if generation > self.generations.get(key, 1):
                self.generations[key] = generation
                self.loop.call_soon(self._resize, key)
        if self.deferred and event.new.fields.get("status.phase") in ("Succeeded", "Failed"):
            self._room_freed(node)

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
        info["next"] += 1
        return str(info["first"] + (info["next"] - 1) % info["hosts"])

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
        self.api.patch(self.pods, meta["namespace"], meta["name"], "strategic", {"status": status}, "status", MANAGER,
                       stored=pod)
        self.state[key] = "running"
        self.actuated[key] = _resources(spec)
        self.generations[key] = meta.get("generation", 1)
        self._schedule_exit(key, pod)

    # -- in-place resize -------------------------------------------------------------------------

    def _resize(self, key: str) -> None:
        entry = self.api.store.get("pods", key)
        if entry is None or self.state.get(key) != "running":
            return
        pod = entry.decode()
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") != "Running":
            return
        wanted = _resources(spec)
        ran = self.actuated.get(key, wanted)
        verdict = self._room_for(key, spec.get("nodeName", ""), wanted)
        now = self.api.now()
        conditions = [c for c in status.get("conditions") or []
                      if c.get("type") not in ("PodResizePending", "PodResizeInProgress")]
        if verdict:
            reason, message = verdict
            conditions.append({"type": "PodResizePending", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": now, "reason": reason, "message": message})
            if reason == "Deferred":
                self.deferred.add(key)
            now_running = ran
        else:
            self.deferred.discard(key)
            self.actuated[key] = wanted
            now_running = wanted
        statuses = []
        for cs in status.get("containerStatuses") or []:
            cs = dict(cs)
            resources = now_running.get(cs.get("name"))
            if resources is not None:
                cs["allocatedResources"] = copy.deepcopy(resources.get("requests") or {})
                cs["resources"] = copy.deepcopy(resources)
            statuses.append(cs)
        try:
            self.api.patch(self.pods, meta["namespace"], meta["name"], "merge",
                           {"status": {"conditions": conditions, "containerStatuses": statuses}}, "status", MANAGER)
        except ApiError as exc:
            if exc.code != 404:
                log.warning("fake kubelet: pod %s: resize not written: %s", key, exc)

    def _room_for(self, key: str, node: str, wanted: dict[str, Any]) -> tuple[str, str] | None:
        """None when ``node`` holds the pod at ``wanted``; else (reason, message) of its
        ``PodResizePending`` condition: Infeasible (more than the node's allocatable) or Deferred
        (more than the room the other running pods leave)."""
        node_obj = self.api.store.get("nodes", node)
        allocatable = ((node_obj.decode().get("status") or {}).get("allocatable") or {}) if node_obj else {}
        need = _requests_sum(wanted)
        used: dict[str, Decimal] = {}
        for entry in self.api.store.entries("pods"):
            if entry.key == key or entry.fields.get("spec.nodeName") != node \
                    or entry.fields.get("status.phase") in ("Succeeded", "Failed"):
                continue
            other = self.actuated.get(entry.key) or _resources(entry.decode().get("spec") or {})
            for name, amount in _requests_sum(other).items():
                used[name] = used.get(name, Decimal(0)) + amount
        for name, amount in sorted(need.items()):
            capacity = quantity.parse(allocatable.get(name, "0"))
            if amount > capacity:
                return "Infeasible", (f"Node didn't have enough capacity: {name}, requested: {amount}, "
                                      f"capacity: {capacity}")
            if amount + used.get(name, Decimal(0)) > capacity:
                return "Deferred", (f"Node didn't have enough resource: {name}, requested: {amount}, "
                                    f"used: {used.get(name, Decimal(0))}, capacity: {capacity}")
        return None

    def _room_freed(self, node: str) -> None:
        """A pod on ``node`` ended: its deferred resizes are tried again."""
        for key in [k for k in self.deferred if (self.api.store.get("pods", k) is not None
                                                and self.api.store.get("pods", k).fields.get("spec.nodeName") == node)]:
            self.loop.call_soon(self._resize, key)

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
                "restartCount": restarts, "image": image, "imageID": _image_id(image),
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
                           {"status": {"containerStatuses": restarted}}, "status", MANAGER, stored=pod)
            self._schedule_exit(key, pod)
            return
        phase = "Succeeded" if code == 0 else "Failed"
        conditions = [{"type": t, "status": "False", "lastProbeTime": None, "lastTransitionTime": now,
                       "reason": "PodCompleted" if code == 0 else "PodFailed"} for t in ("Ready", "ContainersReady")]
        done = {"phase": phase, "conditions": conditions,
                "containerStatuses": [self._terminated(cs, now, code) for cs in current]}
        self.api.patch(self.pods, meta["namespace"], meta["name"], "strategic", {"status": done}, "status", MANAGER,
                       stored=pod)
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


@lru_cache(maxsize=1024)  # a function of the image name: a cluster runs few images
def _image_id(image: str) -> str:
    return f"{image}@sha256:" + hashlib.sha256(image.encode()).hexdigest()


def _resources(spec: dict[str, Any]) -> dict[str, Any]:
    """Each container's resources (cpu and memory, what a resize changes), by name."""
    out = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        out[c.get("name")] = {section: {k: v for k, v in (res.get(section) or {}).items() if k in ("cpu", "memory")}
                              for section in ("requests", "limits") if res.get(section)}
    return out


def _requests_sum(resources: dict[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for res in resources.values():
        for name, amount in (res.get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + quantity.parse(amount)
    return total
