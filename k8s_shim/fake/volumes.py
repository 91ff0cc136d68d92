"""kube-controller-manager's persistent-volume binder and a CSI external provisioner, as the
v1.36 recordings show them (files 02, 10, 11).

The binder:
- moves a new PV (no claimRef) from Pending to Available;
- completes a bind a PV's ``claimRef`` starts (the scheduler's pre-bind, or a provisioner's PV):
  PV status Bound; the claim's ``spec.volumeName`` with ``pv.kubernetes.io/bind-completed`` and
  ``pv.kubernetes.io/bound-by-controller``; the claim's status Bound with the PV's access modes
  and capacity; a PV whose claim is gone goes Released;
- gives an Immediate claim the smallest Available PV of its class that fits it (claimRef);
- leaves a WaitForFirstConsumer claim without ``volume.kubernetes.io/selected-node`` alone (one
  ``WaitForFirstConsumer`` event); once it has a node (or at once for an Immediate class) and its
  class has a provisioner, adds ``volume.kubernetes.io/storage-provisioner`` (and the beta key)
  and posts ``ExternalProvisioning``.

The provisioner (``provisioners``: the drivers it serves, None: every one) creates
``pvc-<claim uid>`` for a claim annotated for one of its drivers, with the claim's size and access
modes, a CSI source, ``claimRef`` to the claim, and node affinity: the selected node's values of
the class's ``allowedTopologies`` keys, else its host name.

Both learn writes through the store's listeners and act on the event loop right after.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from k8s_shim.fake.api import Api
from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.quantity import parse as parse_quantity
from k8s_shim.fake.store import Event

__all__ = ["VolumeController"]

log = logging.getLogger("korral.k8s.fake.volumes")

MANAGER = "kube-controller-manager"
COMPONENT = "persistentvolume-controller"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONER = "volume.kubernetes.io/storage-provisioner"
PROVISIONER_BETA = "volume.beta.kubernetes.io/storage-provisioner"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
HOSTNAME = "kubernetes.io/hostname"


class VolumeController:
    def __init__(self, api: Api, provisioners: frozenset[str] | None = None):
        self.api = api
        self.provisioners = provisioners
        self.pvs = api.kind("v1", "persistentvolumes")
        self.claims = api.kind("v1", "persistentvolumeclaims")
        self.classes = api.kind("storage.k8s.io/v1", "storageclasses")
        self.nodes = api.kind("v1", "nodes")
        self.events = api.kind("v1", "events")
        self.told: set[tuple[str, str]] = set()  # (claim uid, reason) events posted
        self.loop: asyncio.AbstractEventLoop | None = None
        self._due = False
        for bucket in ("persistentvolumes", "persistentvolumeclaims", "storage.k8s.io/storageclasses"):
            api.store.listen(bucket, self._changed)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._changed(None)

    async def stop(self) -> None:
        self.loop = None

    def _changed(self, event: Event | None) -> None:
        if self.loop is not None and not self._due:
            self._due = True
            self.loop.call_soon(self._sync)

    def idle(self) -> bool:
        return not self._due

    def _objects(self, bucket: str) -> list[dict[str, Any]]:
        return [e.decode() for e in list(self.api.store.entries(bucket))]

    def _sync(self) -> None:
        self._due = False
        if self.loop is None:
            return
        try:
            self._sync_volumes()
            self._sync_claims()
        except ApiError as exc:  # a write raced another: the next change brings us back
            log.info("volume controller: %s", exc)
            self._changed(None)
        except Exception:  # noqa: BLE001 - one bad object must not stop the controller
            log.exception("volume controller")

    # -- the binder --------------------------------------------------------------------------
    def _claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        entry = self.api.store.get("persistentvolumeclaims", f"{namespace}/{name}")
        return entry.decode() if entry is not None else None

    def _pv_phase(self, pv: dict[str, Any], phase: str) -> None:
        if (pv.get("status") or {}).get("phase") != phase:
            self.api.patch(self.pvs, "", pv["metadata"]["name"], "merge",
                           {"status": {"phase": phase, "lastPhaseTransitionTime": self.api.now()}},
                           subresource="status", manager=MANAGER)

    def _sync_volumes(self) -> None:
        for pv in self._objects("persistentvolumes"):
            if pv["metadata"].get("deletionTimestamp"):
                continue
            spec = pv.get("spec") or {}
            ref = spec.get("claimRef") or {}
            if not ref.get("name"):
                self._pv_phase(pv, "Available")
                continue
            claim = self._claim(ref.get("namespace", ""), ref["name"])
            if claim is None or (ref.get("uid") and ref["uid"] != claim["metadata"]["uid"]):
                if (pv.get("status") or {}).get("phase") == "Bound":
                    self._pv_phase(pv, "Released")
                continue
            if (claim.get("spec") or {}).get("volumeName") not in (None, "", pv["metadata"]["name"]):
                continue  # the claim is bound to another volume
            self._bind(pv, claim)

    def _bind(self, pv: dict[str, Any], claim: dict[str, Any]) -> None:
        name, meta = pv["metadata"]["name"], claim["metadata"]
        self._pv_phase(pv, "Bound")
        if (claim.get("spec") or {}).get("volumeName") != name:
            self.api.patch(self.claims, meta["namespace"], meta["name"], "merge", {
                "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                             "pv.kubernetes.io/bound-by-controller": "yes"}},
                "spec": {"volumeName": name}}, manager=MANAGER)
        if (claim.get("status") or {}).get("phase") != "Bound":
            spec = pv.get("spec") or {}
            self.api.patch(self.claims, meta["namespace"], meta["name"], "merge", {"status": {
                "phase": "Bound", "accessModes": spec.get("accessModes") or [],
                "capacity": spec.get("capacity") or {}}}, subresource="status", manager=MANAGER)

    def _sync_claims(self) -> None:
        for claim in self._objects("persistentvolumeclaims"):
            meta, spec = claim["metadata"], claim.get("spec") or {}
            if spec.get("volumeName") or meta.get("deletionTimestamp"):
                continue
            cls = self.api.lookup("storage.k8s.io/v1", "storageclasses", "", spec.get("storageClassName") or "")
            if cls is None:
                continue
            notes = meta.get("annotations") or {}
            wffc = cls.get("volumeBindingMode") == "WaitForFirstConsumer"
            if wffc and not notes.get(SELECTED_NODE):
                self._event(claim, "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
                continue
            if not wffc and self._bind_available(claim):
                continue
            provisioner = cls.get("provisioner") or ""
            if provisioner == NO_PROVISIONER or not provisioner:
                continue
            if notes.get(PROVISIONER) != provisioner:
                self.api.patch(self.claims, meta["namespace"], meta["name"], "merge", {"metadata": {"annotations": {
                    PROVISIONER_BETA: provisioner, PROVISIONER: provisioner}}}, manager=MANAGER)
                self._event(claim, "ExternalProvisioning",
                            f"Waiting for a volume to be created either by the external provisioner '{provisioner}' "
                            "or manually by the system administrator. If volume creation is delayed, please verify "
                            "that the provisioner is running and correctly registered.")
                continue
            if self.provisioners is None or provisioner in self.provisioners:
                self._provision(claim, cls, notes.get(SELECTED_NODE, ""))

    def _bind_available(self, claim: dict[str, Any]) -> bool:
        """An Immediate claim takes the smallest Available PV of its class that fits it (its
        claimRef; the bind completes on the next pass); True if it found one."""
        meta, spec = claim["metadata"], claim.get("spec") or {}
        want = _bytes(((spec.get("resources") or {}).get("requests") or {}).get("storage", "0"))
        modes = set(spec.get("accessModes") or ())
        best: tuple[int, str] | None = None
        for pv in self._objects("persistentvolumes"):
            pv_spec = pv.get("spec") or {}
            size = _bytes((pv_spec.get("capacity") or {}).get("storage", "0"))
            if pv_spec.get("claimRef") or (pv.get("status") or {}).get("phase") != "Available" \
                    or pv_spec.get("storageClassName", "") != (spec.get("storageClassName") or "") \
                    or size < want or not modes <= set(pv_spec.get("accessModes") or ()):
                continue
            if best is None or (size, pv["metadata"]["name"]) < best:
                best = (size, pv["metadata"]["name"])
        if best is None:
            return False
        self.api.patch(self.pvs, "", best[1], "merge", {
            "metadata": {"annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}},
            "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                                  "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta["resourceVersion"]}}},
            manager=MANAGER)
        return True

    def _event(self, claim: dict[str, Any], reason: str, message: str) -> None:
        meta = claim["metadata"]
        if (meta["uid"], reason) in self.told:
            return
        self.told.add((meta["uid"], reason))
        now = self.api.now()
        self.api.create(self.events, meta["namespace"], {
            "metadata": {"name": f"{meta['name']}.{int(self.api.clock() * 1e9):x}"},  # as client-go names them
            "involvedObject": {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                               "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta["resourceVersion"]},
            "reason": reason, "message": message, "source": {"component": COMPONENT}, "firstTimestamp": now,
            "lastTimestamp": now, "count": 1, "type": "Normal", "eventTime": None,
            "reportingComponent": COMPONENT, "reportingInstance": ""}, MANAGER)

    # -- the external provisioner ------------------------------------------------------------
    def _provision(self, claim: dict[str, Any], cls: dict[str, Any], node: str) -> None:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        name = f"pvc-{meta['uid']}"
        if self.api.store.get("persistentvolumes", name) is not None:
            return
        affinity = None
        if node:
            labels = (self.api.lookup("v1", "nodes", "", node) or {}).get("metadata", {}).get("labels") or {}
            keys = [e.get("key", "") for t in cls.get("allowedTopologies") or ()
                    for e in t.get("matchLabelExpressions") or ()]
            exprs = [{"key": k, "operator": "In", "values": [labels[k]]} for k in dict.fromkeys(keys) if k in labels]
            if not exprs:
                exprs = [{"key": HOSTNAME, "operator": "In", "values": [labels.get(HOSTNAME, node)]}]
            affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}
        driver = cls["provisioner"]
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv: dict[str, Any] = {
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": driver}},
            "spec": {"capacity": {"storage": size},
                     "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy") or "Delete",
                     "storageClassName": cls["metadata"]["name"], "volumeMode": spec.get("volumeMode") or "Filesystem",
                     "csi": {"driver": driver, "volumeHandle": f"vol-{meta['uid'][:8]}", "fsType": "ext4"},
                     "claimRef": {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                                  "uid": meta["uid"], "apiVersion": "v1",
                                  "resourceVersion": meta["resourceVersion"]}}}
        if affinity is not None:
            pv["spec"]["nodeAffinity"] = affinity
        self.api.create(self.pvs, "", pv, "korral-fake-provisioner")


def _bytes(text: str) -> int:
    try:
        return int(parse_quantity(str(text)))
    except ValueError:
        return 0
