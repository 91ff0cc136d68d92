"""Kubernetes 1.36's PodGroups in the shim (``k8s_shim.translate.podgroups`` reads them):
``PodGroupHandling`` is a part of ``Shim`` (a mixin on its books, like ``GangHandling``).

- Where the API server serves ``scheduling.k8s.io/v1alpha2`` (``pg_served``, set from
  discovery), an informer feeds ``pod_group_changed``. Elsewhere ``spec.schedulingGroup`` is
  not read (a server without the feature gate drops the field anyway).
- A new pod of ours naming a PodGroup (``_pg_admit``): a gang's member joins its application
  (``translate.podgroups.join``), the placeholder machinery makes it all-or-nothing; a basic
  group's member is a plain pod. A pod whose PodGroup does not exist yet waits outside the books:
  it gets ``PodScheduled=False`` with reason ``SchedulingGated`` and a ``Scheduling`` event
  saying which PodGroup it waits for (kube-scheduler gates such a pod without a word, by design:
  Korral says why), and is taken in when the PodGroup appears.
- The PodGroup's ``PodGroupScheduled`` condition, written as kube-scheduler's known reasons have
  it, through the status subresource with the shim's (flow-controlled, leader-fenced) client:
  ``False``/``Unschedulable`` once the gang's application is accepted and while its members do
  not all fit (the message the pods' conditions carry, when the core says why), ``True``/``Scheduled``
  when ``minCount`` members (or placeholders) are placed.
"""

from __future__ import annotations

import logging
import time

from k8s_shim.translate.model import App, Task, Where
from k8s_shim.translate.pods import PodState
from k8s_shim.translate.podgroups import SCHEDULED, PodGroupInfo, app_id_of, join, key_of, scheduled_condition
from k8s_shim.writes.conditions import condition_patch, stamp
from k8s_shim.writes.events import NORMAL

__all__ = ["PodGroupHandling", "GATED"]

log = logging.getLogger(__name__)
GATED = "SchedulingGated"  # the pod condition's reason while its PodGroup is missing


class PodGroupHandling:
    """The PodGroup part of ``Shim`` (module doc). Expects the shim's ``apps``, ``tasks``,
    ``client``, ``pod_changed``, ``_event``, ``_spawn``, ``_patch_status`` and ``_until_done``."""

    def _pg_init(self) -> None:
        self.pg_served = False  # the API serves scheduling.k8s.io/v1alpha2 (k8s_shim.main)
        self.pod_groups: dict[str, PodGroupInfo] = {}  # namespace/name -> the PodGroup
        self.pg_waiting: dict[str, dict[str, PodState]] = {}  # missing PodGroup -> its pods, by uid
        self.pg_apps: dict[str, str] = {}  # a gang PodGroup's application -> the PodGroup
        self.pg_written: dict[str, tuple[str, str, str]] = {}  # PodGroup -> the condition last written

    # ------------------------------------------------------------------ the informer
    def pod_group_changed(self, old: PodGroupInfo | None, new: PodGroupInfo | None) -> None:
        if new is None:
            if old is not None:
                self.pod_groups.pop(old.key, None)
                self.pg_written.pop(old.key, None)
            return
        self.pod_groups[new.key] = new
        for pod in (self.pg_waiting.pop(new.key, None) or {}).values():
            log.info("pod %s: its PodGroup %s is here", pod.spec.alias, new.key)
            self.pod_changed(None, pod)

    # ------------------------------------------------------------------ its pods
    def _pg_admit(self, pod: PodState) -> bool:
        """A pod new to the books: False while it waits for its PodGroup (module doc)."""
        spec = pod.spec
        if not self.pg_served or not spec.pod_group or not spec.ours or (spec.gang is not None and
                                                                         spec.gang.placeholder):
            return True
        key = key_of(spec.namespace, spec.pod_group)
        if spec.app_id == app_id_of(spec.namespace, spec.pod_group) and spec.gang is not None and \
                spec.gang.group_name == spec.pod_group:
            return True  # joined when first seen (the informer keeps the spec it read)
        group = self.pod_groups.get(key)
        if group is None and not pod.node:
            waiting = self.pg_waiting.setdefault(key, {})
            if pod.uid not in waiting:
                note = f'pod {spec.alias} waits for its PodGroup "{key}", which does not exist yet'
                self._event(spec, NORMAL, "Scheduling", note)
                self._spawn(self._patch_status(spec, condition_patch(GATED, note, time.time())))
            waiting[pod.uid] = pod
            return False
        if group is not None and group.min_count:
            join(spec, group)
            self.pg_apps[spec.app_id] = key
        return True

    def _pg_forget(self, pod: PodState) -> None:
        """A pod went: it no longer waits for its PodGroup."""
        if pod.spec.pod_group:
            key = key_of(pod.spec.namespace, pod.spec.pod_group)
            waiting = self.pg_waiting.get(key)
            if waiting is not None and waiting.pop(pod.uid, None) is not None and not waiting:
                del self.pg_waiting[key]

    # ------------------------------------------------------------------ its condition
    def _pg_waiting_for(self, app_id: str) -> PodGroupInfo | None:
        """The gang PodGroup of application ``app_id`` while it is not scheduled yet (None otherwise)."""
        key = self.pg_apps.get(app_id)
        group = self.pod_groups.get(key) if key else None
        if group is None or (self.pg_written.get(key) or group.scheduled or ("",))[0] == "True":
            return None
        return group

    def _pg_accepted(self, app: App) -> None:
        """A gang PodGroup's application was accepted: it waits until its members are placed."""
        group = self._pg_waiting_for(app.app_id)
        if group is not None:
            self._pg_write(group, "False", "Unschedulable",
                           f"waiting for all {group.min_count} pods of the gang to be placed")

    def _pg_unschedulable(self, task: Task, message: str) -> None:
        """The core says a member (or placeholder) of a gang PodGroup does not fit: the PodGroup says why."""
        group = self._pg_waiting_for(task.spec.app_id)
        if group is not None:
            self._pg_write(group, "False", "Unschedulable",
                           f"the gang's {group.min_count} pods do not all fit: {message}")

    def _pg_allocated(self, app: App) -> None:
        """An allocation of ``app``: its PodGroup is scheduled once minCount of its pods are placed."""
        group = self._pg_waiting_for(app.app_id)
        if group is None:
            return
        placed = sum(1 for t in app.tasks if t in self.tasks and self.tasks[t].where is Where.PLACED)
        if (app.gang is not None and app.gang.complete) or placed >= group.min_count:
            self._pg_write(group, "True", "Scheduled", f"{group.min_count} pods of the gang are placed")

    def _pg_write(self, group: PodGroupInfo, status: str, reason: str, message: str) -> None:
        wanted = (status, reason, message)
        if (self.pg_written.get(group.key) or group.scheduled) == wanted:
            return
        self.pg_written[group.key] = wanted
        patch = scheduled_condition(group, status, reason, message, stamp(time.time()))
        self._spawn(self._until_done(f"condition {SCHEDULED} of PodGroup {group.key}",
                                     lambda: self.client.patch_pod_group_status(group.namespace, group.name, patch)))
