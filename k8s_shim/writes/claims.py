"""Writing ResourceClaims as kube-scheduler's DynamicResources plugin does (recording 07):
before the pod is bound, the claim gets the finalizer ``resource.kubernetes.io/delete-protection``
(a PUT of the claim), then its allocation and the pod in ``reservedFor`` together (a PUT of
``status``), each with the resourceVersion just read, so that a claim changed meanwhile answers
409 and is read again. When its pods are done, the shim takes them out of ``reservedFor``; the
last one out clears the allocation (status ``{}``) and drops the finalizer: the devices are free.
"""

from __future__ import annotations

import logging

from k8s_shim.kube.kubeclient import ApiError, KubeClient, segment
from k8s_shim.translate.devices import DELETE_PROTECTION

__all__ = ["reserve", "unreserve", "claim_path", "ClaimTaken"]

log = logging.getLogger(__name__)
TRIES = 5  # 409s in a row before giving up (another writer keeps changing the claim)


class ClaimTaken(Exception):
    """The claim cannot be had as chosen: allocated otherwise meanwhile, gone, or being deleted."""


def claim_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{segment(namespace)}/resourceclaims/{segment(name)}"
    return f"{path}/{sub}" if sub else path


async def reserve(client: KubeClient, namespace: str, name: str, allocation: dict | None, pod: str,
                  pod_uid: str) -> None:
    """Allocate the claim as ``allocation`` (None: it is allocated already) and reserve it for the
    pod. ``ClaimTaken`` if the claim is not as chosen any more; ``ApiError`` for other refusals."""
    path = claim_path(namespace, name)
    for _ in range(TRIES):
        try:
            claim = await client.get(path)
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
                claim = await client.request("PUT", path, body=claim)
            claim["status"] = {**status, "allocation": current or allocation,
                               "reservedFor": [*reserved, {"resource": "pods", "name": pod, "uid": pod_uid}]}
            await client.request("PUT", path + "/status", body=claim)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.info("resourceclaim %s/%s changed while being written; reading it again", namespace, name)
    raise ClaimTaken(f"resourceclaim {namespace}/{name} kept changing ({TRIES} conflicts)")


async def unreserve(client: KubeClient, namespace: str, name: str, pod_uids: set[str]) -> None:
    """Take the pods out of the claim's reservedFor; the last one out frees its devices."""
    path = claim_path(namespace, name)
    for _ in range(TRIES):
        try:
            claim = await client.get(path)
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
                claim = await client.request("PUT", path + "/status", body=claim)
            if not left and DELETE_PROTECTION in (claim["metadata"].get("finalizers") or []):
                claim["metadata"]["finalizers"] = [f for f in claim["metadata"]["finalizers"] if f != DELETE_PROTECTION]
                await client.request("PUT", path, body=claim)
            return
        except ApiError as exc:
            if exc.status == 404:
                return
            if exc.status != 409:
                raise
    log.warning("resourceclaim %s/%s: reservations not removed (it kept changing)", namespace, name)
