"""The cluster part of ``korral status``: every process of a (possibly multi-host) stack.

Read from the broker directly (``--broker``, a read-only STATUS query over
ZeroMQ, CURVE if configured) or from any rmproxy (``--rest-address``,
``GET /ws/v1/korral/stack``). Both give the broker's view: workers with their
partition, epoch and heartbeat age; rmproxies with the RMs they hold, each RM's
connection state and compatibility switch (the version in effect and where it came
from); partitions and their owners.
"""

from __future__ import annotations

from typing import Any

from common import netutil, security
from common.envelope import Envelope, EnvelopeError, Kind, decode, encode
from common.messages import Status

__all__ = ["STACK_PATH", "from_broker", "from_rest", "format_cluster"]

STACK_PATH = "/ws/v1/korral/stack"


def from_broker(address: str, curve_secret: str | None = None, curve_server: str | None = None,
                timeout: float = 3.0) -> dict[str, Any]:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        security.secure_client(sock, curve_secret, curve_server)
        sock.connect(address)
        sock.send(encode(Envelope(Kind.STATUS)))
        if not sock.poll(int(timeout * 1000)):
            raise OSError(f"the broker at {address} did not answer within {timeout:.0f}s")
        raw = sock.recv()
        try:
            status = Status.decode(decode(raw).body, raw)
        except EnvelopeError as exc:
            raise OSError(f"the broker at {address} answered with {exc}") from None
        return {"source": f"broker {address}", "broker": True, **status.doc}
    finally:
        sock.close(0)
        ctx.term()


def from_rest(rest_address: str, timeout: float = 3.0) -> dict[str, Any]:
    host, port = netutil.parse_host_port(rest_address, "rest address")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    answer = netutil.http_get_json(f"http://{f'[{host}]' if ':' in host else host}:{port}{STACK_PATH}",
                                   timeout=timeout)
    if answer.status != 200 or not isinstance(answer.body, dict):
        raise OSError(f"{rest_address}{STACK_PATH} answered HTTP {answer.status}")
    body = answer.body
    return {"source": f"rmproxy {rest_address}", "broker": bool(body.get("broker")),
            **(body.get("cluster") or {})}


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def _age(value: Any) -> str:
    return f"{value:.1f}s" if isinstance(value, (int, float)) else "-"


def _compatibility(c: Any) -> str:
    """The RM's compatibility switch and where it came from (``common.compat.CompatChoice``)."""
    if not isinstance(c, dict):
        return "-"
    return f"{c.get('version')} ({c.get('source')}: {c.get('detail')})"


def format_cluster(doc: dict[str, Any]) -> str:
    age = doc.get("viewAgeMs")
    as_of = f"; as of the broker's message {age} ms ago" if isinstance(age, int) else ""
    lines = [f"cluster (from {doc.get('source')}; broker {'connected' if doc.get('broker') else 'NOT connected'}"
             f"{as_of})"]
    workers = doc.get("workers") or []
    lines.append(f" workers: {len(workers)}")
    if workers:
        lines += _table(("WORKER", "HOST", "PID", "PARTITION", "EPOCH", "HEARTBEAT", "PIN"),
                        [(w.get("name", ""), w.get("host", ""), str(w.get("pid") or "-"),
                          w.get("partition") or "(spare)", str(w.get("epoch") or "-"),
                          _age(w.get("heartbeatAge")), w.get("pin") or "-") for w in workers])
    proxies = doc.get("rmproxies") or []
    lines.append(f" rmproxies: {len(proxies) or doc.get('proxies', 0)}")
    if proxies:
        lines += _table(("RMPROXY", "HOST", "PID", "HEARTBEAT"),
                        [(p.get("name", ""), p.get("host", ""), str(p.get("pid") or "-"), _age(p.get("heartbeatAge")))
                         for p in proxies])
    rms = [(rm, info, p.get("name", "")) for p in proxies for rm, info in (p.get("rms") or {}).items()]
    lines.append(f" RMs: {len(rms)}")
    if rms:
        lines += _table(("RM", "STATE", "PARTITIONS", "RMPROXY", "COMPATIBILITY"),
                        [(rm, info.get("state", "?"), ",".join(info.get("partitions") or []), proxy,
                          _compatibility(info.get("compatibility"))) for rm, info, proxy in rms])
    parts = doc.get("partitions") or []
    unowned = [p for p in parts if not p.get("worker")]
    lines.append(f" partitions: {len(parts)}" + (f", {len(unowned)} WITHOUT A WORKER" if unowned else ""))
    if parts:
        lines += _table(("RM", "PARTITION", "WORKER", "EPOCH", "STATE"),
                        [(p.get("rmID", ""), p.get("partition", ""), p.get("worker") or "-",
                          str(p.get("epoch") or "-"),
                          p.get("state") or ("owned" if p.get("loaded") else "loading")) for p in parts])
    return "\n".join(lines)
