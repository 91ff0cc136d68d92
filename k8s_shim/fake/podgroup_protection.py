"""kube-controller-manager's PodGroup protection (Kubernetes 1.35 on, with the GenericWorkload
feature gate): the ``scheduling.k8s.io/podgroup-protection`` finalizer the API server puts on every
PodGroup (``fake.workloads``) is removed from a PodGroup being deleted once no pod that is not
terminal names it, and the PodGroup goes."""

from __future__ import annotations

import asyncio
import logging

from k8s_shim.fake.api import Api
from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.store import Event
from k8s_shim.fake.workloads import GROUP, GROUP_VERSION, PROTECTION

__all__ = ["PodGroupProtection"]

log = logging.getLogger("korral.k8s.fake.workloads")
_PODGROUPS = f"{GROUP}/podgroups"


class PodGroupProtection:
    """kube-controller-manager's PodGroup protection: a PodGroup being deleted loses its finalizer
    (and goes) once no pod that is not terminal (Succeeded/Failed) names it in
    ``spec.schedulingGroup``. Acts on the event loop after the write that told it."""

    def __init__(self, api: Api):
        self.api = api
        self.kind = api.kind(GROUP_VERSION, "podgroups")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.queued: set[str] = set()
        api.store.listen("pods", self._on_pod)
        api.store.listen(_PODGROUPS, self._on_group)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for entry in list(self.api.store.entries(_PODGROUPS)):
            if b'"deletionTimestamp"' in entry.raw:
                self._queue(entry.key)

    async def stop(self) -> None:
        self.loop = None

    def idle(self) -> bool:
        return not self.queued

    def _queue(self, key: str) -> None:
        if self.loop is None or key in self.queued:
            return
        self.queued.add(key)
        self.loop.call_soon(self._run, key)

    def _on_group(self, event: Event) -> None:
        if event.type != "DELETED" and b'"deletionTimestamp"' in event.new.raw:
            self._queue(event.new.key)

    def _on_pod(self, event: Event) -> None:
        raw = event.new.raw
        if b'"schedulingGroup"' not in raw:
            return
        group = ((event.new.decode().get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        if group:
            self._queue(f"{event.new.namespace}/{group}")

    def _run(self, key: str) -> None:
        self.queued.discard(key)
        entry = self.api.store.get(_PODGROUPS, key)
        if entry is None or b'"deletionTimestamp"' not in entry.raw:
            return
        namespace, name = key.split("/", 1)
        for pod in self.api.store.entries("pods"):
            if pod.namespace != namespace or b'"schedulingGroup"' not in pod.raw:
                continue
            obj = pod.decode()
            if ((obj.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") == name and \
                    (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                return  # still in use
        try:
            self.api.remove_finalizer(self.kind, entry.decode(), PROTECTION)
        except ApiError as exc:
            log.info("podgroup protection: %s: %s", key, exc)
