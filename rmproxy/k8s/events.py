"""Kubernetes events (events.k8s.io/v1) with YuniKorn's reasons, posted in the background.

``EventRecorder.post(regarding, type, reason, note)`` queues an event about a pod, node or
configmap and returns at once; ``run()`` posts them with a few concurrent requests. The queue is
bounded: when the API server cannot keep up, further events are dropped and counted (as
client-go's broadcaster drops them), never the scheduling. An event the server refuses is
logged, not retried. Notes are cut to the 1,024 characters the server accepts.

The reasons are YuniKorn's shim's (``REASONS``), so tooling that watches for them keeps working.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from rmproxy.k8s.kubeclient import ApiError, KubeClient

__all__ = ["EventRecorder", "Regarding", "NORMAL", "WARNING", "REASONS", "micro_time"]

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
MAX_NOTE = 1024
CLUSTER_SCOPED_NAMESPACE = "default"  # where client-go puts events about cluster-scoped objects

# YuniKorn's shim's reasons (reason == action), and what each says
REASONS = {
    "Scheduling": "the pod is queued (or waits for scheduling gates), or its metadata is inconsistent",
    "Scheduled": "the scheduler placed the pod on a node",
    "PodBindSuccessful": "the binding to the node was written",
    "PodBindFailure": "the API server refused the binding",
    "FailedScheduling": "the pod cannot be asked for: a field is invalid, or it has constraints Korral does not evaluate",
    "PodUnschedulable": "the pod waits for resources (or is skipped: queue quota)",
    "TaskRejected": "the scheduler rejected the pod's request",
    "TaskCompleted": "the pod ended; its allocation was released",
    "ApplicationFailed": "the application was rejected or failed; its pending pods fail",
    "Preempted": "the scheduler released the pod's allocation to make room for another",
    "Informational": "an event of the scheduler about the pod or node",
    "NodeAccepted": "the scheduler registered the node",
    "NodeRejected": "the scheduler refused the node",
    "NodeDeleted": "the node was removed from the scheduler",
    "ConfigRejected": "a configmap could not be applied: the previous configuration stays",
    "ConfigKept": "a setting that is not reloadable changed: the running value stays until a restart",
}


@dataclass(frozen=True, slots=True)
class Regarding:
    kind: str  # Pod, Node, ConfigMap, Namespace
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    def as_json(self) -> dict:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


def micro_time(seconds: float) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    whole = int(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((seconds - whole) * 1e6):06d}Z"


class EventRecorder:
    def __init__(self, client: KubeClient, controller: str, instance: str, *, capacity: int = 4096,
                 senders: int = 8, clock=time.time) -> None:
        self.client, self.controller, self.instance = client, controller, instance
        self.queue: asyncio.Queue[tuple[str, dict]] = asyncio.Queue(capacity)
        self.senders = senders
        self.clock = clock
        self.posted = self.dropped = self.refused = 0
        self._serial = 0

    def post(self, regarding: Regarding, type_: str, reason: str, note: str) -> None:
        """Queue an event; dropped (and counted) when the queue is full."""
        now = self.clock()
        self._serial += 1
        namespace = regarding.namespace or CLUSTER_SCOPED_NAMESPACE
        event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                 "metadata": {"name": f"{regarding.name}.{time.time_ns():x}{self._serial % 4096:03x}",
                              "namespace": namespace},
                 "eventTime": micro_time(now), "reportingController": self.controller,
                 "reportingInstance": self.instance, "action": reason, "reason": reason, "type": type_,
                 "note": note if len(note) <= MAX_NOTE else note[:MAX_NOTE - 3] + "...",
                 "regarding": regarding.as_json()}
        try:
            self.queue.put_nowait((namespace, event))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped in (1, 10, 100) or self.dropped % 1000 == 0:
                log.warning("%d events dropped: the API server does not keep up (last: %s %s)", self.dropped,
                            reason, regarding.name)

    async def run(self) -> None:
        await asyncio.gather(*(self._send() for _ in range(self.senders)))

    async def _send(self) -> None:
        while True:
            namespace, event = await self.queue.get()
            try:
                await self.client.create_event(namespace, event)
                self.posted += 1
            except ApiError as exc:
                self.refused += 1
                log.info("event %s about %s not posted: %s", event["reason"], event["regarding"]["name"], exc)
            finally:
                self.queue.task_done()
