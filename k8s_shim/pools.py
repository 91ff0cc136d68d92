"""Partitions per node pool (``korral k8s-shim --partition-label KEY``): which partition a node
and an application belong to, and the partition each message to the scheduler names.

YuniKorn's shim puts everything in partition ``default``. With a label key, a node's value of
that label names its partition (no label: ``default``); an application's partition is named by
its first pod's ``yunikorn.apache.org/partition`` annotation, else its namespace's annotation of
the same name, else ``default`` (the application keeps it, as it keeps its queue: a later pod
naming another partition gets a warning event and joins its application's partition). Every
message names its partition as the SI carries it and rmproxy routes on it: ``partitionName`` of
an application, ask, allocation and release, the ``si/node-partition`` attribute of every node
action. Each partition is scheduled by its own worker.

A node is given to the shim (and so registered) only when

- the configuration has its partition: else it is held out, with a ``NodeRejected`` warning
  event naming the label; it is registered when a reload adds the partition; and
- no pod of ours belonging to another partition's application runs on it: those pods are not
  counted by the node's partition, which could then place pods over them. This happens when a
  node's label moves it to another partition (it is first removed from the old one: the pods
  running there keep running, untouched), after a restart, or when a pod is bound to a node of
  another pool directly (``spec.nodeName``). The node is held out, with a ``NodePartitionPending`` event
  naming those pods, and registered in its partition once they have ended.

An application whose partition the configuration lacks is not added: its pods stay pending with
a ``FailedScheduling`` warning naming the annotation, and are asked for when a reload adds the
partition (or, once its first pod is gone, when a pod naming a partition the configuration has
joins it). A reload that removes a partition holds its nodes and applications the same way.
Nothing already bound is touched.

Without a label key nothing of this runs: every message goes to ``default`` as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from common.config.errors import ConfigError
from common.config.loader import load_config
from common.constants import DEFAULT_PARTITION, NODE_PARTITION
from common.partitions import short_name
from k8s_shim.writes.events import WARNING, EventRecorder, Regarding
from k8s_shim.translate.model import App, AppState, NodeEntry, Task, Where
from k8s_shim.translate.namespaces import NamespaceInfo
from k8s_shim.translate.nodes import NodeState
from k8s_shim.translate.pods import ANNOTATION_PARTITION, PodSpec, PodState

if TYPE_CHECKING:
    from si_client import RecoverySnapshot

__all__ = ["Pools", "ShimBooks", "ShimHooks", "config_partitions"]

log = logging.getLogger(__name__)

_SHOWN_PODS = 5  # a held node's event names this many of the pods it waits for


def config_partitions(queues_yaml: str) -> frozenset[str] | None:
    """The partitions a queues.yaml lists (``default`` for an empty one); None if it does not load."""
    try:
        return frozenset(short_name(p.name) for p in load_config(queues_yaml).partitions)
    except (ConfigError, ValueError) as exc:
        log.warning("partitions of the queues config not read (%s): the known partitions stay", exc)
        return None


def _annotation(field_of: str) -> str:
    return f"{field_of}metadata.annotations[{ANNOTATION_PARTITION}]"


class ShimBooks(Protocol):
    """What the pools read of the shim's books (``k8s_shim.shim.Shim`` is one): its pods,
    nodes, applications and namespaces, and where it posts node events. ``apps`` is written: an
    application without pods left whose partition comes back is forgotten."""

    namespaces: Mapping[str, NamespaceInfo]
    tasks: Mapping[str, Task]
    node_pods: Mapping[str, set[str]]
    nodes: Mapping[str, NodeEntry]
    apps: dict[str, App]
    events: EventRecorder


@dataclass(frozen=True, slots=True)
class ShimHooks:
    """What the pools have the shim do: take a node or pod change (the informers' callbacks),
    add an application to the scheduler, post an event on a pod (``note`` about ``spec``)."""

    node_changed: Callable[[NodeState | None, NodeState | None], None]
    pod_changed: Callable[[PodState | None, PodState | None], None]
    submit_app: Callable[[App], None]
    pod_event: Callable[[PodSpec, str, str, str], None]


class Pools:
    """The shim's partitions (see module doc): ``label`` empty turns it all off. ``books`` and
    ``hooks``: the shim's, as far as the pools use them."""

    def __init__(self, books: ShimBooks, hooks: ShimHooks, label: str = "") -> None:
        self.books = books
        self.hooks = hooks
        self.label = label
        self.known: frozenset[str] = frozenset({DEFAULT_PARTITION})
        self.node_partition: dict[str, str] = {}  # nodes given to the shim -> their partition
        self.app_partition: dict[str, str] = {}  # application ID -> its partition, once decided
        self.foreign_partition: dict[str, str] = {}  # foreign pods reported -> their node's partition
        self.held: dict[str, tuple[NodeState, str]] = {}  # nodes held out -> (state, why)

    @property
    def enabled(self) -> bool:
        return bool(self.label)

    # ------------------------------------------------------------------ who belongs where
    def of_node(self, node: NodeState) -> str:
        return short_name(node.labels.get(self.label, ""))

    def of_pod(self, spec: PodSpec, ns: NamespaceInfo | None) -> tuple[str, str]:
        """The partition a pod names and the field that names it ("" for the default)."""
        if spec.partition:
            return short_name(spec.partition), _annotation("")
        if ns is not None and ns.partition:
            return short_name(ns.partition), _annotation(f"namespace {ns.name} ")
        return DEFAULT_PARTITION, ""

    def _of_task(self, task: Task) -> str | None:
        """The partition of the task's application; None while that waits for its namespace (the
        nodes of its pods are checked again once it is decided)."""
        known = self.app_partition.get(task.spec.app_id)
        if known is not None:
            return known
        ns = self.books.namespaces.get(task.spec.namespace)
        if ns is None and not task.spec.partition:
            return None
        return self.of_pod(task.spec, ns)[0]

    def admit(self, app: App, first: Task | None) -> bool:
        """Decide ``app``'s partition (from its first pod and namespace); False (the app waits in
        ``AppState.PARTITION``, its pods told why) when the configuration lacks it."""
        if not self.enabled:
            return True
        partition, where = DEFAULT_PARTITION, ""
        if first is not None:
            partition, where = self.of_pod(first.spec, self.books.namespaces.get(app.namespace))
        self.app_partition[app.app_id] = partition
        for node in {self.books.tasks[t].node for t in app.tasks if t in self.books.tasks} - {""}:
            self._recheck(node)  # judged by the pods' own annotations until now
        if partition in self.known:
            return True
        app.state = AppState.PARTITION
        for uid in app.tasks:
            task = self.books.tasks.get(uid)
            if task is not None and not task.node:  # a running pod is not told it cannot be scheduled
                self._unknown_partition(task, app, where)
        return False

    def _unknown_partition(self, task: Task, app: App, where: str) -> None:
        partition = self.app_partition.get(app.app_id, DEFAULT_PARTITION)
        spec = task.spec
        named = f"{where}={partition}" if where else f"partition {partition}"
        self.hooks.pod_event(spec, WARNING, "FailedScheduling",
                             f"pod {spec.alias} cannot be scheduled: {named} names a partition the configuration "
                             f"lacks (it has {', '.join(sorted(self.known))}); application {app.app_id} waits and is "
                             "scheduled when a configuration adds the partition")
        log.warning("pod %s: application %s names partition %s, which the configuration lacks", spec.alias,
                    app.app_id, partition)

    # ------------------------------------------------------------------ the informers' side
    def node_changed(self, old: NodeState | None, new: NodeState | None) -> None:
        books, hooks = self.books, self.hooks
        if new is None:
            self.held.pop(old.name, None)
            if old.name in self.node_partition:
                hooks.node_changed(old, None)  # decommissioned in its partition
                del self.node_partition[old.name]
            return
        current = self.node_partition.get(new.name)
        if current is None:
            self._offer(new)
            return
        partition = self.of_node(new)
        if partition == current:
            hooks.node_changed(old, new)
            return
        hooks.node_changed(books.nodes[new.name].state, None)  # decommissioned in the old partition
        del self.node_partition[new.name]
        why = self._hold_reason(new, partition)[1] or f"it is registered in partition {partition} now"
        books.events.post(Regarding("Node", new.name, uid=new.uid), WARNING, "NodePartitionChanged",
                         f"node {new.name} moves from partition {current} to {partition} "
                         f"(metadata.labels[{self.label}]): removed from {current}, its running pods not touched; "
                         f"{why}")
        log.warning("node %s: label %s moves it from partition %s to %s", new.name, self.label, current, partition)
        self._offer(new)

    def _offer(self, node: NodeState) -> None:
        """Give ``node`` to the shim, or hold it out saying why (see module doc)."""
        partition = self.of_node(node)
        reason, why = self._hold_reason(node, partition)
        if why:
            if self.held.get(node.name, (None, ""))[1] != why:
                self.books.events.post(Regarding("Node", node.name, uid=node.uid), WARNING, reason,
                                      f"node {node.name} is not registered: {why}")
                log.warning("node %s is not registered: %s", node.name, why)
            self.held[node.name] = (node, why)
            return
        if self.held.pop(node.name, None) is not None:
            log.info("node %s: registered in partition %s now", node.name, partition)
        self.node_partition[node.name] = partition
        self.hooks.node_changed(None, node)

    def _hold_reason(self, node: NodeState, partition: str) -> tuple[str, str]:
        """The event reason and the note saying why ``node`` is held out (no note: it is not)."""
        if partition not in self.known:
            return "NodeRejected", (f"metadata.labels[{self.label}]={partition} names a partition the configuration "
                                    f"lacks (it has {', '.join(sorted(self.known))}); it is registered when a "
                                    "configuration adds the partition")
        others = self._others_on(node.name, partition)
        if others:
            shown = ", ".join(f"{t.spec.alias} ({p})" for t, p in others[:_SHOWN_PODS])
            more = f" and {len(others) - _SHOWN_PODS} more" if len(others) > _SHOWN_PODS else ""
            return "NodePartitionPending", (f"{len(others)} pod(s) of other partitions run on it: {shown}{more}; "
                                            f"it is registered in partition {partition} once they have ended")
        return "", ""

    def _others_on(self, node: str, partition: str) -> list[tuple[Task, str]]:
        """Our pods on ``node`` whose application is in another partition than ``partition``."""
        out = []
        for uid in sorted(self.books.node_pods.get(node, ())):
            task = self.books.tasks.get(uid)
            if task is not None and task.node == node:
                theirs = self._of_task(task)
                if theirs is not None and theirs != partition:
                    out.append((task, theirs))
        return out

    def pod_changed(self, old: PodState | None, new: PodState | None) -> None:
        books = self.books
        decided = old is None and new is not None and new.spec.app_id in self.app_partition
        self.hooks.pod_changed(old, new)
        if new is None:
            if old.node in self.held:
                self._offer(self.held[old.node][0])
            return
        task = books.tasks.get(new.uid)
        if task is None:
            return
        if decided:
            self._joined(task)
        node = task.node
        if node and node in self.node_partition and self._of_task(task) not in (None, self.node_partition[node]):
            # a pod of another partition on a registered node (bound directly): that partition does
            # not count it, so the node leaves it until the pod has ended
            self._evict(node)
        elif old is not None and old.node != new.node and old.node in self.held:
            self._offer(self.held[old.node][0])

    def _evict(self, node: str) -> None:
        """Take a registered node out of its partition and hold it (see module doc)."""
        entry = self.books.nodes.get(node)
        if entry is not None:
            self.hooks.node_changed(entry.state, None)  # decommissioned in its partition
        del self.node_partition[node]
        if entry is not None:
            self._offer(entry.state)

    def _recheck(self, node: str) -> None:
        """Whether ``node`` is where it belongs now that a pod on it has its partition decided."""
        if node in self.held:
            self._offer(self.held[node][0])
        elif node in self.node_partition and self._others_on(node, self.node_partition[node]):
            self._evict(node)

    def _joined(self, task: Task) -> None:
        """A new pod of an application: told when its application waits for its partition, or
        when it names another partition than its application's."""
        app = self.books.apps.get(task.spec.app_id)
        if app is None:
            return
        mine, where = self.of_pod(task.spec, self.books.namespaces.get(task.spec.namespace))
        if app.state is AppState.PARTITION:
            if app.originator not in self.books.tasks:  # its first pod went: this one decides again
                self.hooks.submit_app(app)
            else:
                self._unknown_partition(task, app, where)
        elif mine != self.app_partition[app.app_id]:
            spec = task.spec
            self.hooks.pod_event(spec, WARNING, "Scheduling",
                                 f"pod {spec.alias}: {where or 'the default'}={mine} differs from the partition of its "
                                 f"application {app.app_id} ({self.app_partition[app.app_id]}): scheduled in the "
                                 "application's partition")

    # ------------------------------------------------------------------ the configuration
    def set_partitions(self, names: Iterable[str] | None) -> None:
        """The configuration's partitions changed: what waited for one it now has is taken; the
        nodes and applications of one it no longer has wait as if it never had it."""
        if names is None or frozenset(names) == self.known:
            return
        added, removed = frozenset(names) - self.known, self.known - frozenset(names)
        self.known = frozenset(names)
        log.info("partitions in the configuration: %s", ", ".join(sorted(self.known)))
        books = self.books
        for name in [n for n, p in self.node_partition.items() if p in removed]:
            self._evict(name)  # held: its partition is unknown now
        for app in list(books.apps.values()):
            partition = self.app_partition.get(app.app_id)
            if partition in removed and app.state is not AppState.PARTITION:
                app.state = AppState.PARTITION  # its asks went with the partition
                for task in [books.tasks[t] for t in app.tasks if t in books.tasks]:
                    task.where = Where.NOWHERE
                    if not task.node:
                        self._unknown_partition(task, app, "")
            elif partition in added and app.state is AppState.PARTITION:
                if app.tasks:
                    app.state = AppState.NEW
                    self.hooks.submit_app(app)
                else:
                    del books.apps[app.app_id]
        for node, _ in list(self.held.values()):
            self._offer(node)

    def dump(self) -> dict:
        """For the state dump: the partitions, how many nodes each has, the nodes held out and why,
        the applications waiting for their partition."""
        nodes: dict[str, int] = {}
        for partition in self.node_partition.values():
            nodes[partition] = nodes.get(partition, 0) + 1
        return {"label": self.label, "partitions": sorted(self.known), "nodes": nodes,
                "heldNodes": {name: why for name, (_, why) in self.held.items()},
                "waitingApplications": {a.app_id: self.app_partition.get(a.app_id, DEFAULT_PARTITION)
                                        for a in self.books.apps.values() if a.state is AppState.PARTITION}}

    # ------------------------------------------------------------------ stamping messages
    def stamp(self, kind: str, message: Any) -> Any:
        """``message`` naming its partition (see module doc)."""
        if kind == "node":
            partition = self.node_partition.get(message.nodeID, DEFAULT_PARTITION)
            if partition != DEFAULT_PARTITION:
                message.attributes[NODE_PARTITION] = partition
        elif kind == "app" or (kind in ("alloc", "release") and message.applicationID):
            message.partitionName = self.app_partition.get(message.applicationID, DEFAULT_PARTITION)
        elif kind == "alloc":  # a foreign pod: counted in its node's partition
            partition = self.foreign_partition[message.allocationKey] = \
                self.node_partition.get(message.nodeID, DEFAULT_PARTITION)
            message.partitionName = partition
        else:  # the release of a foreign pod
            message.partitionName = self.foreign_partition.pop(message.allocationKey, DEFAULT_PARTITION)
        return message

    @staticmethod
    def partition_of(kind: str, message: Any) -> str:
        """The partition a message ``stamp`` stamped names."""
        if kind == "node":
            return message.attributes.get(NODE_PARTITION, DEFAULT_PARTITION)
        return message.partitionName or DEFAULT_PARTITION

    # ------------------------------------------------------------------ one partition's replay
    def node_in(self, node: str, partition: str | None) -> bool:
        """Whether node ``node`` is registered in ``partition`` (None: in any)."""
        return partition is None or self.node_partition.get(node, DEFAULT_PARTITION) == partition

    def app_in(self, app_id: str, partition: str | None) -> bool:
        """Whether application ``app_id`` is in ``partition`` (None: in any)."""
        return partition is None or self.app_partition.get(app_id, DEFAULT_PARTITION) == partition

    def stamp_snapshot(self, snapshot: "RecoverySnapshot") -> None:
        for node in snapshot.nodes:
            self.stamp("node", node)
        for app in snapshot.applications:
            self.stamp("app", app)
        for alloc in snapshot.allocations:
            self.stamp("alloc", alloc)
