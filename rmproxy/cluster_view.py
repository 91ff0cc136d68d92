"""rmproxy's one view of who owns which partition in which epoch, and of the rest of the stack.

The broker tells every rmproxy the whole picture in a STATUS (each heartbeat, and at the end of
any broker loop turn that changed ownership or membership), and tells the rmproxy holding an RM
of each change as it happens (PARTITION_OWNED, PARTITION_LOST). All of it arrives in order on
one link, so applying each message in turn keeps this view as new as the last message received:
a STATUS is a full snapshot and replaces the view; an ownership event patches it. Reads
(REST, ``korral status``) route by this view only; the epoch an RM's own requests carry is the
RM session's business (``RMSession.epochs``), and the two can differ only while an RM is being
asked to re-register.

This rmproxy's own RMs are reported as this rmproxy holds them now (``document``), not as the
broker last heard of them, so an RM that just registered or stopped here shows at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Owner", "ClusterView"]


@dataclass(frozen=True, slots=True)
class Owner:
    """The owner of one partition: ``epoch`` None while it has no loaded worker."""

    rm_id: str
    partition: str
    epoch: int | None
    worker: str | None
    state: str = ""  # the broker's words: owned, loading, awaiting a worker, waiting for RM ... to re-register
    last_epoch: int | None = None

    @property
    def full_name(self) -> str:
        return f"[{self.rm_id}]{self.partition}"


class ClusterView:
    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self.status: dict[str, Any] = {}  # the broker's last STATUS, with later events applied
        self.received = 0.0  # clock time of the last message from the broker that changed the view

    # -- updates, in the order the broker sent them ------------------------------------

    def on_status(self, body: dict[str, Any]) -> None:
        self.status = body
        self.received = self._clock()

    def on_owned(self, rm_id: str, partition: str, epoch: int, worker: str | None) -> None:
        entry = self._partition(rm_id, partition)
        entry.update(worker=worker, epoch=epoch, loaded=True, lastEpoch=epoch, state="owned")
        for w in self.status.get("workers", []):
            if w.get("name") == worker:
                w.update(partition=f"{rm_id}/{partition}", epoch=epoch)
            elif w.get("partition") == f"{rm_id}/{partition}":
                w.update(partition=None, epoch=None)
        self.received = self._clock()

    def on_lost(self, rm_id: str, partition: str, epoch: int, reason: str) -> None:
        entry = self._partition(rm_id, partition)
        entry.update(worker=None, epoch=None, loaded=False, lastEpoch=epoch,
                     state=f"waiting for RM {rm_id} to re-register (epoch {epoch} lost: {reason})")
        self.status["workers"] = [w for w in self.status.get("workers", [])
                                  if w.get("partition") != f"{rm_id}/{partition}"]
        self.received = self._clock()

    def reset(self) -> None:
        """The link to the broker was replaced: nothing is known until its first STATUS."""
        self.status = {}
        self.received = 0.0

    def _partition(self, rm_id: str, partition: str) -> dict[str, Any]:
        parts = self.status.setdefault("partitions", [])
        for p in parts:
            if p.get("rmID") == rm_id and p.get("partition") == partition:
                return p
        entry = {"rmID": rm_id, "partition": partition}
        parts.append(entry)
        return entry

    # -- reads -----------------------------------------------------------------------

    @property
    def known(self) -> bool:
        return bool(self.status)

    def age_ms(self) -> int | None:
        """How old the view is: milliseconds since the broker's last message changed it."""
        return round((self._clock() - self.received) * 1000) if self.received else None

    def owners(self) -> list[Owner]:
        return [Owner(str(p.get("rmID", "")), str(p.get("partition", "")),
                      p.get("epoch") if p.get("loaded") else None, p.get("worker"),
                      str(p.get("state") or ""), p.get("lastEpoch"))
                for p in self.status.get("partitions", [])]

    def owner(self, rm_id: str, partition: str) -> Owner | None:
        return next((o for o in self.owners() if o.rm_id == rm_id and o.partition == partition), None)

    def holder(self, rm_id: str) -> str | None:
        """The name of the rmproxy holding the RM's streams, as the broker knows it."""
        for rp in self.status.get("rmproxies", []):
            if rm_id in (rp.get("rms") or {}):
                return rp.get("name")
        return None

    def document(self, me: dict[str, Any], local_rms: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The broker's view as ``korral status`` shows it, with this rmproxy's entry (``me``:
        name, host, pid) listing ``local_rms`` (rmID -> {"state", "partitions"}) as held here now,
        and the partitions of RMs that stopped here left out (the broker released them already)."""
        if not self.status:
            return {}
        proxies = [rp for rp in self.status.get("rmproxies", []) if isinstance(rp, dict)]
        mine = next((rp for rp in proxies if rp.get("name") == me.get("name")), None)
        gone = {rm_id for rm_id in (mine or {}).get("rms") or {} if rm_id not in local_rms}
        proxies = [{**rp, "rms": dict(local_rms)} if rp is mine else
                   {**rp, "rms": {k: v for k, v in (rp.get("rms") or {}).items() if k not in local_rms}}
                   for rp in proxies]
        if mine is None:  # the broker has not listed this rmproxy yet
            proxies.append({**me, "heartbeatAge": None, "rms": dict(local_rms)})
        return {**self.status, "rmproxies": proxies, "viewAgeMs": self.age_ms(),
                "partitions": [p for p in self.status.get("partitions", []) if p.get("rmID") not in gone],
                "workers": [{**w, "partition": None, "epoch": None}
                            if str(w.get("partition") or "").rsplit("/", 1)[0] in gone else w
                            for w in self.status.get("workers", [])]}
