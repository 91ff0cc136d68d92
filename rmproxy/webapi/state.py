"""The full state dump: every partition's ``dump`` answer (each consistent for its partition, read
between two cycles of its worker) plus the RMs' registrations and their own dumps, the health
checks, the history and the stack (docs/rest.md).

``GET /debug/fullstatedump`` answers YuniKorn 1.9's lower-camel keys (``timestamp``,
``partitions``, ...); the v1.2 path ``GET /ws/v1/fullstatedump`` answers the same document with
v1.2's capitalised keys (``Timestamp``, ``Partitions``, ..., ``RMDiagnostics``), which its
clients (``korral dump`` among them) read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from aiohttp import web

from common import korral_pb2
from common.gcpause import gc_paused
from common.messages import DumpQuery
from rmproxy.webapi._http import ALLOW_ORIGIN, JSON_CONTENT_TYPE
from rmproxy.webapi.cluster import ClusterReader
from rmproxy.webapi.compress import start_sized
from rmproxy.webapi.config import config_json
from rmproxy.webapi.history import History
from rmproxy.webapi.seams import HeldRMs, Registrations
from rmproxy.webapi.yunikorn import cluster_info

__all__ = ["StateApi", "RawJSON", "pretty_dump", "dump_parts", "v12_keys"]


class StateApi:
    def __init__(self, held: HeldRMs, store: Registrations, reader: ClusterReader, stack_view, history: History,
                 partition_health=None, event_streams=None) -> None:
        self.held = held
        self.store = store
        self.reader = reader
        self.stack_view = stack_view  # async () -> dict, Korral's process view
        self.history = history
        self.event_streams = event_streams or list  # () -> [{"Name", "CreatedAt"}] of the open streams
        # async () -> ([(Target, checks)], errors), cached like the health endpoint's; None: the
        # workers compute the checks inside the dump
        self.partition_health = partition_health
        self._dumping = asyncio.Lock()  # YuniKorn serves a single dump at a time

    async def _rm_state_dumps(self) -> dict[str, Any]:
        """Ask this rmproxy's subscribed RMs for their own state dump (korral.v1 StateDumpRequest
        notice, answered with ProvideStateDump, whose answer the Korral gRPC service keeps in
        ``state_dumps``: rmID -> the RM's latest answer)."""
        store = self.held.state_dumps
        asked: dict[str, str] = {}
        for rm in self.held.rms.values():
            if rm.subscribers:
                request_id = f"dump-{time.time_ns()}"
                store.pop(rm.rm_id, None)
                rm.notify(korral_pb2.SchedulerNotice(
                    stateDumpRequest=korral_pb2.StateDumpRequest(requestID=request_id)))
                asked[rm.rm_id] = request_id
        if not asked:
            return {}
        return await _poll_rm_dumps(store, asked, RM_DUMP_WAIT)

    async def dump(self, request: web.Request) -> web.StreamResponse:
        """YuniKorn 1.9's dump (``/debug/fullstatedump``)."""
        return await self._answer(request, lambda doc: doc)

    async def dump_v12(self, request: web.Request) -> web.StreamResponse:
        """The same dump with v1.2's keys (``/ws/v1/fullstatedump``)."""
        return await self._answer(request, v12_keys)

    async def _answer(self, request: web.Request, shape) -> web.StreamResponse:
        # The cyclic GC is paused for the whole dump (decoding the workers' answers and encoding
        # the JSON create ~10^6 objects; each gen-2 pass would rescan them all). Nothing cyclic
        # is created meanwhile, so the pause frees nothing late; measured ~2x faster at 50,000
        # allocations.
        async with self._dumping:
            with gc_paused():
                parts = dump_parts(shape(await self.build_dump()))
        headers = {"Content-Type": JSON_CONTENT_TYPE, **ALLOW_ORIGIN}
        if request.method == "HEAD":
            return web.Response(body=b"".join(parts), headers=headers)
        # Written in ~1 MB pieces, each sent as far as the socket takes it: one 42 MB write would
        # be joined with the headers, then copied again into the transport's buffer for the part
        # the socket did not take at once (asyncio on Python 3.11).
        resp = web.StreamResponse(headers=headers)
        await start_sized(request, resp, sum(map(len, parts)))
        for chunk in _chunks(parts, WRITE_CHUNK):
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def build_dump(self) -> dict:
        # The workers' answers take longest (~0.3 s at 50,000 allocations): the health checks
        # (when the cache is stale: asked first, so each worker answers them first), the RMs'
        # own dumps and the registrations are read meanwhile, not after.
        checking = (asyncio.ensure_future(self.partition_health())
                    if self.partition_health is not None else None)
        dumping = asyncio.ensure_future(self.reader.query_all_with_errors(
            DumpQuery(health=self.partition_health is None)))
        try:
            rm_dumps = await self._rm_state_dumps()
            regs, redis_errors = {}, []
            for rm_id in self.reader.rm_ids():
                try:
                    regs[rm_id] = await self.store.load(rm_id)
                except Exception as exc:
                    redis_errors.append(f"Redis unavailable for RM {rm_id}: {exc}")
            health: dict[tuple[str, str], Any] = {}
            if checking is not None:
                checked, _ = await checking
                health = {(t.rm_id, t.partition): checks for t, checks in checked}
            answers, errors = await dumping
        finally:  # the request was cancelled (client gone): stop waiting for the workers
            for task in (checking, dumping):
                if task is not None and not task.done():
                    task.cancel()
        errors = errors + redis_errors
        apps: list = []
        for _, d in answers:
            apps.extend(RawJSON(text) for text in d["applicationsJson"])
        cluster = [cluster_info(t, d["partition"], regs[t.rm_id].build_info if regs.get(t.rm_id) else None,
                                regs[t.rm_id].registered_at_ns if regs.get(t.rm_id) else 0)
                   for t, d in answers]
        return {
            "timestamp": time.time_ns(),
            "partitions": [d["partition"] | {"rmID": t.rm_id} for t, d in answers],
            "applications": apps,
            "appHistory": [{"timestamp": t, "totalApplications": str(a)} for t, a, _ in self.history.records],
            "nodes": [RawJSON(b'{"partitionName":', _COMPACT.encode(t.partition), b',"rmID":',
                              _COMPACT.encode(t.rm_id), b',"nodesInfo":[', *_commas(d["nodesJson"]), b"]}")
                      for t, d in answers],
            "clusterInfo": cluster,
            "containerHistory": [{"timestamp": t, "totalContainers": str(c)}
                                 for t, _, c in self.history.records],
            "queues": [d["queues"] for _, d in answers],
            "rmDiagnostics": {rm_id: _registration_dump(reg) | {"stateDump": rm_dumps.get(rm_id)}
                              for rm_id, reg in regs.items() if reg is not None},
            "logLevel": logging.getLevelName(logging.getLogger("korral").getEffectiveLevel()),
            "config": [config_json(reg) for reg in regs.values() if reg is not None],
            "placementRules": [{"partition": t.partition, "rmID": t.rm_id, "rules": d["placementRules"]}
                               for t, d in answers],
            "eventStreams": self.event_streams(),
            "reservations": [{"partitionName": t.partition, "rmID": t.rm_id, "reservations": d["reservations"]}
                             for t, d in answers],
            "userUsage": [{"partitionName": t.partition, "rmID": t.rm_id, "users": d["users"],
                           "groups": d["groups"]} for t, d in answers],
            "healthChecks": [{"partitionName": t.partition, "rmID": t.rm_id,
                              "checks": d["health"] if "health" in d else health.get((t.rm_id, t.partition), [])}
                             for t, d in answers],
            "events": [e for _, d in answers for e in d["events"]],
            "stack": await self.stack_view(),
            "errors": errors,
        }


def v12_keys(doc: dict) -> dict:
    """The dump with YuniKorn v1.2's top-level keys: capitalised, ``RMDiagnostics``."""
    return {_V12_KEYS.get(k, k[:1].upper() + k[1:]): v for k, v in doc.items()}


_V12_KEYS = {"rmDiagnostics": "RMDiagnostics"}


RM_DUMP_WAIT = 2.0  # seconds an RM gets to answer a StateDumpRequest


async def _poll_rm_dumps(store: dict, asked: dict[str, str], wait: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait
    while True:
        got = {rm: store[rm] for rm in asked if _answers(store.get(rm), asked[rm])}
        if len(got) == len(asked) or time.monotonic() >= deadline:
            return {rm: _parse_rm_dump(v) for rm, v in got.items()}
        await asyncio.sleep(0.05)


def _answers(value: Any, request_id: str) -> bool:
    if isinstance(value, dict):
        return value.get("requestID") in (request_id, "", None)
    return value is not None


def _parse_rm_dump(value: Any) -> Any:
    text = value.get("json") if isinstance(value, dict) else value
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


class RawJSON:
    """JSON text already encoded (a worker's orjson output: UTF-8), spliced into the dump as it
    is: the concatenation of ``parts`` (bytes; str parts are encoded as UTF-8)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: bytes | str) -> None:
        self.parts = [p.encode() if isinstance(p, str) else p for p in parts]


def _commas(items: list[bytes]) -> list[bytes]:
    """``items`` with b"," between them: the parts of their JSON list, without joining them."""
    out = [b","] * (2 * len(items) - 1) if items else []
    out[::2] = items
    return out


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def pretty_dump(doc: dict) -> bytes:
    """``dump_parts`` joined: the whole document as UTF-8 bytes."""
    return b"".join(dump_parts(doc))


def dump_parts(doc: dict) -> list[bytes]:
    """Indented JSON down to the elements of each top-level list, each element on one line, as
    a list of UTF-8 pieces to write one after the other.

    Fully indenting a 50,000-allocation dump takes seconds in Python (the indenting encoder is
    pure Python); this keeps the dump readable and greppable at the C encoder's speed. The
    workers' pre-encoded texts are pieces as they arrived: the 42 MB of a 50,000-allocation
    dump are not copied here at all. The cyclic GC is paused meanwhile: encoding creates many
    short-lived objects and each collection would rescan the (large) heap."""
    enc = _COMPACT.encode  # ensure_ascii: its output is ASCII, so str.encode() is exact
    with gc_paused():
        out: list[bytes] = [b"{\n"]
        for n, (key, value) in enumerate(doc.items()):
            out.append(b'%s  %s: ' % (b",\n" if n else b"", enc(key).encode()))
            if isinstance(value, list) and value:
                out.append(b"[\n    ")
                for i, v in enumerate(value):
                    if i:
                        out.append(b",\n    ")
                    if isinstance(v, RawJSON):
                        out.extend(v.parts)
                    else:
                        out.append(enc(v).encode())
                out.append(b"\n  ]")
            else:
                out.append(enc(value).encode())
        out.append(b"\n}\n")
        return out


WRITE_CHUNK = 1 << 20  # bytes per write of a large answer


def _chunks(parts: list[bytes], size: int):
    """The concatenation of ``parts`` in pieces of about ``size`` bytes (at least one part each)."""
    group: list[bytes] = []
    held = 0
    for part in parts:
        group.append(part)
        held += len(part)
        if held >= size:
            yield group[0] if len(group) == 1 else b"".join(group)
            group, held = [], 0
    if group:
        yield b"".join(group)


def _registration_dump(reg) -> dict | None:
    if reg is None:
        return None
    return {"rmID": reg.rm_id, "version": reg.version, "policyGroup": reg.policy_group,
            "config": reg.config, "extraConfig": reg.extra_config, "buildInfo": reg.build_info,
            "registeredAt": reg.registered_at_ns}
