"""Writes and a wait before a pod's binding (kube-scheduler's PreBind), for any concern.

A pod whose allocation needs API writes first (its volumes' pre-binds, its devices' claims) is
given to ``PreBinder.start`` as a ``Gate``: the writes are made in order, then the gate waits
until ``check()`` says ready (the shim calls ``PreBinder.check`` whenever an informer shows a
change that may make a gate ready), then ``on_ready(gate)`` binds the pod. A refused write, a
``check`` that reports a failure (e.g. a claim deleted meanwhile) or the gate's ``timeout``
ends the gate with ``on_failed(gate, why, timed_out)``; ``cancel`` drops a gate whose pod went.
``check`` answers ``READY``, ``(WAIT, what)`` or ``(FAIL, why)``. ``node_at_fault`` tells the
shim whether another node may do better (a refused write, a timeout) or not (a claim deleted, or
a write raising ``Taken``: what it writes is no longer as chosen). A gate cancelled before its
binding (``cancel``: its pod went, or its allocation did) calls its ``on_cancel`` (devices: the
claims written for it are given back; volumes: nothing, their books follow the pod).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from k8s_shim.kube.kubeclient import ApiError
from k8s_shim.writes.binding import BindJob

__all__ = ["Gate", "PreBinder", "Taken", "combine", "READY", "WAIT", "FAIL"]

log = logging.getLogger(__name__)

READY, WAIT, FAIL = "ready", "wait", "fail"


class Taken(Exception):
    """A write found what it writes no longer as chosen (e.g. a claim allocated otherwise
    meanwhile, or gone): the gate fails, and another node would not do better."""


@dataclass(eq=False, slots=True)
class Gate:
    job: BindJob
    writes: list[Callable[[], Awaitable[None]]]  # each raises ApiError when refused
    check: Callable[[], tuple[str, str]]
    timeout: float
    late: str = "its writes were not done"  # how a timeout is told: "<late> on node N within <limit> (...)"
    limit: str = "the timeout"  # the setting the timeout comes from
    undo: Callable[[], None] | None = None  # what a failed gate takes back (called once, on failure)
    on_cancel: Callable[[], None] | None = None  # what a cancelled gate takes back
    exclusion: str = ""  # the reason its node is excluded for after a refused write or a timeout
    waiting_for: str = ""
    written: bool = False
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    task: asyncio.Task | None = field(default=None, repr=False)


def combine(gates: list[Gate]) -> Gate | None:
    """One gate for a pod whose allocation several concerns gate (volumes, devices): every
    concern's writes in turn, ready when all are, failed when one fails; the longest timeout."""
    if len(gates) <= 1:
        return gates[0] if gates else None

    def check() -> tuple[str, str]:
        waiting = ""
        for gate in gates:
            verdict, what = gate.check()
            if verdict == FAIL:
                return FAIL, what
            if verdict == WAIT and not waiting:
                waiting = what
        return (WAIT, waiting) if waiting else (READY, "")

    def undo() -> None:
        for gate in gates:
            if gate.undo is not None:
                gate.undo()

    def on_cancel() -> None:
        for gate in gates:
            if gate.on_cancel is not None:
                gate.on_cancel()
    longest = max(gates, key=lambda g: g.timeout)
    return Gate(gates[0].job, [w for g in gates for w in g.writes], check, longest.timeout, longest.late,
                longest.limit, undo, on_cancel, longest.exclusion)


class PreBinder:
    def __init__(self, on_ready: Callable[[Gate], None],
                 on_failed: Callable[[Gate, str, bool], None]) -> None:  # (gate, why, node_at_fault)
        self.on_ready, self.on_failed = on_ready, on_failed
        self.gates: dict[str, Gate] = {}  # pod uid -> its gate

    def start(self, gate: Gate) -> None:
        old = self.gates.get(gate.job.uid)
        if old is not None:  # replaced, not taken back: the new gate writes the pod's objects again
            self._drop(old)
        self.gates[gate.job.uid] = gate
        loop = asyncio.get_running_loop()
        gate.timer = loop.call_later(gate.timeout, self._timed_out, gate)
        gate.task = loop.create_task(self._write(gate), name=f"prebind {gate.job.namespace}/{gate.job.name}")

    async def _write(self, gate: Gate) -> None:
        for write in gate.writes:
            try:
                await write()
            except ApiError as exc:
                self._end(gate, f"write refused: {exc}", True)
                return
            except Taken as exc:
                self._end(gate, str(exc), False)
                return
            if self.gates.get(gate.job.uid) is not gate:
                return  # cancelled or ended meanwhile
        gate.written = True
        self._check(gate)

    def check(self) -> None:
        """Look at every waiting gate again (something it waits for may have changed)."""
        for gate in list(self.gates.values()):
            if gate.written:
                self._check(gate)

    def _check(self, gate: Gate) -> None:
        verdict, what = gate.check()
        if verdict == READY:
            self._drop(gate)
            self.on_ready(gate)
        elif verdict == FAIL:
            self._end(gate, what, False)
        else:
            gate.waiting_for = what

    def _timed_out(self, gate: Gate) -> None:
        if self.gates.get(gate.job.uid) is gate:
            self._end(gate, f"{gate.late} on node {gate.job.node} within {gate.limit} ({gate.timeout:g}s; waiting "
                            f"for {gate.waiting_for or 'its writes'})", True)

    def _end(self, gate: Gate, why: str, node_at_fault: bool) -> None:
        self._drop(gate)
        if gate.undo is not None:
            gate.undo()
        self.on_failed(gate, why, node_at_fault)

    def _drop(self, gate: Gate) -> None:
        if self.gates.get(gate.job.uid) is gate:
            del self.gates[gate.job.uid]
        if gate.timer is not None:
            gate.timer.cancel()
        if gate.task is not None and gate.task is not asyncio.current_task() and not gate.task.done():
            gate.task.cancel()

    def cancel(self, uid: str) -> bool:
        """Drop ``uid``'s gate (its pod went, or its allocation did); True if there was one."""
        gate = self.gates.get(uid)
        if gate is None:
            return False
        self._drop(gate)
        if gate.on_cancel is not None:
            gate.on_cancel()
        return True

    def close(self) -> None:
        for gate in list(self.gates.values()):
            self._drop(gate)
