"""``korral bench e2e --breakdown``: where a burst's time goes between the RM and the core.

Per burst (asks sent -> last allocation received at the RM):

- the CPU seconds of each process of the stack (from /proc) and of the RM (this process);
- the worker's own split, from its ``korral_worker_stage_seconds`` counters (``/ws/v1/metrics``):
  decode (SI protobuf), apply (SI asks -> core commands -> the books), cycle (the scheduling
  core: what ``korral bench core`` measures), respond (outcomes -> SI response), send (encode
  and hand to ZeroMQ);
- the RM's protobuf encode of the requests and decode of the allocations, timed here on the
  same messages (the gRPC client does both in its own threads, inside the RM's CPU).

The stages overlap in time across processes (rmproxy splits the second request while the
worker decodes the first), so their sum is the work done, not the wall time.
"""

from __future__ import annotations

import re
import time
import urllib.request

from common import si_pb2
from benchmarks.cpu import RM_PROCESS, cpu_delta, cpu_snapshot

__all__ = ["Breakdown", "format_breakdown", "parse_worker_stages", "worker_stages"]

_STAGE_LINE = re.compile(r'^korral_worker_stage_seconds_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')


def worker_stages(rest_address: str, rm_id: str) -> dict[str, float]:
    """Seconds per worker stage so far, summed over the RM's partitions, from ``/ws/v1/metrics``."""
    with urllib.request.urlopen(f"http://{rest_address}/ws/v1/metrics", timeout=10) as r:
        return parse_worker_stages(r.read().decode(), rm_id)


def parse_worker_stages(text: str, rm_id: str) -> dict[str, float]:
    """``korral_worker_stage_seconds_total`` of ``rm_id`` in Prometheus text, summed per stage."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _STAGE_LINE.match(line)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        if labels.get("rm") == rm_id:
            out[labels["stage"]] = out.get(labels["stage"], 0.0) + float(m.group("value"))
    return out


class Breakdown:
    """``start()`` before the burst, ``stop(wall, requests, allocations)`` after it."""

    def __init__(self, rest_address: str, rm_id: str, pids: dict[str, int]) -> None:
        self.rest_address = rest_address
        self.rm_id = rm_id
        self.pids = pids
        self._cpu: dict = {}
        self._stages: dict[str, float] = {}

    def worker_time(self) -> float:
        """The worker's seconds in all stages so far (for a loop of single asks)."""
        return sum(worker_stages(self.rest_address, self.rm_id).values())

    def start(self) -> None:
        self._stages = worker_stages(self.rest_address, self.rm_id)
        self._cpu = cpu_snapshot(self.pids)

    def stop(self, wall: float, requests: list, allocations: list,
             response_type: type = si_pb2.AllocationResponse) -> dict:
        """The burst's figures; ``requests`` and ``allocations`` are the RM's messages and
        ``response_type`` their revision's ``AllocationResponse`` (to time the RM's decode)."""
        cpu = cpu_delta(self._cpu, cpu_snapshot(self.pids))
        after = worker_stages(self.rest_address, self.rm_id)
        worker = {k: round((v - self._stages.get(k, 0.0)) * 1000, 1) for k, v in after.items()}
        t0 = time.perf_counter()
        raw = [r.SerializeToString() for r in requests]
        encode = time.perf_counter() - t0
        resp = response_type(new=allocations).SerializeToString()
        t0 = time.perf_counter()
        response_type.FromString(resp)
        decode = time.perf_counter() - t0
        del raw
        return {"wall_ms": round(wall * 1000, 1),
                "cpu_ms": {k: None if v is None else round(v * 1000) for k, v in cpu.items()},
                "worker_ms": worker,
                "rm_encode_ms": round(encode * 1000, 1), "rm_decode_ms": round(decode * 1000, 1)}


def format_breakdown(row: dict) -> str:
    """The breakdown of one e2e row as an indented table."""
    b = row["breakdown"]
    revision = f" (SI {row['si_revision']})" if row.get("si_revision") else ""
    lines = [f"  breakdown of the {row['nodes']}-node burst{revision}: {b['wall_ms']:.0f} ms from the first ask "
             f"sent to the last allocation received"]
    for stage, ms in b["worker_ms"].items():
        lines.append(f"    worker {stage:<8} {ms:>8.1f} ms")
    lines.append(f"    RM encode       {b['rm_encode_ms']:>8.1f} ms (protobuf, same messages, in-process)")
    lines.append(f"    RM decode       {b['rm_decode_ms']:>8.1f} ms (protobuf, same allocations, in-process)")
    if b.get("single_ask_worker_ms") is not None:
        lines.append(f"    single ask: {b['single_ask_worker_ms']:.3f} ms of worker time per round trip "
                     f"(p50 {row['single_ask_p50_ms']} ms)")
    for proc, ms in b["cpu_ms"].items():
        if ms is not None and (ms > 0 or proc == RM_PROCESS):
            lines.append(f"    CPU {proc:<24} {ms:>6} ms")
    return "\n".join(lines)
