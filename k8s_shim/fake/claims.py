"""The resourceclaim controller of kube-controller-manager, as the v1.36 recordings show it
(files 07 and 08):

- a pod claim naming a ResourceClaimTemplate gets a claim made from it: generateName
  ``<pod>-<pod claim>-``, the template's labels, annotation ``resource.kubernetes.io/pod-claim-name``,
  an ownerReference to the pod with ``controller: true`` (no blockOwnerDeletion), the template's
  spec; then the pod's ``status.resourceClaimStatuses`` [{name, resourceClaimName}] is written
  (manager ResourceClaimController);
- a claim's reservedFor entry whose pod does not exist (or is being deleted) is removed; when that
  leaves nobody, the allocation is cleared and the scheduler's delete-protection finalizer
  dropped (a claim made for the pod is then deleted by the garbage collector, its owner gone).

It does not act for pods that merely ended (Succeeded/Failed): freeing those is left to the
scheduler (Korral's shim does it). It learns writes through the store's listeners and acts on the
event loop right after, never inside the write that told it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from k8s_shim.fake.api import Api
from k8s_shim.fake.dra import DELETE_PROTECTION, POD_CLAIM_NAME
from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.store import Event

__all__ = ["ResourceClaimController"]

log = logging.getLogger("korral.k8s.fake.claims")
MANAGER = "kube-controller-manager"
POD_MANAGER = "ResourceClaimController"
_CLAIMS = "resource.k8s.io/resourceclaims"


class ResourceClaimController:
    def __init__(self, api: Api):
        self.api = api
        self.pods = api.kind("v1", "pods")
        self.claims = api.kind("resource.k8s.io/v1", "resourceclaims")
        self.templates = api.kind("resource.k8s.io/v1", "resourceclaimtemplates")
        self.live: dict[str, str] = {}  # uid of each pod not being deleted -> "ns/name"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queued: set[tuple[str, str]] = set()
        for entry in api.store.entries("pods"):
            if b'"deletionTimestamp"' not in entry.raw:
                self.live[entry.uid] = entry.key
        api.store.listen("pods", self._on_pod)
        api.store.listen(_CLAIMS, self._on_claim)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for entry in list(self.api.store.entries("pods")):
            if b'"resourceClaimTemplateName"' in entry.raw:
                self._queue("pod", entry.key)
        for entry in list(self.api.store.entries(_CLAIMS)):
            if b'"reservedFor"' in entry.raw or b'"deletionTimestamp"' in entry.raw:
                self._queue("claim", entry.key)

    async def stop(self) -> None:
        self.loop = None

    def idle(self) -> bool:
        return not self.queued

    def _queue(self, what: str, key: str) -> None:
        if self.loop is None or (what, key) in self.queued:
            return
        self.queued.add((what, key))
        self.loop.call_soon(self._run, what, key)

    def _run(self, what: str, key: str) -> None:
        self.queued.discard((what, key))
        try:
            if what == "pod":
                self._sync_pod(key)
            else:
                self._sync_claim(key)
        except ApiError as exc:  # a write raced another: the next event brings it back
            log.info("resourceclaim controller: %s %s: %s", what, key, exc)

    # -- events --------------------------------------------------------------------------------

    def _on_pod(self, event: Event) -> None:
        entry = event.new
        gone = event.type == "DELETED" or b'"deletionTimestamp"' in entry.raw
        if gone:
            if self.live.pop(entry.uid, None) is not None:
                for claim in self.api.store.entries(_CLAIMS):  # its reservations go
                    if entry.uid.encode() in claim.raw:
                        self._queue("claim", claim.key)
            return
        self.live[entry.uid] = entry.key
        if b'"resourceClaimTemplateName"' in entry.raw:
            self._queue("pod", entry.key)

    def _on_claim(self, event: Event) -> None:
        if event.type != "DELETED" and (b'"reservedFor"' in event.new.raw or b'"deletionTimestamp"' in event.new.raw):
            self._queue("claim", event.new.key)

    # -- claims from templates ------------------------------------------------------------------

    def _sync_pod(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        entry = self.api.store.get("pods", key)
        if entry is None or b'"deletionTimestamp"' in entry.raw:
            return
        pod = entry.decode()
        statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        missing = [c for c in (pod.get("spec") or {}).get("resourceClaims") or []
                   if c.get("resourceClaimTemplateName") and c.get("name") not in statuses]
        if not missing:
            return
        written = []
        for pod_claim in missing:
            claim = self._owned_claim(namespace, pod["metadata"]["uid"], pod_claim["name"])
            if claim is None:
                template = self.api.lookup("resource.k8s.io/v1", "resourceclaimtemplates", namespace,
                                           pod_claim["resourceClaimTemplateName"])
                if template is None:
                    continue  # kube-controller-manager retries: a template made later is picked up then
                claim = self.api.create(self.claims, namespace, self._claim_from(pod, pod_claim, template), MANAGER,
                                        fresh=True)
            written.append({"name": pod_claim["name"], "resourceClaimName": claim["metadata"]["name"]})
        if written:
            self.api.patch(self.pods, namespace, name, "strategic",
                           {"status": {"resourceClaimStatuses": [*statuses.values(), *written]}}, "status",
                           POD_MANAGER)

    def _owned_claim(self, namespace: str, pod_uid: str, pod_claim: str) -> dict[str, Any] | None:
        for entry in self.api.store.entries(_CLAIMS):
            if entry.namespace == namespace and pod_uid.encode() in entry.raw:
                claim = entry.decode()
                meta = claim["metadata"]
                if (meta.get("annotations") or {}).get(POD_CLAIM_NAME) == pod_claim and any(
                        r.get("uid") == pod_uid and r.get("controller") for r in meta.get("ownerReferences") or []):
                    return claim
        return None

    @staticmethod
    def _claim_from(pod: dict[str, Any], pod_claim: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        tmeta = (template.get("spec") or {}).get("metadata") or {}
        claim_meta: dict[str, Any] = {"generateName": f"{meta['name']}-{pod_claim['name']}-"}
        if tmeta.get("labels"):
            claim_meta["labels"] = dict(tmeta["labels"])
        claim_meta["annotations"] = {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME: pod_claim["name"]}
        claim_meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                                          "controller": True}]
        return {"metadata": claim_meta, "spec": (template.get("spec") or {}).get("spec") or {}}

    # -- reservations -------------------------------------------------------------------------

    def _sync_claim(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        entry = self.api.store.get(_CLAIMS, key)
        if entry is None:
            return
        claim = entry.decode()
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        valid = [r for r in reserved if r.get("resource") != "pods" or r.get("uid") in self.live]
        if valid != reserved:
            status = dict(status, reservedFor=valid)
            if not valid:  # nobody left: the devices are free again
                status = {}
            claim["status"] = status
            claim = self.api.update(self.claims, namespace, name, claim, "status", MANAGER)
        if not valid and not status.get("allocation") and DELETE_PROTECTION in (
                claim["metadata"].get("finalizers") or []) and (reserved or claim["metadata"].get("deletionTimestamp")):
            self.api.remove_finalizer(self.claims, claim, DELETE_PROTECTION)
