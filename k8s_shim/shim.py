"""The shim: Kubernetes' pods and nodes in, the scheduler's decisions out, on one event loop.

``Shim`` is an RM on ``si_client`` (SI v1.8). Informers feed it (``pod_changed``,
``foreign_changed``, ``node_changed``, ...); the scheduler's answers arrive through the client's
callbacks, which run on the same loop, so the books (``k8s_shim.translate.model``) need no lock.
Messages to the scheduler go through an ``Outbox`` (sent together at the end of the loop turn, in
order); volume claims are kept by ``Volumes``.

What happens to a pod (YuniKorn's shim's contract):

1. A pod naming our scheduler becomes a task of its application. The application is added first
   (``AddApplicationRequest``) and its tasks are asked for once the core accepts it (asks sent
   before the verdict could overtake it on another stream). A pod already on a node is reported
   as placed there (``application.create.force``), once its node is registered.
2. An allocation (``new``) is bound through ``pods/{name}/binding`` (``k8s_shim.writes.binding``);
   events ``Scheduled`` and ``PodBindSuccessful``. A refused bind releases the allocation, and
   the pod is asked for again after a backoff, with the refusing node excluded for a while
   (a ``metadata.name NotIn`` term in its required node affinity).
3. A pod that ends (terminated or deleted) releases its ask or allocation; ``TaskCompleted``.
4. Nodes are registered drained (``CREATE_DRAIN``) and opened (``DRAIN_TO_SCHEDULABLE``) once the
   core confirmed the allocations of the pods already running there, ours and foreign (Korral
   confirms a foreign allocation on a node not open yet); cordon drains, uncordon
   opens, deletion decommissions; pods on a node not known yet wait and are adopted when it is.
5. Pods of other schedulers are foreign allocations on their nodes.

After a lost connection the client re-registers and replays ``recoverable_state``: every
application, every node drained, every ask and placed allocation; nodes open again as above. With
node pools, a partition whose worker died is replayed alone (``recoverable_partition_state``).

With ``--partition-label`` each node pool is a partition (``k8s_shim.pools``): the informers
feed the pools, which hold back what belongs to no configured partition, and every message put
through ``_queue`` (and the replay) names its partition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import orjson

from common import si_pb2, si_v18_pb2 as si
from si_client import RecoverableState, RecoverySnapshot, ResourceManagerCallback, SchedulerAPI, StateDumpPlugin
from k8s_shim.translate import interpod, model
from k8s_shim.translate import nodes as nodemsg
from k8s_shim.writes.binding import Binder, BindJob, Outcome, Result
from k8s_shim.writes.claims import DeviceHandling
from k8s_shim.writes.conditions import SKIPPED, UNSCHEDULABLE, Explainer, condition_patch
from k8s_shim.writes.events import NORMAL, WARNING, EventRecorder, Regarding
from k8s_shim.kube.kubeclient import ApiError, KubeClient, pod_path
from k8s_shim.translate.model import App, AppState, Foreign, Hold, NodeEntry, NodePhase, Task, Where
from k8s_shim.translate.namespaces import NamespaceInfo, read_namespace
from k8s_shim.translate.nodes import NodeState
from k8s_shim.outbox import Outbox
from k8s_shim.writes.placeholders import GangHandling, PlaceholderSettings, app_gang
from k8s_shim.writes.podgroups import PodGroupHandling
from k8s_shim.translate.pods import PodState, Problem
from k8s_shim.pools import Pools, ShimHooks
from k8s_shim.translate.volumes import RWOP, Volumes
from k8s_shim.writes.prebind import Gate, PreBinder, combine
from k8s_shim.writes.volume_binding import NO_ROOM, NOT_BOUND_HERE, volume_gate

__all__ = ["Shim", "ShimSettings"]

log = logging.getLogger(__name__)

_STATE = si_pb2.UpdateContainerSchedulingStateRequest
_NODE_EVENTS = ("NodeAdded", "NodeRemoved")  # YuniKorn's shim posts a node's addition and removal only
# the core's APP events about a gang's topology domain (issue 35), told on the gang's pod
_GANG_TOPOLOGY_EVENTS = ("GangTopologyPlaced", "GangTopologyWaiting")
_RESIZE_REFUSED = "resize of allocation "  # how the core's rejection of an in-place resize begins
_RESIZE_REFUSED_EVENT = "AllocationResizeRefused"  # the core's event for it
_RESOURCE_TEXT = re.compile(r"Resource\(\{([^}]*)\}\)")  # a size in the core's texts: Resource({memory:1, vcore:2})


def _size_of(text: str) -> dict[str, int] | None:
    """A size as the core writes it (the inside of ``Resource({...})``); None if it is not one."""
    out = {}
    for item in text.split(", ") if text else ():
        name, _, value = item.rpartition(":")
        try:
            out[name] = int(value)
        except ValueError:
            return None
    return _nonzero(out)


def _nonzero(size: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in size.items() if v}


@dataclass(frozen=True, slots=True)
class ShimSettings:
    scheduler_name: str = "yunikorn"
    avoid_seconds: float = 60.0  # a node that refused a bind is excluded for the pod this long
    retry_cap: float = 60.0  # the longest wait before asking again after a refused bind
    bind_deadline: float = 60.0  # transient bind errors are retried this long
    placeholders: PlaceholderSettings = PlaceholderSettings()
    partition_label: str = ""  # a node label naming its partition (k8s_shim.pools); "": all in default
    volume_bind_timeout: float = 600.0  # service.volumeBindTimeout: a pod's volumes must be bound this soon


def _pod_ref(spec) -> Regarding:
    ref = spec.ref
    if ref is None:  # a pod has a few events: its reference is made once
        ref = spec.ref = Regarding("Pod", spec.name, spec.namespace, spec.uid)
    return ref


class Shim(GangHandling, PodGroupHandling, DeviceHandling, ResourceManagerCallback, RecoverableState, StateDumpPlugin):
    def __init__(self, client: KubeClient, settings: ShimSettings, rm_id: str, events: EventRecorder,
                 explainer: Explainer | None = None, clock=time.monotonic) -> None:
        self.client, self.settings, self.rm_id = client, settings, rm_id
        self.events = events
        self.explainer = explainer
        self.clock = clock
        self.out = Outbox()
        self.binder = Binder(client, self._bind_outcome, deadline=settings.bind_deadline)
        self.apps: dict[str, App] = {}
        self.tasks: dict[str, Task] = {}
        self.nodes: dict[str, NodeEntry] = {}
        self.foreign: dict[str, Foreign] = {}
        self.node_pods: dict[str, set[str]] = {}  # node -> uids of our and foreign pods on it
        self.namespaces: dict[str, NamespaceInfo] = {}
        self.priority_classes: dict[str, bool] = {}
        self.volumes = Volumes()
        self.prebinder = PreBinder(self._prebound, self._prebind_failed)
        self._devices_init()
        self._background: set[asyncio.Task] = set()
        self._reading_namespaces: set[str] = set()
        self._by_labels: set[str] = set()  # pods whose affinity terms select namespaces by label
        self._gang_init()
        self._pg_init()
        self.pools = Pools(self, ShimHooks(self.node_changed, self.pod_changed, self._submit_app, self._event),
                           settings.partition_label)
        # replays asked by the scheduler: whole (registrations) and of one partition (its worker died)
        self.replays: dict[str, Any] = {"registrations": 0, "partitions": {}}

    # ------------------------------------------------------------------ sending
    @property
    def api(self) -> SchedulerAPI | None:
        return self.out.api

    @api.setter
    def api(self, api: SchedulerAPI | None) -> None:
        self.out.api = api

    def _queue(self, kind: str, message: Any) -> None:
        self.out.put(kind, self.pools.stamp(kind, message) if self.pools.enabled else message)

    def flush(self) -> None:
        self.out.flush()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _event(self, spec, type_: str, reason: str, note: str, **fold) -> None:
        self.events.post(spec.ref or _pod_ref(spec), type_, reason, note, **fold)

    # ------------------------------------------------------------------ our pods
    def pod_changed(self, old: PodState | None, new: PodState | None) -> None:
        if new is None:
            self._pod_gone(old)
            return
        task = self.tasks.get(new.uid)
        if task is None:
            if self._pg_admit(new):  # (not while its PodGroup is missing)
                self._pod_new(new)
            return
        prev = task.pod
        task.follow(new)
        if new.spec is not prev.spec and new.spec.resource != prev.spec.resource:
            self._resized(task, prev.spec.resource)
        elif task.booked is not None and new.mark != prev.mark:
            self._resized(task, task.booked)  # the kubelet moved on with a size the core refused: try again
        if new.node and new.node != task.node:
            self._seen_on_node(task, new.node)
        elif new.node and not task.bound:
            task.bound = True
        elif prev.gates and not new.gates and task.hold is Hold.GATES:
            task.hold = Hold.NONE
            self._sync(task)

    def _resized(self, task: Task, before: dict[str, int]) -> None:
        """The pod's size changed (an in-place resize): a placed pod's allocation is sent again with
        its node and the new size (the core books it, or refuses a growth its node has no room
        for: ``_rejected``), a pending pod's ask is replaced by one of the new size; a task the
        core does not hold is told with its new size when it is."""
        size = task.spec.resource
        if task.where is Where.PLACED:
            core = task.booked if task.booked is not None else before
            task.booked = None
            if size == core:
                return  # back to what the core books (e.g. a refused resize undone by the kubelet)
            task.sent = size
            app = self.apps.get(task.spec.app_id)
            if app is not None:
                self._queue("alloc", model.placed(task, app, self._allow_self(task)))
        elif task.where is Where.ASKED:
            task.where, task.sent = Where.NOWHERE, size  # the same key again replaces the pending ask (or, if
            self._sync(task)  # the core placed it meanwhile, resizes that allocation)

    def _pod_new(self, pod: PodState) -> None:
        spec = pod.spec
        task = self.tasks[pod.uid] = Task(pod)
        for problem in spec.problems:
            self._report_problem(spec, problem)
        if pod.node:
            task.node, task.bound = pod.node, True
            self.node_pods.setdefault(pod.node, set()).add(pod.uid)
        elif spec.blocked is not None:
            task.hold = Hold.INVALID
        elif pod.gates:
            task.hold = Hold.GATES
            self._event(spec, NORMAL, "Scheduling", f"waiting for scheduling gates: {','.join(pod.gates)}")
        self.volumes.use(pod.uid, spec.namespace, spec.claims)
        if pod.node and spec.claims:
            self._rwop_taken(task)
        self._set_constraints(task)
        task.affinity = self._resolve_affinity(spec)
        app = self._app_for(task)
        self._gang_member(task, app)
        self._sync(task)

    def _report_problem(self, spec, problem: Problem) -> None:
        if problem.blocking:
            self._event(spec, WARNING, "FailedScheduling",
                        f"pod {spec.alias} cannot be scheduled: {problem} (it waits; a pod's spec cannot change: "
                        "recreate it with the field fixed)")
        else:
            self._event(spec, WARNING, "Scheduling", f"pod {spec.alias}: {problem}")
        log.warning("pod %s: %s", spec.alias, problem)

    def _app_for(self, task: Task) -> App:
        """The task's application, added to the core when new. Its tags come from its namespace's
        annotations: a namespace the informer has not shown yet is read first (the namespace's
        watch may lag behind the pods')."""
        spec = task.spec
        app = self.apps.get(spec.app_id)
        if app is not None:
            app.tasks.add(task.uid)
            return app
        app = self.apps[spec.app_id] = App(spec.app_id, spec.namespace, spec.queue, spec.user, spec.groups, {},
                                           state=AppState.NAMESPACE, originator=spec.uid, created=spec.created,
                                           gang=app_gang(spec))
        app.tasks.add(task.uid)
        if spec.namespace in self.namespaces:
            self._submit_app(app)
        elif spec.namespace not in self._reading_namespaces:
            self._reading_namespaces.add(spec.namespace)
            self._spawn(self._read_namespace(spec.namespace))
        return app

    async def _read_namespace(self, name: str) -> None:
        try:
            info = read_namespace(await self.client.get(f"/api/v1/namespaces/{name}"))
        except ApiError as exc:
            log.warning("namespace %s not read (%s): its applications are added without its annotations", name, exc)
            info = NamespaceInfo(name, {})
        self._reading_namespaces.discard(name)
        if name not in self.namespaces:
            self.namespace_changed(None, info)
        self._submit_waiting_apps(name)

    def _submit_waiting_apps(self, namespace: str) -> None:
        for app in list(self.apps.values()):
            if app.state is AppState.NAMESPACE and app.namespace == namespace:
                self._submit_app(app)

    def _submit_app(self, app: App) -> None:
        ns = self.namespaces.get(app.namespace) or NamespaceInfo(app.namespace, {})
        first = self.tasks.get(app.originator) or next((self.tasks[t] for t in app.tasks if t in self.tasks), None)
        if first is not None:
            app.tags = model.app_tags(first.spec, ns.tags)
            for problem in ns.problems:
                self._event(first.spec, WARNING, "Scheduling",
                            f"namespace {app.namespace}: {problem} (for application {app.app_id})")
        if not self.pools.admit(app, first):
            return  # its partition is not in the configuration: added when it is
        app.state = AppState.NEW
        force = any(self.tasks[t].node for t in app.tasks if t in self.tasks)
        self._queue("app", model.add_application(app, force))

    def _allow_self(self, task: Task) -> bool:
        spec = task.spec
        if spec.allow_preemption is not None:
            return spec.allow_preemption
        return self.priority_classes.get(spec.priority_class, True)

    def _sync(self, task: Task) -> None:
        """Tell the core about ``task`` if it is not there and may be (see the module doc)."""
        if task.where is not Where.NOWHERE:
            return
        app = self.apps.get(task.spec.app_id)
        if app is None or app.state is not AppState.ACCEPTED:
            return
        if task.node:
            entry = self.nodes.get(task.node)
            if entry is None or entry.phase is not NodePhase.REGISTERED:
                return  # adopted when its node is registered
            self._queue("alloc", model.placed(task, app, self._allow_self(task)))
            task.where, task.booked, task.sent = Where.PLACED, None, None  # booked as it is now
            if not entry.enabled:
                entry.awaiting.add(task.uid)
            self._gang_synced(task, app)
            return
        if task.hold is not Hold.NONE or self._gang_holds(task, app):
            return
        now = self.clock()
        task.avoid = {n: until for n, until in task.avoid.items() if until > now}
        task.excluded = {n: e for n, e in task.excluded.items() if e[0] > now}
        self._queue("alloc", model.ask(task, app, self._allow_self(task), list(task.avoid)))
        task.where = Where.ASKED
        self._gang_synced(task, app)
        if not task.announced:
            task.announced = True
            self._event(task.spec, NORMAL, "Scheduling", f"{task.spec.alias} is queued and waiting for allocation",
                        hold=True)  # superseded by Scheduled when placed at once

    def _pod_gone(self, old: PodState) -> None:
        self._pg_forget(old)
        task = self.tasks.pop(old.uid, None)
        if task is None:
            return
        spec = task.spec
        app = self.apps.get(spec.app_id)
        if app is not None:
            app.tasks.discard(task.uid)
        if task.where is not Where.NOWHERE:
            self._queue("release", model.release(task.uid, spec.app_id, f"pod {spec.alias} ended"))
            self._unplace(task)
        self._gang_pod_gone(task)
        self.prebinder.cancel(task.uid)
        self._by_labels.discard(task.uid)
        if task.node:
            self.node_pods.get(task.node, set()).discard(task.uid)
        self._recheck(self.volumes.release(task.uid, spec.namespace, spec.claims))  # a ReadWriteOncePod claim is free
        self._free_devices(task)  # its claims' reservations go (k8s_shim.writes.claims)
        if task.bound:
            self._event(spec, NORMAL, "TaskCompleted", f"Task {spec.alias} is completed")

    def _unplace(self, task: Task) -> None:
        """``task`` is no longer in the core (or never will be as it was)."""
        self.prebinder.cancel(task.uid)  # writes before a binding that will not be
        if task.where is Where.PLACED:
            self._counted(task.node, task.uid)
        task.where = Where.NOWHERE

    def _seen_on_node(self, task: Task, node: str) -> None:
        """The API server says the pod is on ``node`` (bound by us, by someone else, or created so)."""
        if task.where is Where.PLACED and task.node == node:
            task.bound = True
            return
        if task.where is Where.PLACED:  # the core placed it elsewhere: that allocation is void
            self._queue("release", model.release(task.uid, task.spec.app_id,
                                                 f"pod {task.spec.alias} was bound to {node} by another party"))
            self._unplace(task)
        elif task.where is Where.ASKED:
            task.where = Where.NOWHERE  # a placed allocation replaces the pending ask of its key
        if task.node:
            self.node_pods.get(task.node, set()).discard(task.uid)
        task.node, task.bound, task.hold = node, True, Hold.NONE
        task.attempt += 1
        self.node_pods.setdefault(node, set()).add(task.uid)
        self._sync(task)

    # ------------------------------------------------------------------ constraints (volumes too)
    def _set_constraints(self, task: Task) -> bool:
        """Recompute what the ask carries as what it cannot meet now (its volume claims', its
        resource claims'); True if changed (node requirements too)."""
        spec = task.spec
        device_waits, devices_changed = self._plan_devices(task)  # DRA: k8s_shim.writes.claims
        constraints = tuple(self.volumes.waits(spec.namespace, spec.claims) + device_waits)
        changed = self._set_volume_needs(task) | devices_changed
        if constraints == task.constraints:
            return changed
        task.constraints = constraints
        if constraints and not task.node:
            self._event(spec, WARNING, "FailedScheduling",
                        f"pod {spec.alias} is not placed: Korral does not evaluate or cannot meet "
                        f"{'; '.join(constraints)} (it waits)")
        return True

    def _set_volume_needs(self, task: Task) -> bool:
        """The node requirements of the pod's volumes and the CSI volumes it attaches; True if changed."""
        spec = task.spec
        if not spec.claims and not task.requirements.get("volumes") and not task.counted:
            return False
        required = self.volumes.requirements(spec.namespace, spec.claims, self._rwop_in_use(task))
        counted = self.volumes.attach_counts(spec.namespace, spec.claims)
        if required == task.requirements.get("volumes", []) and counted == task.counted:
            return False
        if required:
            task.requirements["volumes"] = required
        else:
            task.requirements.pop("volumes", None)
        task.counted = counted
        return True

    def _rwop_in_use(self, task: Task) -> set[str]:
        """The pod's ReadWriteOncePod claims another pod of ours is placed with."""
        out = set()
        for name in task.spec.claims:
            key = f"{task.spec.namespace}/{name}"
            claim = self.volumes.claims.get(key)
            if claim is not None and RWOP in claim.access_modes and any(
                    uid != task.uid and uid in self.tasks and self.tasks[uid].node
                    for uid in self.volumes.users.get(key, ())):
                out.add(key)
        return out

    def _recheck(self, uids: set[str]) -> None:
        for uid in uids:
            task = self.tasks.get(uid)
            if task is None or task.node or not self._set_constraints(task):
                continue
            if task.where is Where.ASKED:  # the same key again replaces the pending ask
                task.where = Where.NOWHERE
            self._sync(task)

    def claim_changed(self, old, new) -> None:
        self._recheck(self.volumes.claim_changed(old, new))
        self.prebinder.check()

    def storage_class_changed(self, old, new) -> None:
        self._recheck(self.volumes.storage_class_changed(old, new))

    def volume_changed(self, old, new) -> None:
        self._recheck(self.volumes.volume_changed(old, new))

    def csinode_changed(self, old, new) -> None:
        """A node's CSI volume limits are counted node resources (``attachable-volumes-csi-<driver>``,
        ``Volumes.node_limits``)."""
        everyone, name = self.volumes.csinode_changed(old, new)
        for entry in list(self.nodes.values()) if everyone else [self.nodes[name]] if name in self.nodes else []:
            self.node_changed(entry.state, entry.state)
        if everyone:  # a driver newly limited (or no longer): the pods' counts change
            users = {uid for uids in self.volumes.users.values() for uid in uids}
            for uid in users:  # the pods running that the core does not hold yet (at start) are reported with them
                task = self.tasks.get(uid)
                if task is not None and task.node and task.where is Where.NOWHERE:
                    task.counted = self.volumes.attach_counts(task.spec.namespace, task.spec.claims)
            self._recheck(users)

    def _with_volume_limits(self, node: NodeState) -> NodeState:
        limits = self.volumes.node_limits(node.name)
        kept = {k: v for k, v in node.allocatable.items() if not k.startswith("attachable-volumes-csi-")}
        if not limits and len(kept) == len(node.allocatable):
            return node
        return dataclasses.replace(node, allocatable={**kept, **limits})

    # ------------------------------------------------------------------ writes before the binding
    def _start_binding(self, task: Task, job: BindJob) -> None:
        """Bind ``task``'s pod, after the writes and the wait its volumes and its resource claims
        need (one ``Gate`` of both: it waits for both, and a failure of either undoes both)."""
        spec = task.spec
        if self._rwop_in_use(task):  # placed together with another pod of its claim
            self._place_again(job, "a ReadWriteOncePod claim it uses is in use by another pod", "")
            return
        choice = self._choose_devices(task, job)  # before the volumes' plan, which books what it picks
        if choice is None:
            self._place_again(job, f"its resource claims cannot be allocated on node {job.node} (their devices are "
                                   "no longer free there)", "")
            return
        entry = self.nodes.get(job.node)
        gates: list[Gate] = []  # each concern's writes and wait before the binding
        volumes = volume_gate(self.volumes, self.client, job, spec.claims, entry.state.labels if entry else {},
                              self.settings.volume_bind_timeout, self._spawn)
        if volumes is NO_ROOM:
            self._place_again(job, "one of its volume claims cannot have its volume there any more", NOT_BOUND_HERE)
            return
        if volumes is not None:
            gates.append(volumes)
        devices = self._device_gate(task, job, choice)  # DRA: k8s_shim.writes.claims
        if devices is not None:
            gates.append(devices)
        gate = combine(gates)
        if gate is not None:
            self.prebinder.start(gate)
        elif not self._gang_defer_bind(job):
            self.binder.bind(job)
        self._rwop_taken(task)

    def _rwop_taken(self, task: Task) -> None:
        """``task`` is placed: the other pods of its ReadWriteOncePod claims now wait."""
        ns = task.spec.namespace
        for name in task.spec.claims:
            key = f"{ns}/{name}"
            claim = self.volumes.claims.get(key)
            if claim is not None and RWOP in claim.access_modes:
                self._recheck(set(self.volumes.users.get(key, ())) - {task.uid})

    def _prebound(self, gate: Gate) -> None:
        job = gate.job
        task = self.tasks.get(job.uid)
        if task is None or task.attempt != job.attempt or task.where is not Where.PLACED:
            return
        if not self._gang_defer_bind(job):
            self.binder.bind(job)

    def _prebind_failed(self, gate: Gate, why: str, node_at_fault: bool) -> None:
        self._place_again(gate.job, why, gate.exclusion if node_at_fault else "")

    def _place_again(self, job: BindJob, why: str, exclusion: str) -> None:
        """The pod cannot be bound where the core placed it: the allocation goes back to the core
        and the pod is asked for again, without that node for a while if ``exclusion`` (the reason
        the node is excluded for) is given."""
        task = self.tasks.get(job.uid)
        if task is None or task.attempt != job.attempt or task.where is not Where.PLACED or task.node != job.node:
            return
        spec = task.spec
        self._queue("release", model.release(task.uid, spec.app_id, f"pre-binding on {job.node} failed: {why}"))
        self._unplace(task)
        self.node_pods.get(task.node, set()).discard(task.uid)
        task.node = ""
        note = f"pod {spec.alias} not bound to node {job.node}: {why}; the allocation is released and the pod " \
               "asked for again"
        if exclusion:
            task.excluded[job.node] = (self.clock() + self.settings.avoid_seconds, exclusion)
            note += f" without node {job.node} for {self.settings.avoid_seconds:g}s"
        self._event(spec, WARNING, "FailedScheduling", note)
        self._set_constraints(task)
        # asked for again on a later turn, as after a refused bind: the release must reach the core first
        task.retries += 1
        task.hold = Hold.RETRY
        delay = min(self.settings.retry_cap, 2.0 ** (task.retries - 1))
        asyncio.get_running_loop().call_later(delay, self._retry, task.uid, task.attempt)

    def namespace_changed(self, old: NamespaceInfo | None, new: NamespaceInfo | None) -> None:
        if new is None:
            self.namespaces.pop(old.name, None)
        else:
            self.namespaces[new.name] = new
            if old is None:
                self._submit_waiting_apps(new.name)
        if self._by_labels and (old is None or new is None or old.labels != new.labels):
            self._namespaces_relabelled()

    # ------------------------------------------------------------------ affinity terms selecting namespaces
    def _resolve_affinity(self, spec) -> str:
        """TAG_POD_AFFINITY of a pod whose terms select namespaces by label, resolved against the
        namespaces' labels now; "" for any other pod (its tag was made with its spec)."""
        if spec.interpod is None or not spec.interpod.by_labels:
            return ""
        self._by_labels.add(spec.uid)
        return interpod.affinity_tag(spec.interpod, spec.namespace,
                                     {name: ns.labels for name, ns in self.namespaces.items()})

    def _namespaces_relabelled(self) -> None:
        """A namespace came, went or changed its labels: a pending ask whose terms select
        namespaces by label and now resolve differently is sent again (the same key replaces it).
        A placed or foreign pod's allocation keeps the namespaces it was reported with until it is
        reported again (a replay); the books hold the new ones for that."""
        for uid in list(self._by_labels):
            holder = self.tasks.get(uid) or self.foreign.get(uid)
            if holder is None:
                self._by_labels.discard(uid)
                continue
            tag = self._resolve_affinity(holder.spec)
            if tag == holder.affinity:
                continue
            holder.affinity = tag
            if isinstance(holder, Task) and holder.where is Where.ASKED:
                holder.where = Where.NOWHERE
                self._sync(holder)

    def priority_class_changed(self, old: tuple[str, bool] | None, new: tuple[str, bool] | None) -> None:
        if new is None:
            self.priority_classes.pop(old[0], None)
        else:
            self.priority_classes[new[0]] = new[1]

    # ------------------------------------------------------------------ foreign pods
    def foreign_changed(self, old: PodState | None, new: PodState | None) -> None:
        if new is None:
            pod = self.foreign.pop(old.uid, None)
            self._by_labels.discard(old.uid)
            if pod is not None:
                self.node_pods.get(pod.node, set()).discard(old.uid)
                self._counted(pod.node, old.uid)
                if pod.reported:
                    self._queue("release", model.foreign_release(old.uid))
            return
        pod = self.foreign.get(new.uid)
        if pod is not None:  # a pod's node does not change; its size does with an in-place resize
            if new.spec.resource != pod.spec.resource:
                pod.spec = new.spec
                if pod.reported:  # the same key again replaces it on its node
                    self._queue("alloc", model.foreign_allocation(pod))
            return
        pod = self.foreign[new.uid] = Foreign(new.spec, new.node)
        pod.affinity = self._resolve_affinity(new.spec)
        self.node_pods.setdefault(new.node, set()).add(new.uid)
        self._report_foreign(pod)

    def _report_foreign(self, pod: Foreign) -> bool:
        """Report ``pod`` if its node is registered and it is not yet; True if it was now."""
        entry = self.nodes.get(pod.node)
        if not pod.reported and entry is not None and entry.phase is NodePhase.REGISTERED:
            self._queue("alloc", model.foreign_allocation(pod))
            pod.reported = True
            return True
        return False

    def _counted(self, node: str, uid: str) -> None:
        """The core counts (or no longer needs to count) pod ``uid`` on ``node``: one less to await."""
        entry = self.nodes.get(node)
        if entry is not None and uid in entry.awaiting:
            entry.awaiting.discard(uid)
            self._maybe_enable(entry)

    # ------------------------------------------------------------------ nodes
    def node_changed(self, old: NodeState | None, new: NodeState | None) -> None:
        if new is not None:
            new = self._with_volume_limits(new)
        if new is None:
            entry = self.nodes.pop(old.name, None)
            if entry is None:
                return
            if entry.phase is not NodePhase.REJECTED:
                self._queue("node", nodemsg.action(old.name, si.NodeInfo.DECOMISSION))
            self.events.post(Regarding("Node", old.name, uid=old.uid), NORMAL, "NodeDeleted",
                             f"node {old.name} is deleted from the scheduler")
            for uid in self.node_pods.get(old.name, ()):  # the core releases them with the node
                if uid in self.tasks:
                    self.tasks[uid].where = Where.NOWHERE
                elif uid in self.foreign:
                    self.foreign[uid].reported = False
            return
        entry = self.nodes.get(new.name)
        if entry is None:
            self.nodes[new.name] = NodeEntry(new)
            for problem in new.problems:
                self.events.post(Regarding("Node", new.name, uid=new.uid), WARNING, "NodeRejected",
                                 f"node {new.name}: {problem}")
            self._queue("node", nodemsg.create_drained(new))
            if self.device_users:  # a node more where their claims may be had
                self._recheck(set(self.device_users))
            return
        before, entry.state = entry.state, new
        if entry.phase is NodePhase.REJECTED:  # registered again with what changed
            if new != before:
                entry.phase = NodePhase.REGISTERING
                self._queue("node", nodemsg.create_drained(new))
            return
        change = nodemsg.update(new, before)
        if change is not None:
            self._queue("node", change)
        if new.unschedulable and not before.unschedulable and entry.enabled:
            self._queue("node", nodemsg.action(new.name, si.NodeInfo.DRAIN_NODE))
            entry.enabled = False
        elif before.unschedulable and not new.unschedulable:
            self._maybe_enable(entry)

    def _maybe_enable(self, entry: NodeEntry) -> None:
        if entry.phase is NodePhase.REGISTERED and not entry.enabled and not entry.awaiting \
                and not entry.state.unschedulable:
            self._queue("node", nodemsg.action(entry.name, si.NodeInfo.DRAIN_TO_SCHEDULABLE))
            entry.enabled = True

    async def update_node(self, response) -> None:
        for accepted in response.accepted:
            entry = self.nodes.get(accepted.nodeID)
            if entry is None or entry.phase is not NodePhase.REGISTERING:
                continue
            entry.phase = NodePhase.REGISTERED
            self.events.post(Regarding("Node", entry.name, uid=entry.state.uid), NORMAL, "NodeAccepted",
                             f"node {entry.name} is accepted by the scheduler")
            for uid in list(self.node_pods.get(entry.name, ())):
                if uid in self.tasks:
                    self._sync(self.tasks[uid])
                elif uid in self.foreign and self._report_foreign(self.foreign[uid]) and not entry.enabled:
                    # the node opens once the core confirms it: the allocation and the opening
                    # travel on different streams, so sending one first does not order them
                    entry.awaiting.add(uid)
            self._maybe_enable(entry)
        for rejected in response.rejected:
            entry = self.nodes.get(rejected.nodeID)
            if entry is not None:
                entry.phase = NodePhase.REJECTED
                self.events.post(Regarding("Node", entry.name, uid=entry.state.uid), WARNING, "NodeRejected",
                                 f"node {entry.name} is rejected by the scheduler: {rejected.reason}")

    # ------------------------------------------------------------------ applications
    async def update_application(self, response) -> None:
        for accepted in response.accepted:
            self._app_accepted(accepted.applicationID)
        for rejected in response.rejected:
            if "already existed" in rejected.reason:  # sent twice: the core has it
                self._app_accepted(rejected.applicationID)
            else:
                self._app_rejected(rejected.applicationID, rejected.reason)
        for updated in response.updated:
            app = self.apps.get(updated.applicationID)
            if app is not None:
                self._gang_app_update(app, updated.state, updated.message)
            if app is None or updated.state != "Completed":
                continue
            if not app.tasks:
                del self.apps[app.app_id]
            else:  # pods arrived while it completed: the core needs it again
                app.state = AppState.NEW
                force = any(self.tasks[t].node for t in app.tasks if t in self.tasks)
                self._queue("app", model.add_application(app, force))

    def _app_accepted(self, app_id: str) -> None:
        app = self.apps.get(app_id)
        if app is None or app.state is AppState.ACCEPTED:
            return
        app.state = AppState.ACCEPTED
        self._gang_reserve(app)
        self._pg_accepted(app)
        for uid in sorted(app.tasks, key=lambda t: not self._is_placeholder(t)):  # a gang's placeholders first
            if uid in self.tasks:
                self._sync(self.tasks[uid])

    def _app_rejected(self, app_id: str, reason: str) -> None:
        """YuniKorn fails the application's pods that are not running: phase Failed, reason
        ApplicationRejected. Nothing already bound is touched."""
        app = self.apps.pop(app_id, None)
        if app is None:
            return
        log.warning("application %s rejected: %s", app_id, reason)
        for uid in app.tasks:
            task = self.tasks.get(uid)
            if task is None or task.node:
                continue
            task.hold, task.where = Hold.REJECTED, Where.NOWHERE
            self._event(task.spec, WARNING, "ApplicationFailed",
                        f"Application {app_id} scheduling failed, reason: ApplicationRejected: {reason}")
            patch = {"status": {"phase": "Failed", "reason": "ApplicationRejected", "message": reason}}
            self._spawn(self._patch_status(task.spec, patch))

    async def _patch_status(self, spec, patch: dict) -> None:
        try:
            await self.client.patch_status(spec.namespace, spec.name, patch)
        except ApiError as exc:
            log.info("status of pod %s not updated: %s", spec.alias, exc)

    # ------------------------------------------------------------------ allocations
    async def update_allocation(self, response) -> None:
        self._gang_note_replacements(response.released)
        for alloc in response.new:
            self._allocated(alloc)
        for released in response.released:
            self._released(released)
        for rejected in response.rejectedAllocations:
            self._rejected(rejected)

    def _allocated(self, alloc) -> None:
        foreign = self.foreign.get(alloc.allocationKey)
        if foreign is not None:  # Korral confirms a foreign pod reported on a node not open yet
            self._counted(foreign.node, alloc.allocationKey)
            return
        task = self.tasks.get(alloc.allocationKey)
        if task is None or task.where is Where.NOWHERE:
            if alloc.applicationID:  # the pod went (or its ask was withdrawn) meanwhile; none: a foreign
                # pod's confirmation after it went (its release is sent)
                self._queue("release", model.release(alloc.allocationKey, alloc.applicationID,
                                                     "the pod no longer waits for this allocation"))
            return
        if task.where is Where.PLACED:  # the core confirms a pod we reported on its node
            self._counted(task.node, task.uid)
            return
        task.where, task.node, task.bound = Where.PLACED, alloc.nodeID, False
        task.attempt += 1
        self.node_pods.setdefault(task.node, set()).add(task.uid)
        spec = task.spec
        self._event(spec, NORMAL, "Scheduled", f"Successfully assigned {spec.alias} to node {task.node}",
                    hold=True, supersedes=("Scheduling",))
        app = self.apps.get(spec.app_id)
        if app is not None:
            self._gang_allocated(task, app)
            self._pg_allocated(app)
        self._start_binding(task, BindJob(task.uid, spec.namespace, spec.name, task.node, task.attempt))

    def _bind_outcome(self, result: Result) -> None:
        job = result.job
        task = self.tasks.get(job.uid)
        if task is None or task.attempt != job.attempt or task.where is not Where.PLACED or task.node != job.node:
            return  # the pod went, or moved on since
        spec = task.spec
        if result.outcome is Outcome.BOUND:
            task.bound = True
            self._event(spec, NORMAL, "PodBindSuccessful", f"Pod {spec.alias} is successfully bound to node {job.node}",
                        fold_into=("Scheduled",))  # said by the Scheduled event still held
            return
        if result.outcome is Outcome.ELSEWHERE and result.node:
            self._seen_on_node(task, result.node)
            return
        self._queue("release", model.release(task.uid, spec.app_id, f"bind to {job.node} failed: {result.error}"))
        self._unplace(task)
        self.node_pods.get(task.node, set()).discard(task.uid)
        task.node = ""
        if result.outcome is not Outcome.REFUSED:  # gone, or bound somewhere unknown: the informer will say
            task.hold = Hold.GONE
            return
        self._event(spec, WARNING, "PodBindFailure",
                    f"bind pod to node failed, name: {spec.alias}, {result.error}")
        if spec.resource_claims:
            self._give_back_devices(task)  # DRA: allocated for that node (k8s_shim.writes.claims)
        task.avoid[job.node] = self.clock() + self.settings.avoid_seconds
        task.retries += 1
        task.hold = Hold.RETRY
        delay = min(self.settings.retry_cap, 2.0 ** (task.retries - 1))
        asyncio.get_running_loop().call_later(delay, self._retry, task.uid, task.attempt)

    def _retry(self, uid: str, attempt: int) -> None:
        task = self.tasks.get(uid)
        if task is not None and task.hold is Hold.RETRY and task.attempt == attempt:
            task.hold = Hold.NONE
            self._sync(task)

    def _released(self, released) -> None:
        task = self.tasks.get(released.allocationKey)
        if task is None or task.where is Where.NOWHERE:
            return  # the echo of our own release
        if self._gang_released(task, released):
            return
        was = task.where
        self._unplace(task)
        if was is Where.PLACED and released.terminationType in (si.PREEMPTED_BY_SCHEDULER, si.TIMEOUT):
            spec = task.spec
            task.hold = Hold.GONE
            self._event(spec, WARNING, "Preempted", f"{spec.alias} is released by the scheduler "
                        f"({si.TerminationType.Name(released.terminationType)}): {released.message}")
            self._spawn(self._delete_pod(spec))
        elif was is Where.PLACED:
            self._sync(task)  # the core let go of a running pod (e.g. its app was removed): report it again
        else:
            task.hold = Hold.REJECTED
            self._event(task.spec, WARNING, "TaskRejected", f"Task {task.spec.alias} ask released by the scheduler "
                        f"({si.TerminationType.Name(released.terminationType)}): {released.message}")

    async def _delete_pod(self, spec) -> None:
        try:
            await self.client.delete(pod_path(spec.namespace, spec.name), {"preconditions": {"uid": spec.uid}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s not deleted: %s", spec.alias, exc)

    def _rejected(self, rejected) -> None:
        key, reason = rejected.allocationKey, rejected.reason
        if key in self.foreign:
            self.foreign[key].reported = False  # its node is gone in the core; re-reported when it is back
            self._counted(self.foreign[key].node, key)
            return
        task = self.tasks.get(key)
        if task is None:
            return
        if reason.startswith(_RESIZE_REFUSED) and task.where is Where.PLACED:
            # the pod keeps running; the core's event says why on the pod. The books take the size
            # the core keeps, unless a later resize was sent since (its own outcome decides)
            sizes = [_size_of(found) for found in _RESOURCE_TEXT.findall(reason)]
            if len(sizes) >= 2 and sizes[-1] is not None and task.sent is not None \
                    and sizes[0] == _nonzero(task.sent):
                task.booked = sizes[-1]
            log.info("pod %s: %s", task.spec.alias, reason)
            return
        self._unplace(task)
        if "failed to find application" in reason:
            app = self.apps.get(task.spec.app_id)
            if app is not None and app.state is AppState.ACCEPTED:
                app.state = AppState.NEW
                self._queue("app", model.add_application(app, force=bool(task.node)))
            elif app is None:
                self._app_for(task)
            return
        if "failed to find node" in reason:
            return  # adopted when its node is registered
        task.hold = Hold.REJECTED
        self._event(task.spec, WARNING, "TaskRejected",
                    f"Task {task.spec.alias} is rejected by the scheduler: {reason}")

    # ------------------------------------------------------------------ notices
    async def update_container_scheduling_state(self, request) -> None:
        task = self.tasks.get(request.allocationKey)
        if task is None or task.where is not Where.ASKED:
            return
        if request.state == _STATE.FAILED:
            reason = UNSCHEDULABLE
            note = f"Task {task.spec.alias} is pending for the requested resources become available"
        elif request.state == _STATE.SKIPPED:
            reason = SKIPPED
            note = f"Task {task.spec.alias} is skipped from scheduling because the queue quota has been exceed"
        else:
            return
        self._spawn(self._write_condition(task, reason, request.reason, note))

    async def _write_condition(self, task: Task, reason: str, core_reason: str, note: str) -> None:
        message = core_reason
        if reason == UNSCHEDULABLE and self.explainer is not None:
            message = await self.explainer.explain(task.spec.app_id, task.uid,
                                                   self.pools.app_partition.get(task.spec.app_id, "default")) \
                or core_reason
        if task.constraints:
            message = f"{message} Unevaluated constraints: {'; '.join(task.constraints)}."
        if reason == UNSCHEDULABLE:
            self._pg_unschedulable(task, message)
        if (reason, message) == task.condition or task.where is not Where.ASKED:
            return
        current = task.pod.conditions.get("PodScheduled")
        task.condition = (reason, message)
        if current == ("False", reason, message):
            return
        self._event(task.spec, NORMAL, "PodUnschedulable", note)
        await self._patch_status(task.spec, condition_patch(reason, message, time.time()))

    async def send_event(self, records) -> None:
        for record in records:
            if record.type == si_pb2.EventRecord.REQUEST:
                task = self.tasks.get(record.objectID)
                if task is None:
                    continue
                if record.reason == _RESIZE_REFUSED_EVENT:  # Korral's own: a warning the user should see
                    self._event(task.spec, WARNING, _RESIZE_REFUSED_EVENT, record.message)
                else:
                    self._event(task.spec, NORMAL, "Informational", record.message)
            elif record.type == si_pb2.EventRecord.APP and record.reason in _GANG_TOPOLOGY_EVENTS:
                app = self.apps.get(record.objectID)
                if app is not None:
                    self._gang_event(app, NORMAL, record.reason, record.message)
            elif record.type == si_pb2.EventRecord.NODE and record.reason in _NODE_EVENTS \
                    and record.objectID in self.nodes:
                self.events.post(Regarding("Node", record.objectID), NORMAL, "Informational", record.message)

    # ------------------------------------------------------------------ recovery and dump
    async def recoverable_state(self) -> RecoverySnapshot:
        """Everything the core must hold, for a (re-)registration's replay; nodes come back drained
        and open again once their running pods are confirmed."""
        self.out.clear()  # covered by the snapshot
        self.replays["registrations"] += 1
        return self._snapshot(None)

    @property
    def partition_resync(self) -> bool:
        """Declared with node pools only: without them the one partition is the whole RM."""
        return self.pools.enabled

    async def recoverable_partition_state(self, partition: str) -> RecoverySnapshot:
        """``partition`` alone (its worker died; si_client's per-partition resync): its nodes, its
        applications, their pods and the foreign pods on its nodes, as ``recoverable_state``. The
        other partitions are not touched: their queued messages, bindings and writes before a
        binding go on. The event loop is the lock the hook's contract asks for."""
        pools = self.pools
        self.out.drop(lambda kind, message: pools.partition_of(kind, message) == partition)  # covered
        self.replays["partitions"][partition] = self.replays["partitions"].get(partition, 0) + 1
        log.warning("partition %s lost its worker: replaying it alone", partition)
        return self._snapshot(partition)

    def _snapshot(self, partition: str | None) -> RecoverySnapshot:
        """The replay of ``partition`` (None: of everything), resetting the books it covers."""
        node_in, app_in = self.pools.node_in, self.pools.app_in
        snapshot = RecoverySnapshot()
        for name, entry in self.nodes.items():
            if not node_in(name, partition):
                continue
            entry.enabled, entry.awaiting = False, set()
            if entry.phase is not NodePhase.REJECTED:
                entry.phase = NodePhase.REGISTERING
                snapshot.nodes.append(nodemsg.create_drained(entry.state))
        for app_id in [a for a, app in self.apps.items() if not app.tasks and app_in(a, partition)]:
            del self.apps[app_id]
        for pod in self.foreign.values():
            if not node_in(pod.node, partition):
                continue
            entry = self.nodes.get(pod.node)
            pod.reported = entry is not None and entry.phase is NodePhase.REGISTERING
            if pod.reported:
                snapshot.allocations.append(model.foreign_allocation(pod))
                entry.awaiting.add(pod.spec.uid)
        for app in self.apps.values():
            if app.state in (AppState.NAMESPACE, AppState.PARTITION) or not app_in(app.app_id, partition):
                continue  # not added yet (it is when its namespace is read, or its partition configured)
            tasks = sorted((self.tasks[t] for t in app.tasks if t in self.tasks),
                           key=lambda t: not self._is_placeholder(t.uid))  # a gang's placeholders first
            snapshot.applications.append(model.add_application(app, force=any(t.node for t in tasks)))
            for task in tasks:
                task.where = Where.NOWHERE
                if app.state is not AppState.ACCEPTED:
                    continue
                entry = self.nodes.get(task.node) if task.node else None
                if entry is not None and entry.phase is NodePhase.REGISTERING:
                    snapshot.allocations.append(model.placed(task, app, self._allow_self(task)))
                    task.where, task.booked, task.sent = Where.PLACED, None, None
                    entry.awaiting.add(task.uid)
                elif not task.node and task.hold is Hold.NONE and not self._gang_holds(task, app):
                    snapshot.allocations.append(model.ask(task, app, self._allow_self(task), list(task.avoid)))
                    task.where = Where.ASKED
        if self.pools.enabled:
            self.pools.stamp_snapshot(snapshot)
        log.info("replaying %d applications, %d nodes, %d allocations and asks to the scheduler%s",
                 len(snapshot.applications), len(snapshot.nodes), len(snapshot.allocations),
                 "" if partition is None else f" (partition {partition})")
        return snapshot

    def connection_lost(self, reason: str) -> None:
        log.warning("lost the scheduler (%s): reconnecting and replaying", reason)

    def connection_restored(self) -> None:
        log.info("scheduler connection restored and state replayed")

    async def get_state_dump(self) -> str:
        return orjson.dumps(self.dump()).decode()

    def dump(self) -> dict:
        """The shim's books (``model.books``), its counters and its partitions (``Pools.dump``)."""
        return {"rmID": self.rm_id, **model.books(self.nodes, self.node_pods, self.tasks, self.foreign, self.apps),
                "priorityClasses": self.priority_classes,  # name -> its pods may be preempted
                "events": self.events.counters(), "bindsInFlight": self.binder.in_flight,
                "waitingBeforeBind": len(self.prebinder.gates),  # pods whose volumes or claims are being written
                "claimsBeingWritten": len(self.devices.pending),  # DRA claims chosen, not yet seen allocated
                "apiFlow": self.client.counters(),  # 429s, retries, waits for the rate limit's tokens
                "replays": self.replays,
                **({"pools": self.pools.dump()} if self.pools.enabled else {})}
