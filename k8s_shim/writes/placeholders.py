"""Gang scheduling in the shim: placeholder pods made, replaced, timed out and cleaned up, as
YuniKorn's shim does it (the scheduler's side is the core's ``gang`` module).

``GangHandling`` is a part of ``Shim`` (a mixin on its books): the shim calls its ``_gang_*``
hooks at the points named below, and it uses the shim's books, outbox and event helpers.

1. An application whose first pod carries valid task groups (``k8s_shim.translate.gang``) is added with
   its ``placeholderAsk`` (every group's ``minResource`` x ``minMember``), timeout and style, and
   both annotations as tags (``model.add_application``).
2. Once the core accepts it, its placeholder pods are created through the API (``placeholder_pod``):
   ``minMember`` per group, minus the placeholders already there (a restart finds them: they are
   re-attached, not made again); none when a real member already runs (YuniKorn skips the
   reservation then). Meanwhile the real members wait (``Hold.GANG``) until every placeholder is
   asked for, so that the core sees the gang before its members. A placeholder that cannot be
   created (the API refuses it, or keeps failing for ``create_deadline``) makes the application
   fall back to ordinary scheduling: the placeholders made are deleted.
3. Each placeholder pod is a task like any other: asked for with ``placeholder`` and its group's
   ``taskGroupName``, bound where the core places it.
4. The core replaces a placeholder by a real member in one step (``released``
   ``PLACEHOLDER_REPLACED`` and the member's allocation on that node): the shim deletes the
   placeholder and binds the member once the placeholder is gone, so the node never holds both.
5. A placeholder released ``TIMEOUT`` (the gang did not fit in time, or the app completed) is
   deleted. ``Resuming`` (Soft) leaves the real members to be scheduled as ordinary pods; ``Failing``
   or ``Failed`` with ``ResourceReservationTimeout`` (Hard) sets every waiting real member to phase
   ``Failed`` with that reason.
6. Deletions and status patches are retried until they are done (the pod gone counts as done).

Events are YuniKorn's, on the pod that made the application: reason ``GangScheduling``, action
``CreatingPlaceholders``, ``PlaceholderAllocated``, ``GangReservationComplete``,
``PlaceholderTimeOut``, ``GangSchedulingFailed``, ``PlaceholderCreateFailed``; on each real member
``TaskGroupMatch``; on a pod with a malformed annotation ``TaskGroupsError`` (task groups: its
application is scheduled without a gang), ``SchedulingPolicyParametersError`` (a default used) or
``TaskGroupNotFound`` (its group is not one of its application's: it is scheduled as an ordinary
pod) — the last two are Korral's, YuniKorn only logs those; and Korral's ``GangTopologyInvalid`` (a
topology that cannot be used: none is asked for) and ``GangTopologyConflict`` (groups naming
different topologies: the first is used).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass

from common import si_v18_pb2 as si
from k8s_shim.translate import model
from k8s_shim.writes.binding import BindJob
from k8s_shim.writes.events import NORMAL, WARNING
from k8s_shim.translate.gang import (ANNOTATION_PLACEHOLDER, ANNOTATION_POLICY, ANNOTATION_TASK_GROUP_NAME,
                              ANNOTATION_TASK_GROUPS, AppGang, TaskGroup, placeholder_name)
from k8s_shim.kube.kubeclient import ApiError, pod_path
from k8s_shim.translate.model import App, Hold, Task, Where
from k8s_shim.translate.pods import LABEL_APP_ID, LABEL_QUEUE, PodSpec

__all__ = ["GangHandling", "PlaceholderSettings", "placeholder_pod", "app_gang", "REASON",
           "RESERVATION_TIMEOUT"]

log = logging.getLogger(__name__)

REASON = "GangScheduling"
RESERVATION_TIMEOUT = "ResourceReservationTimeout"
_REPLACING = ("replacing allocationKey: ", "replacing uuid: ")  # SI v1.8's and the seed's wording
CONTAINER = "pause"


@dataclass(frozen=True, slots=True)
class PlaceholderSettings:
    """What placeholder pods are made of (``service.placeholder*`` in the configmap)."""

    image: str = "registry.k8s.io/pause:3.7"
    run_as_user: int = 0  # 0: not set
    run_as_group: int = 0
    fs_group: int = 0
    create_deadline: float = 30.0  # transient create errors are retried this long
    retry_cap: float = 5.0  # the longest wait between two tries of a deletion or status patch


def app_gang(spec: PodSpec) -> AppGang | None:
    """The gang of an application made by ``spec`` (None: the pod has no gang annotations). A
    placeholder passes on the owner references it was given; a real pod is the owner."""
    g = spec.gang
    if g is None or not (g.groups_raw or g.policy_raw):
        return None
    if g.placeholder:
        owners = spec.owners
    else:
        owners = ({"apiVersion": "v1", "kind": "Pod", "name": spec.name, "uid": spec.uid, "controller": False,
                   "blockOwnerDeletion": True},)
    return AppGang(g.groups, g.groups_raw, g.timeout_seconds, g.style, g.policy_raw, owners,
                   priority_class="" if g.placeholder else spec.priority_class, topology=g.topology)


def placeholder_pod(name: str, app: App, group: TaskGroup, settings: PlaceholderSettings, scheduler: str,
                    pull_secrets: list[str]) -> dict:
    """A placeholder pod of ``group`` (YuniKorn's shape: a pause container asking for the group's
    minResource, hardened, owned by the originator pod, the group's placement terms)."""
    gang = app.gang
    annotations = {**group.annotations, ANNOTATION_PLACEHOLDER: "true", ANNOTATION_TASK_GROUP_NAME: group.name}
    if gang.groups_raw:
        annotations[ANNOTATION_TASK_GROUPS] = gang.groups_raw
    if gang.policy_raw:
        annotations[ANNOTATION_POLICY] = gang.policy_raw
    security: dict = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for key, value in (("runAsUser", settings.run_as_user), ("runAsGroup", settings.run_as_group),
                       ("fsGroup", settings.fs_group)):
        if value:
            security[key] = value
    spec: dict = {
        "securityContext": security,
        "hostNetwork": False,
        "containers": [{
            "name": CONTAINER, "image": settings.image, "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": dict(group.min_resource), "limits": dict(group.min_resource)},
            "securityContext": {"privileged": False, "capabilities": {"drop": ["ALL"]},
                                "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
        }],
        "restartPolicy": "Never",
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
    }
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
    if group.node_selector:
        spec["nodeSelector"] = dict(group.node_selector)
    if group.tolerations:
        spec["tolerations"] = list(group.tolerations)
    if group.affinity:
        spec["affinity"] = group.affinity
    if group.topology_spread:
        spec["topologySpreadConstraints"] = list(group.topology_spread)
    if gang.priority_class:
        spec["priorityClassName"] = gang.priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": app.namespace,
                         "labels": {**group.labels, LABEL_APP_ID: app.app_id, LABEL_QUEUE: app.queue},
                         "annotations": annotations, "ownerReferences": [dict(o) for o in gang.owners]},
            "spec": spec}


def _placeholder(task: Task) -> bool:
    gang = task.spec.gang
    return gang is not None and gang.placeholder


class GangHandling:
    """The gang part of ``Shim`` (module doc). Expects the shim's ``apps``, ``tasks``, ``client``,
    ``settings`` (``scheduler_name``, ``placeholders``), ``_queue``, ``_sync``, ``_spawn``,
    ``_event``, ``_unplace`` and ``binder``."""

    def _gang_init(self) -> None:
        self.rng = random.Random()
        self.replacing: dict[str, str] = {}  # real member's uid -> the placeholder it replaces
        self.deferred: dict[str, BindJob] = {}  # placeholder uid -> the bind waiting for it to go
        self.cleaning: set[str] = set()  # uids of placeholder pods being deleted

    # ------------------------------------------------------------------ who is who
    def _gang_originator(self, app: App) -> PodSpec | None:
        """The pod gang events are about: the one that made the application (its placeholders'
        owner), else any real member, else any pod of the app."""
        owner = app.gang.owners[0].get("uid") if app.gang is not None and app.gang.owners else None
        for uid in (owner, app.originator):
            task = self.tasks.get(uid) if uid else None
            if task is not None:
                return task.spec
        tasks = [self.tasks[t] for t in app.tasks if t in self.tasks]
        real = [t for t in tasks if not _placeholder(t)]
        return (real or tasks)[0].spec if (real or tasks) else None

    def _gang_event(self, app: App, type_: str, action: str, note: str) -> None:
        spec = self._gang_originator(app)
        if spec is not None:
            self._event(spec, type_, REASON, note, action=action)

    def _gang_member(self, task: Task, app: App) -> None:
        """Set the task group ``task``'s ask names: a placeholder's own, a real member's when its
        application defines it (else an event naming the field; it is scheduled as an ordinary pod)."""
        g = task.spec.gang
        if g is None:
            return
        spec = task.spec
        if g.placeholder:  # ours: its annotations were its application's (told on the originator)
            task.group = g.group_name
            return
        groups_problems = [f"{f}: {m}" for f, m in g.problems if f.endswith(f"[{ANNOTATION_TASK_GROUPS}]")]
        policy_problems = [f"{f}: {m}" for f, m in g.problems if ANNOTATION_POLICY in f]
        if groups_problems:
            self._event(spec, WARNING, REASON, f"unable to get taskGroups for pod {spec.alias}, reason: "
                        f"{'; '.join(groups_problems)}", action="TaskGroupsError")
        if policy_problems:
            self._event(spec, WARNING, REASON, f"pod {spec.alias}: {'; '.join(policy_problems)}",
                        action="SchedulingPolicyParametersError")
        topology_problems = [f"{f}: {m}" for f, m in g.problems if ".topology" in f]
        if topology_problems:
            self._event(spec, WARNING, REASON, f"pod {spec.alias}: {'; '.join(topology_problems)}",
                        action="GangTopologyInvalid")
        if g.topology_conflict:
            self._event(spec, WARNING, REASON, f"pod {spec.alias}: {g.topology_conflict}",
                        action="GangTopologyConflict")
        for f, m in g.problems:
            log.warning("pod %s: %s: %s", spec.alias, f, m)
        if not g.group_name:
            return
        if app.gang is not None and app.gang.group(g.group_name) is not None:
            task.group = g.group_name
            if not task.node:  # (not again for a member running when the shim restarts)
                self._event(task.spec, NORMAL, REASON, f"Pod belongs to the taskGroup {g.group_name}, it will be "
                            "scheduled as a gang member", action="TaskGroupMatch")
            return
        self._event(task.spec, WARNING, REASON,
                    f"pod {task.spec.alias}: metadata.annotations[{ANNOTATION_TASK_GROUP_NAME}]: task group "
                    f"{g.group_name!r} is not defined in the task groups of application {app.app_id}: "
                    "the pod is scheduled as an ordinary pod", action="TaskGroupNotFound")

    def _gang_pending(self, app: App) -> bool:
        """True while the core has not seen the whole gang: its placeholders are being made, or
        one is known but not asked for or reported yet (e.g. its node is not registered yet).
        A real member that went first would be placed as an ordinary pod."""
        gang = app.gang
        if gang is None:
            return False
        return gang.reserving or any(t.where is Where.NOWHERE and t.hold is Hold.NONE
                                     for t in self._placeholders_of(app))

    def _gang_holds(self, task: Task, app: App) -> bool:
        """True (and the task held) while its gang is pending (``_gang_pending``)."""
        if task.group and not _placeholder(task) and self._gang_pending(app):
            task.hold = Hold.GANG
            return True
        return False

    def _gang_synced(self, task: Task, app: App) -> None:
        """``task`` was just asked for or reported: a placeholder may complete its gang's pending."""
        gang = app.gang
        if gang is None or not _placeholder(task):
            return
        if gang.reserving and not gang.creating and not self._short_of_placeholders(app):
            gang.reserving = False
        if not self._gang_pending(app):
            self._release_members(app)

    def _is_placeholder(self, uid: str) -> bool:
        return uid in self.tasks and _placeholder(self.tasks[uid])

    def _placeholders_of(self, app: App) -> list[Task]:
        return [self.tasks[t] for t in app.tasks if t in self.tasks and _placeholder(self.tasks[t])]

    # ------------------------------------------------------------------ making placeholders
    def _gang_reserve(self, app: App) -> None:
        """The core accepted ``app``: make the placeholders it lacks (module doc, 2)."""
        gang = app.gang
        if gang is None or not gang.groups or gang.made:
            return
        gang.made = True
        tasks = [self.tasks[t] for t in app.tasks if t in self.tasks]
        if any(t.node and not _placeholder(t) for t in tasks):
            log.info("application %s: a member already runs, no placeholders are made", app.app_id)
            return
        have: dict[str, int] = {}
        for t in tasks:
            if _placeholder(t) and t.group:
                have[t.group] = have.get(t.group, 0) + 1
        missing = [(g, g.min_member - have.get(g.name, 0)) for g in gang.groups if g.min_member > have.get(g.name, 0)]
        if have:
            log.info("application %s: %d placeholders found and re-attached", app.app_id, sum(have.values()))
        if not missing:
            return
        if not have:
            self._gang_event(app, NORMAL, "CreatingPlaceholders", f"Application {app.app_id} creating placeholders")
        gang.reserving = gang.creating = True
        self._spawn(self._make_placeholders(app, missing))

    async def _make_placeholders(self, app: App, missing: list[tuple[TaskGroup, int]]) -> None:
        settings = self.settings.placeholders
        pull_secrets = [s for s in app.tags.get(model.APP_TAG_IMAGE_PULL_SECRETS, "").split(",") if s]
        made: list[str] = []
        for group, count in missing:
            for _ in range(count):
                body = placeholder_pod(placeholder_name(app.app_id, group.name, self.rng), app, group, settings,
                                       self.settings.scheduler_name, pull_secrets)
                error = await self._create(body, settings.create_deadline)
                if error is not None:
                    self._gang_fall_back(app, made, f"placeholder of task group {group.name}: {error}")
                    return
                made.append(body["metadata"]["name"])
        log.info("application %s: %d placeholders created", app.app_id, len(made))
        app.gang.creating = False
        app.gang.reserving = self._short_of_placeholders(app)
        if not self._gang_pending(app):
            self._release_members(app)

    async def _create(self, body: dict, deadline: float) -> str | None:
        """Create the pod; None when created, else why not (transient errors retried until ``deadline``)."""
        namespace = body["metadata"]["namespace"]
        until = time.monotonic() + deadline
        wait = 0.2
        while True:
            try:
                await self.client.create_pod(namespace, body)
                return None
            except ApiError as exc:
                if exc.status == 409:  # a name taken (the nonce repeated): another name
                    body["metadata"]["name"] = body["metadata"]["name"][:-10] + placeholder_name("", "", self.rng)[-10:]
                    continue
                if not exc.transient or time.monotonic() + wait > until:
                    return str(exc)
                log.info("placeholder %s not created yet (%s): retrying", body["metadata"]["name"], exc)
            await asyncio.sleep(wait)
            wait = min(wait * 2, self.settings.placeholders.retry_cap)

    def _gang_fall_back(self, app: App, made: list[str], why: str) -> None:
        """A placeholder cannot be made: the application is scheduled as an ordinary one (YuniKorn)."""
        log.warning("application %s: %s; falling back to ordinary scheduling", app.app_id, why)
        self._gang_event(app, WARNING, "PlaceholderCreateFailed",
                         f"Application {app.app_id} fall back to normal scheduling: {why}")
        app.gang.reserving = app.gang.creating = False
        for task in self._placeholders_of(app):
            self._gang_delete(task)
        for name in made:  # those the informer has not shown yet too
            self._spawn(self._until_done(f"delete placeholder {app.namespace}/{name}",
                                         lambda n=name: self.client.delete(pod_path(app.namespace, n))))
        self._release_members(app)

    def _short_of_placeholders(self, app: App) -> bool:
        """True while the informer has not shown every placeholder the gang needs."""
        have: dict[str, int] = {}
        for t in self._placeholders_of(app):
            have[t.group] = have.get(t.group, 0) + 1
        return any(have.get(g.name, 0) < g.min_member for g in app.gang.groups)

    def _release_members(self, app: App) -> None:
        for uid in list(app.tasks):
            task = self.tasks.get(uid)
            if task is not None and task.hold is Hold.GANG:
                task.hold = Hold.NONE
                self._sync(task)

    # ------------------------------------------------------------------ the core's decisions
    def _gang_allocated(self, task: Task, app: App) -> None:
        """``task`` was just placed: a placeholder's progress is told on the originator."""
        if not _placeholder(task) or app.gang is None:
            return
        self._gang_event(app, NORMAL, "PlaceholderAllocated", f"Application {app.app_id} placeholder has been "
                         "allocated.")
        placeholders = self._placeholders_of(app)
        if not app.gang.complete and not self._short_of_placeholders(app) and \
                all(t.where is Where.PLACED for t in placeholders):
            app.gang.complete = True
            self._gang_event(app, NORMAL, "GangReservationComplete", f"Application {app.app_id} all placeholders are "
                             "allocated. Transitioning to running state.")

    def _gang_note_replacements(self, released) -> None:
        """Before an allocation response's new allocations: which of them replace a placeholder."""
        for r in released:
            if r.terminationType == si.PLACEHOLDER_REPLACED:
                prefix = next((p for p in _REPLACING if r.message.startswith(p)), None)
                if prefix is not None:
                    self.replacing[r.message[len(prefix):].strip()] = r.allocationKey

    def _gang_defer_bind(self, job: BindJob) -> bool:
        """True when ``job`` replaces a placeholder pod that still exists: bound once it is gone."""
        placeholder = self.replacing.pop(job.uid, None)
        if placeholder is None or placeholder not in self.tasks:
            return False
        self.deferred[placeholder] = job
        return True

    def _gang_released(self, task: Task, released) -> bool:
        """Handle the core's release of a gang task; False when it is not one."""
        kind = released.terminationType
        app = self.apps.get(task.spec.app_id)
        if _placeholder(task) and kind in (si.PLACEHOLDER_REPLACED, si.TIMEOUT):
            self._unplace(task)
            task.hold = Hold.GONE
            if kind == si.PLACEHOLDER_REPLACED:
                log.info("placeholder %s replaced (%s)", task.spec.alias, released.message)
                confirm = model.release(task.uid, task.spec.app_id, released.message)
                confirm.terminationType = si.PLACEHOLDER_REPLACED  # YuniKorn's confirmation (a no-op in Korral)
                self._queue("release", confirm)
            elif app is not None:
                self._gang_event(app, WARNING, "PlaceholderTimeOut",
                                 f"Application {app.app_id} placeholder has been timed out")
            self._gang_delete(task)
            return True
        if kind == si.TIMEOUT and task.where is Where.ASKED and app is not None and app.gang is not None:
            self._unplace(task)  # a Hard gang timed out: the application's failure says so (app update)
            task.hold = Hold.REJECTED
            return True
        return False

    def _gang_pod_gone(self, task: Task) -> None:
        """A pod went: a placeholder's deletion may release the bind of the member that replaced it."""
        self.cleaning.discard(task.uid)
        app = self.apps.get(task.spec.app_id)
        if app is not None and _placeholder(task) and app.gang is not None and not self._gang_pending(app):
            self._release_members(app)
        job = self.deferred.pop(task.uid, None)
        if job is None:
            return
        member = self.tasks.get(job.uid)
        if member is not None and member.where is Where.PLACED and member.attempt == job.attempt:
            self.binder.bind(job)

    def _gang_app_update(self, app: App, state: str, message: str) -> None:
        """The core moved a gang application: Resuming (Soft timeout) or Failing/Failed (Hard)."""
        if app.gang is None:
            return
        if state == "Resuming":
            self._gang_event(app, WARNING, "GangSchedulingFailed",
                             f"Application {app.app_id} resuming as non-gang application (SOFT)")
            return
        if state not in ("Failing", "Failed") or RESERVATION_TIMEOUT not in message:
            return
        for task in [self.tasks[t] for t in app.tasks if t in self.tasks]:
            if _placeholder(task):
                self._gang_delete(task)
                continue
            if task.node or task.hold is Hold.GONE:
                continue  # running (untouched), or failed already
            self._unplace(task)
            task.hold = Hold.REJECTED
            spec = task.spec
            self._event(spec, WARNING, "ApplicationFailed",
                        f"Application {app.app_id} scheduling failed, reason: {RESERVATION_TIMEOUT}")
            patch = {"status": {"phase": "Failed", "reason": RESERVATION_TIMEOUT,
                                "message": "Scheduling has timed out due to insufficient resources"}}
            task.hold = Hold.GONE
            self._spawn(self._until_done(f"fail pod {spec.alias}",
                                         lambda s=spec, p=patch: self.client.patch_status(s.namespace, s.name, p)))

    # ------------------------------------------------------------------ cleanup
    def _gang_delete(self, task: Task) -> None:
        """Delete a placeholder pod, retrying until it is gone."""
        if task.uid in self.cleaning:
            return
        self.cleaning.add(task.uid)
        spec = task.spec
        self._spawn(self._until_done(
            f"delete placeholder {spec.alias}",
            lambda: self.client.delete(pod_path(spec.namespace, spec.name), {"preconditions": {"uid": spec.uid}}),
            lambda: spec.uid in self.cleaning))

    async def _until_done(self, what: str, call, wanted=lambda: True) -> None:
        """Run ``call`` until it succeeds or its pod is gone (404, or 409: another pod of that name)."""
        wait = 0.2
        failures = 0
        while wanted():
            try:
                await call()
                return
            except ApiError as exc:
                if exc.status in (404, 409):
                    return
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("%s failed (%s, try %d): retrying", what, exc, failures)
            await asyncio.sleep(wait)
            wait = min(wait * 2, self.settings.placeholders.retry_cap)
