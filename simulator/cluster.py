"""The simulated cluster: a hollow-node RM that plays a ``Plan`` against a scheduler.

``SimCluster`` is the RM's whole truth (nodes, apps, tasks, running
allocations) and implements the client's callback, replay hook and state dump.
It never sleeps and reads time only through the ``clock`` it is given; the
runner calls ``tick()`` to let time pass. One re-entrant lock guards the
state; sends happen under it, which is what ``RecoverableState`` asks for.

Life of a task: planned -> asked (the app's asks go out in one request right
after the app is accepted) -> running (allocation received, checked by the
``Validator``) -> done (its duration elapsed; released ``STOPPED_BY_RM``).
An app whose tasks are all over is removed from the scheduler.

A gang app behaves as YuniKorn's k8s shim: one task group named after its template;
its placeholder asks go out first, its real asks (``taskGroupName`` set) once every
placeholder is allocated, or when the scheduler falls back (Soft: Resuming). A
placeholder released ``PLACEHOLDER_REPLACED`` is confirmed back with the same type, as
the shim does when it deletes the placeholder pod. A task preempted
(``PREEMPTED_BY_SCHEDULER``) is re-submitted under a new key (``<key>-r1``...) as a
controller would re-create its pod, or ends the app as Failed (``on_preempted: fail``).

The RM speaks either SI revision: ``wire`` (``simulator.wire``) holds what differs.
"""

from __future__ import annotations

import heapq
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from common import si_pb2
from common.constants import APP_TAG_NAMESPACE, TAG_APP_CREATION_TIME, TAG_APP_TASK_GROUPS, TAG_NAMESPACE, TAG_POD_NAME
from common.si_resource import resource_from_si
from si_client import RecoverableState, RecoverySnapshot, ResourceManagerCallback, StateDumpPlugin
from simulator.checks import LIMIT_KINDS, Owner, Validator, config_limits
from simulator.stats import Stats, queue_label
from simulator.wire import Wire, wire_for
from simulator.workload import AppPlan, Plan

__all__ = ["SimCluster"]

# Requests are split so that none nears gRPC's default 4 MiB message limit.
NODES_PER_REQUEST = 1000
ASKS_PER_REQUEST = 5000
# the preemptor's key in a PREEMPTED_BY_SCHEDULER release (queue and daemon-set preemption)
_PREEMPTOR = re.compile(r"(?:for ask|daemon set ask:) (\S+)")


class Sender(Protocol):
    """Takes requests of the cluster's SI revision (``SchedulerAPI`` does)."""

    def update_allocation(self, request: Any) -> None: ...
    def update_application(self, request: Any) -> None: ...
    def update_node(self, request: Any) -> None: ...


@dataclass(slots=True)
class _Task:
    key: str
    app: "_App"
    duration: float
    origin: str = ""  # the task's first key: a re-submission keeps it
    attempt: int = 0
    placeholder: bool = False
    # tasks: planned | asked | running | done | rejected | killed | preempted | failed
    # placeholders: asked | running | replaced | timedout | released | rejected
    state: str = "planned"
    asked_at: float = 0.0
    alloc: Any = None  # its Allocation (of the cluster's SI revision) while it runs


@dataclass(slots=True)
class _App:
    plan: AppPlan
    tasks: list[_Task] = field(default_factory=list)
    state: str = "planned"  # planned | submitted | accepted | removed | rejected
    outcome: str = ""  # Completed | Rejected | Failed (set when it is over)
    asks_sent: bool = False
    open_tasks: int = 0
    scheduler_state: str = ""
    reason: str = ""
    placeholders: list[_Task] = field(default_factory=list)
    reals_sent: bool = False  # a gang's real asks went out
    ph_asked: int = 0  # placeholders asked and not yet allocated, rejected or timed out
    failed: bool = False  # a task was lost for good (preempted with on_preempted: fail)
    submitted_wall: float = 0.0  # unix seconds: the creationTime tag
    _owner: Owner | None = None

    @property
    def owner(self) -> Owner:
        if self._owner is None:  # built once: it is read for every allocation and release
            t = self.plan.template
            self._owner = Owner(self.plan.app_id, t.user, t.groups)
        return self._owner

    @property
    def task_group(self) -> str:
        return self.plan.template.name

    @property
    def queue(self) -> tuple[str, str]:
        return (self.plan.template.partition, self.plan.template.queue)


class SimCluster(ResourceManagerCallback, RecoverableState, StateDumpPlugin):
    def __init__(self, plan: Plan, sender: Sender, clock: Callable[[], float], validator: Validator,
                 stats: Stats, wire: Wire | None = None) -> None:
        self.wire = wire or wire_for("seed")
        self.pb = self.wire.pb
        self.plan = plan
        self.sender = sender
        self.clock = clock
        self.validator = validator
        self.stats = stats
        self.served = None  # a ServedConfig (simulator.served) when the sim reads the served config
        self.lock = threading.RLock()
        self._node_plans = {n.node_id: n for n in plan.nodes}
        self.started = False  # nodes are part of the replayed state once start() reported them
        self.t0 = 0.0
        self.nodes_accepted: set[str] = set()
        self.nodes_rejected: dict[str, str] = {}
        self.apps: dict[str, _App] = {}
        self.tasks: dict[str, _Task] = {}
        self.placeholders: dict[str, _Task] = {}
        for ap in plan.apps:
            app = _App(ap)
            app.tasks = [_Task(t.key, app, t.duration, origin=t.key) for t in ap.tasks]
            app.placeholders = [_Task(f"{ap.app_id}-ph{j:04d}", app, 0.0, placeholder=True)
                                for j in range(ap.members)]
            app.open_tasks = len(app.tasks)
            self.apps[ap.app_id] = app
            for t in app.tasks:
                self.tasks[t.key] = t
            for ph in app.placeholders:
                self.placeholders[ph.key] = ph
        self._next_app = 0
        self._ends: list[tuple[float, str]] = []  # (end time, task key) of running tasks
        self._removable: list[_App] = []
        # v1.8: key -> node of the allocations the last replay recovered. The scheduler echoes
        # each in `new`; the task may have finished since the snapshot, so its state cannot tell.
        self._recovered: dict[str, str] = {}

    # ------------------------------------------------------------------ driving
    def start(self) -> None:
        """Register every node (CREATE); time zero of the plan is now."""
        with self.lock:
            self.t0 = self.clock()
            self.started = True
            infos = [self._node_info(n.node_id) for n in self.plan.nodes]
            for i in range(0, len(infos), NODES_PER_REQUEST):
                self.sender.update_node(self.pb.NodeRequest(nodes=infos[i : i + NODES_PER_REQUEST]))
            foreign = self._foreign_allocations()
            if foreign:
                self.sender.update_allocation(self.wire.asks_request(foreign))

    def tick(self) -> None:
        """Submit the apps that are due, finish the tasks whose time is up, remove finished apps."""
        with self.lock:
            now = self.clock()
            elapsed = now - self.t0
            new = []
            while self._next_app < len(self.plan.apps) and self.plan.apps[self._next_app].submit_at <= elapsed:
                app = self.apps[self.plan.apps[self._next_app].app_id]
                self._next_app += 1
                app.state, app.submitted_wall = "submitted", time.time()
                new.append(self._app_request(app))
            if new:
                self.sender.update_application(self.pb.ApplicationRequest(new=new))
            releases = []
            while self._ends and self._ends[0][0] <= now:
                _, key = heapq.heappop(self._ends)
                task = self.tasks[key]
                if task.state != "running":
                    continue
                releases.append(self.wire.release(
                    task.alloc, key=key, app_id=task.app.plan.app_id, term=si_pb2.STOPPED_BY_RM,
                    partition=task.alloc.partitionName or task.app.plan.template.partition,
                    message="task completed"))
                self._unbook(task)
                self._close(task, "done")
            if releases:
                self.sender.update_allocation(self.wire.releases_request(releases))
            self._remove_finished()
            self.stats.sample(now, self)

    @property
    def finished(self) -> bool:
        with self.lock:
            return self._next_app >= len(self.plan.apps) and all(a.outcome for a in self.apps.values())

    # ------------------------------------------------------------------ callbacks
    def update_node(self, response: Any) -> None:
        with self.lock:
            self.nodes_accepted.update(n.nodeID for n in response.accepted)
            for n in response.rejected:
                self.nodes_rejected[n.nodeID] = n.reason

    def update_application(self, response: Any) -> None:
        with self.lock:
            asks = []
            for a in response.accepted:
                app = self.apps.get(a.applicationID)
                if app is None or app.state != "submitted":
                    continue
                app.state = "accepted"
                if not app.asks_sent:
                    app.asks_sent = True
                    asks += self._send_asks(app.placeholders or app.tasks)
                    app.reals_sent = not app.placeholders
            for r in response.rejected:
                app = self.apps.get(r.applicationID)
                if app is not None and not app.outcome:
                    app.state, app.outcome, app.reason = "rejected", "Rejected", r.reason
                    for task in app.tasks:
                        if task.state in ("planned", "asked"):
                            self._close(task, "rejected")
            for u in response.updated:
                app = self.apps.get(u.applicationID)
                if app is None:
                    continue
                app.scheduler_state = u.state
                if u.state == "Resuming" and not app.reals_sent:  # Soft gang: scheduled normally now
                    app.reals_sent = True
                    asks += self._send_asks(app.tasks)
                elif u.state in ("Failing", "Failed"):  # Hard gang timeout, partition removed, ...
                    self._fail_unsent(app)
            self._send_in_chunks(asks)

    def update_allocation(self, response: Any) -> None:
        """Replacements first (they free the placeholders' room for the real allocations of
        the same response), then new allocations, then every other release."""
        with self.lock:
            now = self.clock()
            wire = self.wire
            asks: list = []
            replaced = [r for r in response.released if r.terminationType == si_pb2.PLACEHOLDER_REPLACED]
            if replaced:
                self._replaced(replaced, {wire.alloc_id(a): a for a in response.new}, now)
            for alloc in response.new:
                if wire.v18 and self._recovered.get(alloc.allocationKey) == alloc.nodeID:
                    del self._recovered[alloc.allocationKey]
                    continue  # v1.8 confirms the allocations the RM recovered: not a new decision
                task = self._task(alloc.allocationKey)
                app = self.apps.get(alloc.applicationID)
                queue = app.queue if app is not None else None
                res = resource_from_si(alloc.resourcePerAlloc)
                owner = app.owner if app is not None else None
                found = self.validator.allocated_to(alloc.allocationKey, alloc.nodeID, queue, res, now, owner)
                if self.served is not None and any(v.kind in LIMIT_KINDS for v in found) and self.served.confirm(
                        now, lambda text: self.limits_changed(text, ((queue, res, owner),) if queue and owner else ())):
                    # the scheduler serves another config since the checks last read it: the one it used
                    found = self.validator.recheck(found, alloc.allocationKey, queue, owner, now)
                self.stats.violation(found)
                if task is None or task.state != "asked":
                    continue  # reported by the validator; nothing to run
                task.state, task.alloc = "running", alloc
                if task.placeholder:
                    self.stats.placeholder("allocated")
                    gang = task.app
                    gang.ph_asked -= 1
                    if not gang.reals_sent and gang.ph_asked == 0:
                        gang.reals_sent = True  # the whole gang is placed: the real tasks go
                        asks += self._send_asks(gang.tasks)
                    continue
                self.stats.allocated(now, now - task.asked_at, queue_label(*task.app.queue))
                heapq.heappush(self._ends, (now + task.duration, task.key))
            for rel in response.released:
                if rel.terminationType == si_pb2.PLACEHOLDER_REPLACED:
                    continue
                task = self._task(rel.allocationKey)
                if task is not None and task.state == "asked" and wire.v18:
                    self._ask_released(task)  # v1.8: an ask the scheduler gave up
                    continue
                if task is None or task.state != "running" or wire.alloc_id(task.alloc) != wire.release_id(rel):
                    continue  # the echo of our own release, or of an allocation already over
                self._unbook(task)
                if rel.terminationType == si_pb2.PREEMPTED_BY_SCHEDULER:
                    asks += self._preempted(task, rel.message, now)
                elif task.placeholder:
                    task.state = "timedout" if rel.terminationType == si_pb2.TIMEOUT else "released"
                    self.stats.placeholder(task.state)
                else:
                    self._close(task, "killed")
            for rej in wire.rejected(response):
                task = self._task(rej.allocationKey)
                if task is not None and task.state == "asked":
                    self.validator.ask_removed(task.key)
                    self._close(task, "rejected")
                    task.app.reason = rej.reason
            for rel in wire.released_asks(response):
                task = self._task(rel.allocationKey)
                if task is not None and task.state == "asked":
                    self._ask_released(task)
            self._send_in_chunks(asks)

    def _ask_released(self, task: _Task) -> None:
        """The scheduler gave up a task's ask (a placeholder's timeout, its app going)."""
        self.validator.ask_removed(task.key)
        self._close(task, "timedout" if task.placeholder else "killed")
        if task.placeholder:
            self.stats.placeholder("timedout")

    def _replaced(self, releases: list, new: dict[str, Any], now: float) -> None:
        """Check and unbook placeholders swapped for real allocations, and confirm each swap."""
        wire = self.wire
        confirms = []
        for rel in releases:
            ph = self.placeholders.get(rel.allocationKey)
            if ph is None or ph.state != "running" or wire.alloc_id(ph.alloc) != wire.release_id(rel):
                continue
            real_id = wire.replacing(rel.message)
            real = new.get(real_id)
            self.stats.violation(self.validator.placeholder_replaced(
                ph.key, ph.alloc.nodeID, real_id, (real.allocationKey, real.nodeID) if real else None, now))
            self._unbook(ph)
            ph.state = "replaced"
            self.stats.placeholder("replaced")
            confirms.append(wire.release(ph.alloc, key=ph.key, app_id=ph.app.plan.app_id,
                                         partition=ph.app.plan.template.partition,
                                         term=si_pb2.PLACEHOLDER_REPLACED, message="placeholder replaced"))
        if confirms:
            self.sender.update_allocation(wire.releases_request(confirms))

    def _preempted(self, task: _Task, message: str, now: float) -> list:
        """A victim of preemption: check it, then re-submit it (or fail its app)."""
        match = _PREEMPTOR.search(message)
        preemptor = self._task(match.group(1)) if match else None
        preemptor_origin = (preemptor.origin or preemptor.key) if preemptor else (match.group(1) if match else None)
        t = task.app.plan.template
        self.stats.violation(self.validator.preempted(
            task.key, task.origin or task.key, preemptor_origin, opted_out=t.preempt_self is False,
            placeholder=task.placeholder, now=now))
        self.stats.preempted(queue_label(*task.app.queue))
        if task.placeholder:
            task.state = "released"
            return []
        asks = []
        if t.on_preempted == "resubmit":
            again = _Task(f"{task.origin}-r{task.attempt + 1}", task.app, task.duration, origin=task.origin,
                          attempt=task.attempt + 1)
            task.app.tasks.append(again)
            task.app.open_tasks += 1
            self.tasks[again.key] = again
            asks = self._send_asks([again])
        else:
            task.app.failed = True
        self._close(task, "preempted")
        return asks

    # ------------------------------------------------------------------ replay hook, dump
    def recoverable_state(self) -> RecoverySnapshot:
        with self.lock:
            snap = RecoverySnapshot()
            live = [a for a in self.apps.values() if a.state in ("submitted", "accepted")]
            snap.applications = [self._app_request(a) for a in live]
            by_node: dict[str, list] = {}
            recovered: dict[str, str] = {}
            for app in live:
                for task in app.placeholders + app.tasks:
                    if task.state == "running" and self.wire.v18:  # v1.8: work of either kind in allocations
                        snap.allocations.append(self._existing(task))
                        recovered[task.key] = task.alloc.nodeID
                    elif task.state == "running":
                        by_node.setdefault(task.alloc.nodeID, []).append(self._existing(task))
                    elif task.state == "asked":
                        (snap.allocations if self.wire.v18 else snap.asks).append(self._ask(task))
            if self.started:
                snap.allocations.extend(self._foreign_allocations())
            for n in self.plan.nodes if self.started else ():
                info = self._node_info(n.node_id)
                if n.node_id in by_node:
                    info.existingAllocations.extend(by_node[n.node_id])
                snap.nodes.append(info)
            self._recovered = recovered
            return snap

    def get_state_dump(self) -> str:
        with self.lock:
            states: dict[str, int] = {}
            for t in self.tasks.values():
                states[t.state] = states.get(t.state, 0) + 1
            return json.dumps({
                "workload": self.plan.workload.name, "seed": self.plan.seed,
                "nodes": {"planned": len(self.plan.nodes), "accepted": len(self.nodes_accepted),
                          "rejected": self.nodes_rejected},
                "apps": {a.plan.app_id: {"rm": a.outcome or a.state, "scheduler": a.scheduler_state}
                         for a in self.apps.values()},
                "tasks": states, "violations": len(self.validator.violations),
            })

    def limits_changed(self, text: str, also_running: tuple = ()) -> None:
        """The limits of config ``text`` hold from now on; the user/group usage is booked again from
        the running allocations (and ``also_running``: (queue, resources, owner) of one being checked)."""
        queue_max, ugm = config_limits(text)
        with self.lock:
            running = [(t.app.queue, resource_from_si(t.alloc.resourcePerAlloc), t.app.owner)
                       for t in (*self.tasks.values(), *self.placeholders.values()) if t.state == "running"]
            self.validator.set_limits(queue_max, ugm, running + list(also_running))

    # ------------------------------------------------------------------ views for stats/report
    def counts(self) -> dict[str, int]:
        with self.lock:
            states: dict[str, int] = {"planned": 0, "asked": 0, "running": 0, "done": 0, "rejected": 0,
                                      "killed": 0, "preempted": 0, "failed": 0}
            for t in self.tasks.values():
                states[t.state] += 1
            return states

    def running_by_queue(self) -> dict[tuple[str, str], dict[str, int]]:
        """Allocated resources per (partition, queue) of the running tasks."""
        with self.lock:
            out: dict[tuple[str, str], dict[str, int]] = {}
            for t in self.tasks.values():
                if t.state == "running":
                    used = out.setdefault(t.app.queue, {})
                    for k, v in t.app.plan.template.resources.items():
                        used[k] = used.get(k, 0) + v
            return out

    def app_outcomes(self) -> dict[str, int]:
        with self.lock:
            out: dict[str, int] = {}
            for a in self.apps.values():
                key = a.outcome or ("Unfinished" if a.state != "planned" else "NotSubmitted")
                out[key] = out.get(key, 0) + 1
            return out

    # ------------------------------------------------------------------ helpers
    def _task(self, key: str) -> _Task | None:
        return self.tasks.get(key) or self.placeholders.get(key)

    def _send_asks(self, tasks: list[_Task]) -> list:
        """Mark the tasks that were never asked as asked; their asks, to be sent."""
        now, asks = self.clock(), []
        for task in tasks:
            if task.state == "planned":
                task.state, task.asked_at = "asked", now
                task.app.ph_asked += task.placeholder
                self.validator.ask_added(task.key, 1)
                asks.append(self._ask(task))
        return asks

    def _send_in_chunks(self, asks: list) -> None:
        for i in range(0, len(asks), ASKS_PER_REQUEST):
            self.sender.update_allocation(self.wire.asks_request(asks[i : i + ASKS_PER_REQUEST]))

    def _fail_unsent(self, app: _App) -> None:
        """The scheduler failed the app: tasks never asked will not be."""
        for task in app.tasks:
            if task.state == "planned":
                self._close(task, "failed")

    def _close(self, task: _Task, state: str) -> None:
        was, task.state = task.state, state
        if task.placeholder:
            task.app.ph_asked -= was == "asked"
            return
        task.app.open_tasks -= 1
        if task.app.open_tasks == 0 and task.app.state != "rejected":
            self._removable.append(task.app)

    def _unbook(self, task: _Task) -> None:
        res = resource_from_si(task.alloc.resourcePerAlloc)
        self.validator.released(task.key, task.alloc.nodeID, task.app.queue, res, task.app.owner)

    def _remove_finished(self) -> None:
        if not self._removable:
            return
        removes = []
        for app in self._removable:
            clean = not app.failed and all(t.state in ("done", "preempted") for t in app.tasks)
            app.outcome = "Completed" if clean else "Failed"
            app.state = "removed"
            removes.append(self.pb.RemoveApplicationRequest(applicationID=app.plan.app_id,
                                                            partitionName=app.plan.template.partition))
        self._removable = []
        self.sender.update_application(self.pb.ApplicationRequest(remove=removes))

    def _node_info(self, node_id: str) -> Any:
        n = self._node_plans[node_id]
        info = self.pb.NodeInfo(nodeID=node_id, action=self.pb.NodeInfo.CREATE, attributes=n.attributes,
                                schedulableResource=self.wire.resource(n.resources))
        if n.foreign and self.wire.foreign_in_node:  # a pod of another scheduler: occupies the node, in no queue
            info.existingAllocations.append(self.wire.foreign(node_id, n.foreign))
        return info

    def _foreign_allocations(self) -> list:
        """v1.8: the other schedulers' pods, reported in ``allocations`` (the seed: in the nodes)."""
        if self.wire.foreign_in_node:
            return []
        return [self.wire.foreign(n.node_id, n.foreign) for n in self.plan.nodes if n.foreign]

    def _app_request(self, app: _App) -> Any:
        t = app.plan.template
        req = self.pb.AddApplicationRequest(
            applicationID=app.plan.app_id, queueName=t.queue, partitionName=t.partition,
            ugi=self.pb.UserGroupInformation(user=t.user, groups=list(t.groups)),
            tags={APP_TAG_NAMESPACE: t.namespace, TAG_APP_CREATION_TIME: str(int(app.submitted_wall))})
        if t.gang is not None:  # as the k8s shim: the sum of the task groups, their timeout and style
            members, each = app.plan.members, self._placeholder_resources(app)
            req.placeholderAsk.CopyFrom(self.wire.resource({k: v * members for k, v in each.items()}))
            req.executionTimeoutMilliSeconds = int(t.gang.timeout * 1000)
            req.gangSchedulingStyle = t.gang.style
            req.tags[TAG_APP_TASK_GROUPS] = json.dumps(
                [{"name": app.task_group, "minMember": members, "minResource": each}])
        return req

    @staticmethod
    def _placeholder_resources(app: _App) -> dict[str, int]:
        t = app.plan.template
        return t.gang.resources or t.resources

    def _ask(self, task: _Task) -> Any:
        t = task.app.plan.template
        return self.wire.ask(
            key=task.key, app_id=task.app.plan.app_id, partition=t.partition, priority=t.priority,
            resources=self._placeholder_resources(task.app) if task.placeholder else t.resources,
            tags={TAG_NAMESPACE: t.namespace, TAG_POD_NAME: task.key}, placeholder=task.placeholder,
            task_group=task.app.task_group if t.gang else "",
            preempt=None if t.preempt_self is None else (t.preempt_self, t.preempt_other))

    def _existing(self, task: _Task) -> Any:
        t = task.app.plan.template
        return self.wire.running(task.alloc, key=task.key, app_id=task.app.plan.app_id, partition=t.partition,
                                 priority=t.priority, placeholder=task.placeholder,
                                 task_group=task.app.task_group if t.gang else "")
