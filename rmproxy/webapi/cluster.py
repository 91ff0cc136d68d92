"""Reading the whole cluster through the broker: which partitions exist, and asking their workers.

The broker side's view (``rmproxy.cluster_view``) lists every (rmID, partition) with its
owner's epoch, kept as new as the broker's last message; the broker routes a QUERY by (rmID,
partition) whichever rmproxy sends it, and returns the answer to the rmproxy that asked (a broker
that reports ``replyToAsker``; an older one answered only the rmproxy holding the RM, see
``ClusterReader.query``). Queries go through rmproxy's one request table (the broker side's
``requests``, ``rmproxy.worker_requests``) with ``seq`` 0 so they never consume the RM's
request sequence (workers check sequence only when it is non-zero).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Mapping

from common.envelope import Kind
from common.messages import PagedQuery, Query, Reply
from rmproxy.rms import RMSession
from rmproxy.webapi._http import ApiError
from rmproxy.webapi.seams import BrokerState
from rmproxy.worker_requests import NoAnswer

__all__ = ["Target", "ClusterReader", "PAGE"]

PAGE = 1000  # items asked per query when paging a list; keeps each worker answer short


@dataclass(frozen=True, slots=True)
class Target:
    """One partition of one RM and the epoch of its current owner (None: no worker now)."""

    rm_id: str
    partition: str
    epoch: int | None
    worker: str | None = None
    state: str = ""  # why there is no owner, in the broker's words, when epoch is None

    @property
    def full_name(self) -> str:
        return f"[{self.rm_id}]{self.partition}"


class ClusterReader:
    """Which partitions the stack has, who owns them, and reads answered by their workers:
    the stack as the ``broker`` side sees it, with the RMs held here (``rms``)."""

    def __init__(self, broker: BrokerState, rms: Mapping[str, RMSession]) -> None:
        self.broker = broker
        self.rms = rms

    def targets(self) -> list[Target]:
        """Every partition of the stack, sorted by (rmID, partition), with its owner as the
        broker side's view knows it; this rmproxy's RMs are listed even before the view has them."""
        seen: dict[tuple[str, str], Target] = {}
        if self.broker.connected:
            for o in self.broker.view.owners():
                seen[(o.rm_id, o.partition)] = Target(o.rm_id, o.partition, o.epoch, o.worker, o.state)
        for rm in self.rms.values():
            for name in rm.partitions:
                seen.setdefault((rm.rm_id, name), Target(rm.rm_id, name, None, None, "registering"))
        return [seen[k] for k in sorted(seen)]

    def rm_ids(self) -> list[str]:
        """Every RM of the stack (and this rmproxy's), sorted."""
        return sorted({t.rm_id for t in self.targets()} | set(self.rms))

    def remote_rms(self) -> dict[str, tuple[str, dict]]:
        """RM states reported by every rmproxy through the broker: rmID -> (rmproxy, info)."""
        out: dict[str, tuple[str, dict]] = {}
        for rp in self.broker.cluster().get("rmproxies", []):
            for rm_id, info in (rp.get("rms") or {}).items():
                if isinstance(info, dict):
                    out[rm_id] = (rp.get("name", ""), info)
        return out

    def resolve(self, name: str, rm_id: str | None = None) -> Target:
        """The partition named in a REST path: ``default`` (first RM holding it, by rmID) or
        ``[rmID]default``; ``rm_id`` (the ``rmID`` query parameter) picks the RM.
        Unknown → ApiError 404 ``Partition not found`` (YuniKorn's code since 1.5)."""
        if name.startswith("[") and "]" in name:
            rm_id, name = name[1:].split("]", 1)
        for t in self.targets():
            if t.partition == name and (not rm_id or t.rm_id == rm_id):
                return t
        raise ApiError(404, "Partition not found",
                       f"partition {name!r}{f' of RM {rm_id!r}' if rm_id else ''} is not known to the cluster")

    def _replies_reach_us(self, rm_id: str) -> bool:
        """Whether the worker's answer for this RM comes back to this rmproxy.

        The broker sends a worker's answer to the rmproxy holding the RM, whoever asked; a
        query for another rmproxy's RM would only time out, and (while the broker does not yet
        know the RM's rmproxy) would make this rmproxy the RM's destination. So only this
        rmproxy's RMs are queried, unless the broker announces ``replyToAsker`` in its status."""
        return rm_id in self.rms or bool(self.broker.view.status.get("replyToAsker"))

    async def query(self, target: Target, query: Query) -> Any:
        """One query answered by the partition's worker; ApiError 503 when it cannot answer.

        A worker that no longer owns the partition in the target's epoch says so: the owner
        changed while the query was on its way (a re-registration); it is asked once more in
        the epoch the view holds by then."""
        reply = await self._ask(target, query)
        if reply.stale:
            now = self.broker.view.owner(target.rm_id, target.partition)
            if now is not None and now.epoch is not None and now.epoch != target.epoch:
                reply = await self._ask(Target(target.rm_id, target.partition, now.epoch, now.worker), query)
        if reply.error:
            raise ApiError(503, f"partition {target.full_name}: {reply.error}")
        missing = reply.not_found
        if missing is not None:  # an object that does not exist: 404, as YuniKorn answers since 1.5
            raise ApiError(404, missing.message,
                           f"{missing.object} {missing.name!r} not found in partition {target.full_name}")
        return reply.data

    async def _ask(self, target: Target, query: Query) -> Reply:
        if target.epoch is None:
            raise ApiError(503, f"partition {target.full_name} has no worker at the moment"
                                + (f": {target.state}" if target.state else ""))
        if not self._replies_reach_us(target.rm_id):
            holder = self.broker.view.holder(target.rm_id)
            raise ApiError(503, f"partition {target.full_name} belongs to RM {target.rm_id}, served by "
                                f"rmproxy {holder or '(unknown)'}: ask that rmproxy's REST API",
                           "the broker returns a worker's answer to the rmproxy holding the RM")
        try:
            return await self.broker.requests.ask(Kind.QUERY, target.rm_id, target.partition, target.epoch, 0,
                                                  query)
        except NoAnswer as exc:
            raise ApiError(503, str(exc)) from None

    async def query_all(self, query: Query) -> list[tuple[Target, Any]]:
        """The same query on every partition at once; partitions that cannot answer are left out
        (their error is in the second list)."""
        targets = self.targets()
        results = await asyncio.gather(*(self.query(t, query) for t in targets), return_exceptions=True)
        return [(t, r) for t, r in zip(targets, results) if not isinstance(r, BaseException)]

    async def query_all_with_errors(self, query: Query) -> tuple[list[tuple[Target, Any]], list[str]]:
        targets = self.targets()
        results = await asyncio.gather(*(self.query(t, query) for t in targets), return_exceptions=True)
        ok, errors = [], []
        for t, r in zip(targets, results):
            if isinstance(r, ApiError):
                errors.append(r.message)
            elif isinstance(r, BaseException):
                errors.append(f"partition {t.full_name}: {r}")
            else:
                ok.append((t, r))
        return ok, errors

    async def pages(self, target: Target, query: PagedQuery, first: dict | None = None,
                    offset: int = 0, limit: int | None = None) -> AsyncIterator[list]:
        """The items of a paged list answer, one worker query per page (each page bounded in work
        by the worker), from ``offset``, at most ``limit`` items; ``first`` = the first page if
        already read."""
        left = limit
        while left is None or left > 0:
            want = PAGE if left is None else min(PAGE, left)
            page = first if first is not None else await self.query(
                target, replace(query, offset=offset, limit=want))
            first = None
            items = page["items"][:left] if left is not None else page["items"]
            if items:
                yield items
            if left is not None:
                left -= len(items)
            offset = page["next"]
            if not page["items"] or offset >= page["total"]:
                return

    async def collect(self, target: Target, query: PagedQuery) -> list:
        out: list = []
        async for items in self.pages(target, query):
            out.extend(items)
        return out
