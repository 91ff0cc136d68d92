"""Binding pods to the nodes the scheduler chose, with retries, and what each answer means.

``Binder.bind(job)`` posts ``pods/{name}/binding`` (with the pod's uid, so a pod recreated under
the same name is never bound) in the background, at most ``concurrency`` requests at a time, and
reports one ``Outcome`` per job through ``on_outcome``. A job is a chain of callbacks (the
request's answer, a retry's timer), not a task: a binding per pod costs a few calls. Writes a
pod needs before its binding (volumes, resource claims) are made first, by ``writes.prebind``.

- ``BOUND``: 201 (the body is a ``Status``, not a Binding), or a 409 saying the pod is already
  on that very node (an earlier attempt whose answer was lost);
- ``ELSEWHERE``: 409, the pod is already assigned to another node (``node`` names it when the
  message does);
- ``GONE``: 404, or a 409 on the uid precondition: the pod no longer exists as it was asked for;
- ``REFUSED``: any other refusal (400, 403, 422, an invalid target's 500), or transient errors
  (no answer, 5xx) for longer than ``deadline`` seconds; ``error`` says why.

Transient errors are retried with capped exponential backoff and full jitter (honouring
``Retry-After``). The client already sends a throttled request again (``KubeClient``: 429, or 5xx
with ``Retry-After``, up to ``flow.MAX_RETRIES`` times); a binding still answered 429 after that
is retried here without end (the deadline does not apply: the server is there and asks to wait,
and a pod is never refused for the API server's load), until the pod is bound, gone, or the
binder closed.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import re
from dataclasses import dataclass
from typing import Callable

from si_client import Backoff
from k8s_shim.kube.kubeclient import ApiError, KubeClient

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
        self._free = concurrency  # requests that may start now
        self._waiting: collections.deque[tuple[BindJob, float, int]] = collections.deque()
        self._closed = False
        self.in_flight = 0

    def bind(self, job: BindJob) -> None:
        self.in_flight += 1
        self._try(job, asyncio.get_running_loop().time() + self.deadline, 0)

    def _try(self, job: BindJob, give_up: float, tries: int) -> None:
        """Request ``job``'s binding once a slot is free."""
        if self._closed:
            return
        if self._free:
            self._free -= 1
            self._send(job, give_up, tries)
        else:
            self._waiting.append((job, give_up, tries))

    def _send(self, job: BindJob, give_up: float, tries: int) -> None:
        def answered(error: ApiError | None) -> None:
            self._answered(job, give_up, tries + 1, error)
        self.client.submit_bind(job.namespace, job.name, job.uid, job.node, answered)

    def _answered(self, job: BindJob, give_up: float, tries: int, error: ApiError | None) -> None:
        if self._waiting:  # the slot goes to the next request waiting
            self._send(*self._waiting.popleft())
        else:
            self._free += 1
        if self._closed:
            return
        if error is None:
            result = Result(job, Outcome.BOUND, tries=tries)
        else:
            result = classify(job, error)
            if result is None:
                loop = asyncio.get_running_loop()
                delay = error.retry_after or self.backoff.delay(tries - 1)
                if error.status == 429 or loop.time() + delay <= give_up:
                    log.info("bind of %s/%s to %s: %s; retrying in %.2fs", job.namespace, job.name, job.node,
                             error, delay)
                    loop.call_later(delay, self._try, job, give_up, tries)
                    return
                result = Result(job, Outcome.REFUSED, tries=tries,
                                error=f"{error} (still failing after {tries} tries in {self.deadline:g}s)")
            else:
                result = Result(job, result.outcome, result.node, result.error, tries)
        self.in_flight -= 1
        try:
            self.on_outcome(result)
        except Exception:
            log.exception("handling the bind outcome of %s/%s failed", job.namespace, job.name)

    async def close(self) -> None:
        """No outcome is reported any more; retries waiting for their time are not made."""
        self._closed = True
        self._waiting.clear()
