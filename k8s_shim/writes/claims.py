"""Writing ResourceClaims as kube-scheduler's DynamicResources plugin does (recording 07):
before the pod is bound, the claim gets the finalizer ``resource.kubernetes.io/delete-protection``
(a PUT of the claim), then its allocation and the pod in ``reservedFor`` together (a PUT of
``status``), each with the resourceVersion just read, so that a claim changed meanwhile answers
409 and is read again. When its pods are done, the shim takes them out of ``reservedFor``; the
last one out clears the allocation (status ``{}``) and drops the finalizer: the devices are free.
The writes before the bind are a ``writes.prebind`` gate, as the volumes' are: a pod with both
waits for both, and a failure of either gives back both and asks for the pod again.
"""

from __future__ import annotations

import logging

from k8s_shim.kube.kubeclient import ApiError, KubeClient
from k8s_shim.translate.devices import DELETE_PROTECTION, Devices, allocation_status
from k8s_shim.translate.model import Task
from k8s_shim.writes.binding import BindJob
from k8s_shim.writes.events import WARNING
from k8s_shim.writes.prebind import READY, Gate, Taken

__all__ = ["reserve", "unreserve", "ClaimTaken", "DeviceHandling"]

log = logging.getLogger(__name__)
TRIES = 5  # 409s in a row before giving up (another writer keeps changing the claim)
# the reason of a node excluded for a while after the pod's claims could not be written there
NOT_WRITTEN_HERE = "node(s) were excluded for a while: the pod's resource claims could not be written there"


class ClaimTaken(Exception):
    """The claim cannot be had as chosen: allocated otherwise meanwhile, gone, or being deleted."""


async def reserve(client: KubeClient, namespace: str, name: str, allocation: dict | None, pod: str,
                  pod_uid: str) -> None:
    """Allocate the claim as ``allocation`` (None: it is allocated already) and reserve it for the
    pod. ``ClaimTaken`` if the claim is not as chosen any more; ``ApiError`` for other refusals."""
    for _ in range(TRIES):
        try:
            claim = await client.get_claim(namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                raise ClaimTaken(f"resourceclaim {namespace}/{name} no longer exists") from None
            raise
        meta, status = claim["metadata"], claim.get("status") or {}
        if meta.get("deletionTimestamp"):
            raise ClaimTaken(f"resourceclaim {namespace}/{name} is being deleted")
        current = status.get("allocation")
        if allocation is not None and current and current.get("devices") != allocation.get("devices"):
            raise ClaimTaken(f"resourceclaim {namespace}/{name} was allocated meanwhile")
        if allocation is None and not current:
            raise ClaimTaken(f"resourceclaim {namespace}/{name} was deallocated meanwhile")
        reserved = status.get("reservedFor") or []
        if current and any(r.get("uid") == pod_uid for r in reserved):
            return  # done before (an earlier try whose answer was lost)
        try:
            if DELETE_PROTECTION not in (meta.get("finalizers") or []):
                meta["finalizers"] = [*(meta.get("finalizers") or []), DELETE_PROTECTION]
                claim = await client.update_claim(namespace, name, claim)
            claim["status"] = {**status, "allocation": current or allocation,
                               "reservedFor": [*reserved, {"resource": "pods", "name": pod, "uid": pod_uid}]}
            await client.update_claim_status(namespace, name, claim)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.info("resourceclaim %s/%s changed while being written; reading it again", namespace, name)
    raise ClaimTaken(f"resourceclaim {namespace}/{name} kept changing ({TRIES} conflicts)")


async def unreserve(client: KubeClient, namespace: str, name: str, pod_uids: set[str]) -> None:
    """Take the pods out of the claim's reservedFor; the last one out frees its devices."""
    for _ in range(TRIES):
        try:
            claim = await client.get_claim(namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        meta, status = claim["metadata"], claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        left = [r for r in reserved if r.get("uid") not in pod_uids]
        if left == reserved:
            return  # not ours (any more): whoever holds it frees it
        try:
            if left != reserved or (not left and status.get("allocation")):
                claim["status"] = {**status, "reservedFor": left} if left else {}
                claim = await client.update_claim_status(namespace, name, claim)
            if not left and DELETE_PROTECTION in (claim["metadata"].get("finalizers") or []):
                left_finalizers = [f for f in claim["metadata"]["finalizers"] if f != DELETE_PROTECTION]
                if left_finalizers:
                    claim["metadata"]["finalizers"] = left_finalizers
                else:
                    del claim["metadata"]["finalizers"]
                await client.update_claim(namespace, name, claim)
            return
        except ApiError as exc:
            if exc.status == 404:
                return
            if exc.status != 409:
                raise
    log.warning("resourceclaim %s/%s: reservations not removed (it kept changing)", namespace, name)


class DeviceHandling:
    """The DRA part of ``Shim``: the book of devices and claims (``devices``), each waiting pod's
    node requirements (``task.requirements["devices"]``), the claim writes between the core's
    placement and the bind (a ``writes.prebind`` gate, joined with the volumes' by the shim), and
    the freeing of claims when their pods end. Expects the shim's ``tasks``, ``nodes``,
    ``client`` (the fenced one: a standby writes no claim), ``foreign``, ``settings``, ``_spawn``,
    ``_event`` and ``_recheck``."""

    def _devices_init(self) -> None:
        self.devices = Devices()
        self.device_users: set[str] = set()  # uids of our pods with resource claims, not on a node
        self.device_told: dict[str, tuple[str, ...]] = {}  # uid -> the CEL problems its events said

    # ------------------------------------------------------------------ informers
    def device_class_changed(self, old, new) -> None:
        self.devices.class_changed(old, new)
        self._recheck(set(self.device_users))

    def resource_slice_changed(self, old, new) -> None:
        self.devices.slice_changed(old, new)
        self._recheck(set(self.device_users))

    def resource_claim_changed(self, old, new) -> None:
        self.devices.claim_changed(old, new)
        self._recheck(set(self.device_users))

    # ------------------------------------------------------------------ what an ask carries
    def _plan_devices(self, task: Task) -> tuple[list[str], bool]:
        """The waits of the pod's claims (constraints it cannot meet now), and whether its node
        requirements changed (``task.requirements["devices"]``). A CEL problem is told once as a
        Warning event."""
        spec = task.spec
        if not spec.resource_claims or task.node:
            self.device_users.discard(task.uid)
            return [], task.requirements.pop("devices", None) is not None
        self.device_users.add(task.uid)
        nodes = {name: entry.state.labels for name, entry in self.nodes.items()}
        plan = self.devices.plan(spec.uid, spec.namespace, spec.resource_claims, nodes)
        errors = tuple(plan.errors)
        if errors and errors != self.device_told.get(task.uid):
            for error in errors:
                self._event(spec, WARNING, "FailedScheduling",
                            f"pod {spec.alias}: cannot allocate its resource claims: {error} (it waits until the "
                            "expression is fixed)")
        self.device_told[task.uid] = errors
        waits = list(plan.waits) + [f"resource claims: {e}" for e in errors]
        required = list(plan.requirements) if not waits else []
        changed = required != task.requirements.get("devices", [])
        if required:
            task.requirements["devices"] = required
        else:
            task.requirements.pop("devices", None)
        return waits, changed

    # ------------------------------------------------------------------ between placement and bind
    def _choose_devices(self, task: Task, job: BindJob) -> list | None:
        """The devices of the pod's claims on ``job``'s node (``Devices.allocate``): [] for a pod
        without claims, None when they are no longer free there."""
        spec = task.spec
        if not spec.resource_claims:
            return []
        entry = self.nodes.get(job.node)
        return self.devices.allocate(spec.uid, spec.namespace, spec.resource_claims, job.node,
                                     entry.state.labels if entry is not None else {})

    def _device_gate(self, task: Task, job: BindJob, choice: list) -> Gate | None:
        """The pod's claim writes before its bind (``writes.prebind``; None for a pod without
        claims): each chosen claim allocated and reserved for the pod, then each claim allocated
        already reserved too. A claim no longer as chosen fails the gate (``Taken``); a failed or
        cancelled gate gives back the pod's reservations (kube-scheduler's Unreserve)."""
        spec, devices = task.spec, self.devices
        if not spec.resource_claims:
            return None
        chosen = {claim.key for claim, _ in choice}
        for claim, picks in choice:  # taken from other pods' plans until the claim's informer shows them
            devices.pending[claim.key] = tuple(d.key for _, d in picks)

        async def write() -> None:
            try:
                for claim, picks in choice:
                    await reserve(self.client, claim.namespace, claim.name,
                                  allocation_status(picks, job.node, claim, devices.classes), spec.name, spec.uid)
                for pc in spec.resource_claims:
                    claim = devices.pod_claim(spec.uid, spec.namespace, pc)
                    if claim is not None and claim.key not in chosen and not any(
                            u == spec.uid for _, u in claim.reserved):
                        await reserve(self.client, claim.namespace, claim.name, None, spec.name, spec.uid)
            except ClaimTaken as exc:
                raise Taken(f"its resource claims cannot be allocated on node {job.node} ({exc})") from None

        def undo() -> None:
            for key in chosen:
                devices.pending.pop(key, None)
            self._give_back_devices(task)
        return Gate(job, [write], lambda: (READY, ""), self.settings.volume_bind_timeout,
                    late="its resource claims were not written", limit="service.volumeBindTimeout", undo=undo,
                    on_cancel=undo, exclusion=NOT_WRITTEN_HERE)

    # ------------------------------------------------------------------ freeing
    def _free_devices(self, task: Task) -> None:
        """The pod ended: its reservations go, and a claim left with none is deallocated."""
        self.device_users.discard(task.uid)
        self.device_told.pop(task.uid, None)
        self._give_back_devices(task)

    def _give_back_devices(self, task: Task) -> None:
        """The pod's reservations go (it ended, or its bind was refused: kube-scheduler's
        Unreserve); a claim left with none is deallocated, its devices free again."""
        spec = task.spec
        names = []
        for pc in spec.resource_claims:
            claim = self.devices.pod_claim(spec.uid, spec.namespace, pc)
            if claim is not None:  # reserved, or being reserved (its informer may lag): asked in any case
                names.append(claim.name)
        if names:
            self._spawn(self._unreserve_all(spec.namespace, names, {spec.uid}))

    async def sweep_reservations(self) -> None:
        """After the start-up lists: reservations of pods that are not ours and running or waiting
        (a pod that ended while the shim was down) are checked one by one; one whose pod is gone,
        was recreated or has ended is removed, as if the shim had seen the pod end."""
        for claim in list(self.devices.claims.values()):
            for name, uid in claim.reserved:
                if uid in self.tasks or uid in self.foreign:
                    continue
                try:
                    pod = await self.client.get_pod(claim.namespace, name)
                    ended = pod["metadata"].get("uid") != uid or (pod.get("status") or {}).get("phase") in (
                        "Succeeded", "Failed")
                except ApiError as exc:
                    if exc.status != 404:
                        log.info("resourceclaim %s: pod %s not read (%s); its reservation stays", claim.key, name,
                                 exc)
                        continue
                    ended = True
                if ended:
                    await self._unreserve_all(claim.namespace, [claim.name], {uid})

    async def _unreserve_all(self, namespace: str, names: list[str], uids: set[str]) -> None:
        for name in names:
            try:
                await unreserve(self.client, namespace, name, uids)
            except ApiError as exc:  # a standby's (the fence's "NotLeader"): the leader frees it
                log.log(logging.DEBUG if exc.reason == "NotLeader" else logging.WARNING,
                        "resourceclaim %s/%s: reservation of %s not removed: %s", namespace, name,
                        ", ".join(sorted(uids)), exc)
