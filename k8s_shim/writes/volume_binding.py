"""The volume writes before a pod's binding, as kube-scheduler's volume binder makes them.

``volume_gate`` turns ``Volumes.plan`` for the chosen node into a ``prebind.Gate``: for a static
PV its ``spec.claimRef`` (and ``pv.kubernetes.io/bound-by-controller: yes``), for a claim to be
provisioned its ``volume.kubernetes.io/selected-node``; then the gate waits until every claim of
the pod is Bound (the PV binder and the provisioner do the rest). A gate that fails takes back
what is not bound yet: the selected-node annotation, the PV's claimRef.
"""

from __future__ import annotations

import logging

from k8s_shim.kube.kubeclient import ApiError, KubeClient
from k8s_shim.translate.volumes import SELECTED_NODE, Step, Volumes
from k8s_shim.writes.binding import BindJob
from k8s_shim.writes.prebind import FAIL, READY, WAIT, Gate

__all__ = ["volume_gate", "NO_ROOM", "NOT_BOUND_HERE"]

log = logging.getLogger(__name__)

BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
NO_ROOM = object()  # the node the core chose can no longer have one of the pod's volumes
# the reason of a node excluded for a while after the pod's volumes could not be bound there
NOT_BOUND_HERE = "node(s) were excluded for a while: the pod's volumes could not be bound there"


def _write(client: KubeClient, step: Step, node: str):
    async def write() -> None:
        if step.volume:
            namespace, _, name = step.claim.partition("/")
            await client.patch_volume(step.volume, {
                "metadata": {"annotations": {BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace,
                                      "name": name, "uid": step.claim_uid}}})
        else:
            await client.patch_claim(*step.claim.split("/", 1), {"metadata": {"annotations": {SELECTED_NODE: node}}})
    return write


async def _take_back(client: KubeClient, volumes: Volumes, steps: list[Step]) -> None:
    for step in steps:
        claim = volumes.claims.get(step.claim)
        if claim is None or claim.bound:
            continue
        try:
            if step.volume:
                pv = volumes.volumes.get(step.volume)
                if pv is not None and pv.phase != "Bound" and pv.claim == step.claim:
                    await client.patch_volume(step.volume, {
                        "metadata": {"annotations": {BOUND_BY_CONTROLLER: None}}, "spec": {"claimRef": None}})
            else:
                await client.patch_claim(*step.claim.split("/", 1),
                                         {"metadata": {"annotations": {SELECTED_NODE: None}}})
        except ApiError as exc:
            log.info("volume pre-bind of %s not taken back: %s", step.claim, exc)


def volume_gate(volumes: Volumes, client: KubeClient, job: BindJob, claims: tuple[str, ...],
                labels: dict[str, str], timeout: float, spawn):
    """The gate of ``job``'s volumes on its node; None when it needs none (every claim bound, or
    bound elsewhere than here), ``NO_ROOM`` when one of its claims cannot have a volume there."""
    if not volumes.to_place(job.namespace, claims):
        return None
    steps = volumes.plan(job.namespace, claims, job.node, labels)
    if steps is None:
        return NO_ROOM

    def check() -> tuple[str, str]:
        missing = volumes.unbound(job.namespace, claims)
        if missing is None:
            volumes.forget(steps)
            return READY, ""
        fatal, what = missing
        return (FAIL if fatal else WAIT), what

    def undo() -> None:
        volumes.forget(steps)
        volumes.withdraw(steps, job.node)
        spawn(_take_back(client, volumes, steps))
    return Gate(job, [_write(client, s, job.node) for s in steps], check, timeout,
                late="its volumes were not bound", limit="service.volumeBindTimeout", undo=undo,
                exclusion=NOT_BOUND_HERE)
