"""Binding pods to the nodes the scheduler chose, with retries, and what each answer means.

``Binder.bind(job)`` posts ``pods/{name}/binding`` (with the pod's uid, so a pod recreated under
the same name is never bound) in the background, at most ``concurrency`` requests at a time, and
reports one ``Outcome`` per job through ``on_outcome``. The job's unbound WaitForFirstConsumer
claims (placed with ``--best-effort-constraints``) first get the node in the annotation
``volume.kubernetes.io/selected-node``, as kube-scheduler's volume binding gives it, so that their
provisioner makes the volume where the pod goes; a claim that cannot be annotated refuses the job.

- ``BOUND``: 201 (the body is a ``Status``, not a Binding), or a 409 saying the pod is already
  on that very node (an earlier attempt whose answer was lost);
- ``ELSEWHERE``: 409, the pod is already assigned to another node (``node`` names it when the
  message does);
- ``GONE``: 404, or a 409 on the uid precondition: the pod no longer exists as it was asked for;
- ``REFUSED``: any other refusal (400, 403, 422, an invalid target's 500), or transient errors
  (no answer, 429, 5xx) for longer than ``deadline`` seconds; ``error`` says why.

Transient errors are retried with capped exponential backoff and full jitter (honouring
``Retry-After``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
from dataclasses import dataclass
from typing import Callable

from rmproxy.client import Backoff
from rmproxy.k8s.kubeclient import ApiError, KubeClient

__all__ = ["Binder", "BindJob", "Outcome", "Result"]

log = logging.getLogger(__name__)

_ASSIGNED = re.compile(r'is already assigned to node "([^"]*)"')


class Outcome(enum.Enum):
    BOUND = "bound"
    ELSEWHERE = "elsewhere"
    GONE = "gone"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class BindJob:
    uid: str
    namespace: str
    name: str
    node: str
    attempt: int  # the task's allocation this bind belongs to: a result for an older one is stale
    claims: tuple[str, ...] = ()  # unbound WaitForFirstConsumer claims to give the node first


@dataclass(frozen=True, slots=True)
class Result:
    job: BindJob
    outcome: Outcome
    node: str = ""  # ELSEWHERE: where the pod is
    error: str = ""
    tries: int = 1


def classify(job: BindJob, exc: ApiError) -> Result | None:
    """What a failed bind means; None when it is worth retrying."""
    if exc.status == 409:
        m = _ASSIGNED.search(exc.message)
        if m or exc.details_kind == "pods/binding":
            node = m.group(1) if m else ""
            if node == job.node:
                return Result(job, Outcome.BOUND)
            return Result(job, Outcome.ELSEWHERE, node=node, error=exc.message)
        return Result(job, Outcome.GONE, error=exc.message)  # the uid precondition: a recreated pod
    if exc.status == 404:
        return Result(job, Outcome.GONE, error=exc.message)
    if exc.transient:
        return None
    return Result(job, Outcome.REFUSED, error=str(exc))


class Binder:
    def __init__(self, client: KubeClient, on_outcome: Callable[[Result], None], *, concurrency: int = 64,
                 deadline: float = 60.0, backoff: Backoff | None = None) -> None:
        self.client = client
        self.on_outcome = on_outcome
        self.deadline = deadline
        self.backoff = backoff or Backoff(base=0.1, cap=5.0)
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task] = set()
        self.in_flight = 0

    def bind(self, job: BindJob) -> None:
        task = asyncio.get_running_loop().create_task(self._bind(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bind(self, job: BindJob) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline
        self.in_flight += 1
        try:
            result = None
            for claim in job.claims:  # as kube-scheduler's volume binding: the provisioner follows the node
                result = await self._retrying(job, give_up, f"claim {claim}",
                                              lambda c=claim: self.client.select_node(job.namespace, c, job.node))
                if result.outcome is not Outcome.BOUND:
                    result = Result(job, Outcome.REFUSED, error=f"persistentvolumeclaim {claim}: {result.error}",
                                    tries=result.tries)
                    break
            else:
                result = await self._retrying(job, give_up, "bind",
                                              lambda: self.client.bind(job.namespace, job.name, job.uid, job.node))
        finally:
            self.in_flight -= 1
        try:
            self.on_outcome(result)
        except Exception:
            log.exception("handling the bind outcome of %s/%s failed", job.namespace, job.name)

    async def _retrying(self, job: BindJob, give_up: float, what: str, call) -> Result:
        """``call`` until it succeeds (BOUND), fails for good, or transient errors pass the deadline."""
        loop = asyncio.get_running_loop()
        tries = 0
        while True:
            tries += 1
            try:
                async with self._slots:
                    await call()
                return Result(job, Outcome.BOUND, tries=tries)
            except ApiError as exc:
                result = classify(job, exc)
                if result is not None:
                    return Result(job, result.outcome, result.node, result.error, tries)
                delay = exc.retry_after or self.backoff.delay(tries - 1)
                if loop.time() + delay > give_up:
                    return Result(job, Outcome.REFUSED, tries=tries,
                                  error=f"{exc} (still failing after {tries} tries in {self.deadline:g}s)")
                log.info("%s of %s/%s to %s: %s; retrying in %.2fs", what, job.namespace, job.name, job.node, exc,
                         delay)
                await asyncio.sleep(delay)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
