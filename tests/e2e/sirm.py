"""The stub-based test RM: an RM built only on the generated ``si.v1`` stubs, as any upstream-generated
client is (no Korral client library involved).

``SIRM`` registers, opens the three update streams, sends requests and reads responses with a
deadline. It speaks one SI revision (``SEED``, common/si.proto, by default; ``V18``, common/si_v18.proto,
each from its own stubs only), or ``RAW``: frames of request bytes no stub can build (garbage, one
message with both revisions' fields), bound to the RM by the ``rmid`` metadata, responses as bytes.
Korral's own calls (``korral.v1`` UpdateConfiguration, Shutdown) go through the same transport.
Where its gRPC calls are made is a transport detail:

- ``GrpcTransport`` (the default): in this process;
- ``NamespaceTransport`` (``SIRM.in_namespace``): in a driver process inside a host of a
  ``tests.e2e.netns.NetLab``. The driver is this module run as a program; it makes the calls with
  a ``GrpcTransport`` and pipes serialized si.v1 messages both ways as JSON lines, so the test
  process keeps all the logic.

Either way, the end of a stream comes out of ``next`` as a ``grpc.RpcError`` (``code()``,
``details()``), and a failed call raises one. Message builders are in ``tests/si_builders.py``.
"""

from __future__ import annotations

import argparse
import base64
import functools
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, NamedTuple, TypeVar

import grpc

from common import korral_pb2, korral_pb2_grpc, si_pb2, si_pb2_grpc, si_v18_pb2, si_v18_pb2_grpc

__all__ = ["SIRM", "Revision", "SEED", "V18", "RAW", "StreamEnded", "GrpcTransport",
           "NamespaceTransport"]

T = TypeVar("T")


class _Kind(NamedTuple):
    method: str
    request: type
    response: type


class _Bytes:
    """A raw frame's "message type": the bytes as they are."""

    FromString = staticmethod(bytes)


class Revision(NamedTuple):
    """What an RM of one SI revision is made of: its messages (``pb``; None for raw frames), its
    stub over a channel, and its three streams' methods and message types."""

    name: str
    pb: ModuleType | None
    stub: Callable[[grpc.Channel, str], Any]  # (channel, rm_id) -> the stub
    streams: dict[str, _Kind]


def _streams(pb: Any) -> dict[str, _Kind]:
    return {"node": _Kind("UpdateNode", pb.NodeRequest, pb.NodeResponse),
            "application": _Kind("UpdateApplication", pb.ApplicationRequest, pb.ApplicationResponse),
            "allocation": _Kind("UpdateAllocation", pb.AllocationRequest, pb.AllocationResponse)}


def _raw_stub(channel: grpc.Channel, rm_id: str) -> SimpleNamespace:
    """The three stream methods on bytes, bound to ``rm_id`` by metadata (a frame may carry no rmID)."""
    return SimpleNamespace(**{
        method: functools.partial(channel.stream_stream(f"/si.v1.Scheduler/{method}", request_serializer=bytes,
                                                        response_deserializer=bytes), metadata=(("rmid", rm_id),))
        for method in ("UpdateNode", "UpdateApplication", "UpdateAllocation")})


SEED = Revision("seed", si_pb2, lambda channel, rm_id: si_pb2_grpc.SchedulerStub(channel), _streams(si_pb2))
V18 = Revision("v1.8", si_v18_pb2, lambda channel, rm_id: si_v18_pb2_grpc.SchedulerStub(channel),
               _streams(si_v18_pb2))
RAW = Revision("raw", None, _raw_stub, {name: _Kind(kind.method, _Bytes, _Bytes) for name, kind in _streams(si_pb2).items()})
REVISIONS = {r.name: r for r in (SEED, V18, RAW)}

# the unary calls: method -> (service, the request's type in a revision)
_UNARY: dict[str, tuple[str, Callable[[Revision], type]]] = {
    "RegisterResourceManager": ("si", lambda rev: rev.pb.RegisterResourceManagerRequest),
    "UpdateConfiguration": ("korral", lambda rev: si_pb2.UpdateConfigurationRequest),
    "Shutdown": ("korral", lambda rev: korral_pb2.ShutdownRequest),
}


class StreamEnded(grpc.RpcError):
    """A stream's end or a call's failure with ``grpc.RpcError``'s ``code()`` and ``details()``: how
    a normal end, and any end reported across the namespace boundary, comes out."""

    def __init__(self, what: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{what}: {code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class SIRM:
    """One RM: ``register``, ``open``, send (``nodes``, ``apps``, ``asks``, ...), read (``next``,
    ``wait_for``, ``wait_accepted``, ``wait_allocated``, ``wait_ended``), ``close``."""

    def __init__(self, address: str, rm_id: str = "rm-test", transport=None, revision: Revision = SEED) -> None:
        self.address, self.rm_id, self.revision = address, rm_id, revision
        self.transport = transport if transport is not None else GrpcTransport(address, rm_id, revision)
        self.responses: dict[str, queue.Queue] = {}

    @classmethod
    def in_namespace(cls, lab, host, address: str, rm_id: str, revision: Revision = SEED) -> "SIRM":
        """The RM with its calls made from inside ``host`` of ``lab`` (a ``NetLab``)."""
        return cls(address, rm_id, NamespaceTransport(lab, host, address, f"rm-{rm_id}", rm_id, revision), revision)

    def raw(self, stream: str, *frames: bytes) -> "SIRM":
        """Another RM object of this RM's id, its ``stream`` opened (not attached: the metadata binds
        it) on raw frames, ``frames`` sent: it replaces this RM's stream of that kind in rmproxy."""
        raw = SIRM(self.address, self.rm_id, revision=RAW)
        raw.reopen(stream, attach=False)
        for frame in frames:
            raw.send(stream, frame)
        return raw

    def __enter__(self) -> "SIRM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self, *nodes, config: str = "") -> "SIRM":
        """``register``, ``open``, then report ``nodes`` and wait until they are accepted."""
        self.register(config)
        self.open()
        return self.report(nodes)

    def report(self, nodes=(), apps=()) -> "SIRM":
        """Send ``nodes`` (one request), then ``apps`` (one), each waited for until accepted."""
        if nodes:
            self.nodes(*nodes)
            self.wait_accepted("node", {n.nodeID for n in nodes})
        if apps:
            self.apps(*apps)
            self.wait_accepted("application", {a.applicationID for a in apps})
        return self

    # -- calls ------------------------------------------------------------------------------

    def register(self, config: str = "", timeout: float = 20.0, build_info: dict[str, str] | None = None,
                 extra_config: dict[str, str] | None = None) -> None:
        self.transport.unary("RegisterResourceManager", self.revision.pb.RegisterResourceManagerRequest(
            rmID=self.rm_id, version="test", policyGroup="queues", config=config, buildInfo=build_info or {},
            extraConfig=extra_config or {}), timeout)

    def update_config(self, config: str, extra_config: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        """korral.v1 UpdateConfiguration of this RM's config."""
        self.transport.unary("UpdateConfiguration", si_pb2.UpdateConfigurationRequest(
            rmID=self.rm_id, policyGroup="queues", config=config, extraConfig=extra_config or {}), timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """korral.v1 Shutdown: rmproxy forgets the RM and frees its partitions' workers."""
        self.transport.unary("Shutdown", korral_pb2.ShutdownRequest(rmID=self.rm_id), timeout)

    def open(self, attach: bool = True) -> None:
        """Open the three update streams, attached each with an empty request carrying the rmID;
        what the streams opened before send from now on is dropped."""
        for stream in self.revision.streams:
            self.reopen(stream, attach)

    def reopen(self, stream: str, attach: bool = True) -> None:
        """Open (again) one update stream, e.g. after Korral ended it; what it sent before is dropped."""
        kind = self._kind(stream)
        self.responses[stream] = queue.Queue()
        self.transport.open({stream: self.responses[stream]}, {stream: kind.request(rmID=self.rm_id) if attach else None})

    def send(self, stream: str, request) -> None:
        self._responses(stream)  # the stream is known and open
        self.transport.send(stream, request)

    def request(self, stream: str, **fields) -> None:
        """One request of this revision on ``stream`` with ``fields`` (and the rmID)."""
        self.send(stream, self._kind(stream).request(rmID=self.rm_id, **fields))

    def nodes(self, *nodes) -> None:
        self.request("node", nodes=nodes)

    def apps(self, *apps) -> None:
        self.request("application", new=apps)

    def remove_apps(self, *removals) -> None:
        self.request("application", remove=removals)

    def asks(self, *asks) -> None:
        """Asks: ``AllocationAsk``s in the seed, ``Allocation``s without a node in v1.8."""
        self.request("allocation", **{"asks" if self.revision is SEED else "allocations": asks})

    def allocations(self, *allocations) -> None:
        """Allocations the RM placed or asks (v1.8 only: the seed has no such field)."""
        self.request("allocation", allocations=allocations)

    def releases(self, *releases) -> None:
        self.request("allocation", releases=self.revision.pb.AllocationReleasesRequest(allocationsToRelease=releases))

    def cancel_streams(self) -> None:
        """Cancel the streams, as a restarting RM's go away."""
        self.transport.cancel_streams()

    def close(self) -> None:
        self.transport.close()

    # -- reads: each a stream read with a deadline -------------------------------------------

    def next(self, stream: str, timeout: float = 10.0):
        """The next response of ``stream``; its end raises (a ``grpc.RpcError``), and so does
        nothing within ``timeout`` (``TimeoutError``)."""
        try:
            item = self._responses(stream).get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise TimeoutError(f"no {stream} response for {self.rm_id} within {timeout:.1f}s") from None
        if isinstance(item, Exception):
            raise item
        return item

    def _kind(self, stream: str) -> _Kind:
        if stream not in self.revision.streams:
            raise ValueError(f"{self.rm_id}: no stream {stream!r}; the streams are {', '.join(self.revision.streams)}")
        return self.revision.streams[stream]

    def _responses(self, stream: str) -> queue.Queue:
        self._kind(stream)
        if stream not in self.responses:
            raise RuntimeError(f"{self.rm_id}: the {stream} stream is not open (call open() first)")
        return self.responses[stream]

    def read_until(self, stream: str, step: Callable[[Any], T | None], timeout: float,
                   what: Callable[[], str]) -> T:
        """Feed each response of ``stream`` to ``step`` until it returns something other than None,
        and return that; at the deadline ``TimeoutError`` saying ``what()`` was awaited."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = step(self.next(stream, deadline - time.monotonic()))
            except TimeoutError:
                raise TimeoutError(f"{what()} not within {timeout}s ({self.rm_id}'s {stream} stream)") from None
            if found is not None:
                return found

    def wait_for(self, stream: str, predicate: Callable[[Any], Any], timeout: float = 10.0):
        """The first response of ``stream`` for which ``predicate`` holds."""
        return self.read_until(stream, lambda r: r if predicate(r) else None, timeout,
                               lambda: f"a matching {stream} response")

    def collect(self, stream: str, fields: str, count: int, timeout: float = 15.0,
                keep: Callable[[Any], bool] = lambda item: True) -> list:
        """Read ``stream`` until ``count`` items of the responses' ``fields`` (e.g. "new", or
        "accepted rejected") for which ``keep`` holds came: those items, in order (more if the last
        response had more)."""
        got: list = []

        def step(r):
            got.extend(x for field in fields.split() for x in getattr(r, field) if keep(x))
            return got if len(got) >= count else None

        return self.read_until(stream, step, timeout, lambda: f"{count} {stream} {fields} (got {len(got)})")

    def wait_accepted(self, stream: str, ids, timeout: float = 15.0) -> None:
        """Read ``stream`` ("node" or "application") until every id of ``ids`` is accepted (responses
        come per partition); a rejection of one of them fails the test naming it."""
        want, seen = set(ids), set()
        key = "nodeID" if stream == "node" else "applicationID"

        def step(r):
            rejected = [x for x in r.rejected if getattr(x, key) in want]
            assert not rejected, f"{stream}: rejected {rejected}"
            seen.update(getattr(a, key) for a in r.accepted)
            return True if want <= seen else None

        self.read_until(stream, step, timeout, lambda: f"{stream}s {sorted(want - seen)} accepted")

    def wait_allocated(self, keys, timeout: float = 20.0) -> dict[str, si_pb2.Allocation]:
        """Read allocation responses until every key of ``keys`` is allocated: key -> Allocation.
        One of them rejected, or allocated twice, fails the test."""
        want, got = set(keys), {}

        def step(r):
            rejected = [x for x in (r.rejectedAllocations if self.revision is V18 else r.rejected)
                        if x.allocationKey in want]
            assert not rejected, f"asks rejected: {rejected}"
            for a in r.new:
                if a.allocationKey in want:
                    assert a.allocationKey not in got, f"allocation key {a.allocationKey} allocated twice"
                    got[a.allocationKey] = a
            return got if want <= got.keys() else None

        return self.read_until("allocation", step, timeout, lambda: f"allocations of {sorted(want - got.keys())}")

    def wait_ended(self, timeout: float = 20.0) -> dict[str, grpc.RpcError]:
        """Read every stream until it ends (responses meanwhile dropped): stream -> its end."""
        ended: dict[str, grpc.RpcError] = {}
        deadline = time.monotonic() + timeout
        for stream in list(self.responses):
            try:
                self.read_until(stream, lambda r: None, deadline - time.monotonic(), lambda: f"the end of {stream}")
            except grpc.RpcError as end:
                ended[stream] = end
        return ended


class GrpcTransport:
    """The RM's calls, made in this process on the generated stubs."""

    def __init__(self, address: str, rm_id: str, revision: Revision = SEED) -> None:
        self.channel = grpc.insecure_channel(address)
        self.revision = revision
        self.stubs = {"si": revision.stub(self.channel, rm_id), "korral": korral_pb2_grpc.KorralStub(self.channel)}
        self._requests: dict[str, queue.Queue] = {}
        self._calls: dict[str, Any] = {}

    def unary(self, method: str, request, timeout: float) -> None:
        getattr(self.stubs[_UNARY[method][0]], method)(request, timeout=timeout)

    def open(self, sinks: dict[str, Any], first: dict[str, Any]) -> None:
        """Open each stream of ``sinks`` (the requests of the ones opened before under that name end);
        its responses, then its end (a ``grpc.RpcError``), go to ``sinks[name].put``."""
        for name, sink in sinks.items():
            self._end_requests(name)
            requests: queue.Queue = queue.Queue()
            if first[name] is not None:
                requests.put(first[name])
            call = getattr(self.stubs["si"], self.revision.streams[name].method)(iter(requests.get, None))
            self._requests[name], self._calls[name] = requests, call
            threading.Thread(target=_pump, args=(name, call, sink), daemon=True).start()

    def send(self, stream: str, request) -> None:
        self._requests[stream].put(request)

    def _end_requests(self, *names: str) -> None:
        for name in names or list(self._requests):
            if name in self._requests:
                self._requests.pop(name).put(None)

    def cancel_streams(self) -> None:
        self._end_requests()
        for call in self._calls.values():
            call.cancel()
        self._calls.clear()

    def close(self) -> None:
        self._end_requests()
        self.channel.close()


def _pump(name: str, call, sink) -> None:
    try:
        for response in call:
            sink.put(response)
        sink.put(StreamEnded(f"{name} stream", grpc.StatusCode.OK, ""))
    except grpc.RpcError as exc:
        sink.put(exc)


# --- across a namespace boundary ------------------------------------------------------------------

def _b64(message) -> str:
    return base64.b64encode(message if isinstance(message, bytes) else message.SerializeToString()).decode()


def _decode(message_type: type, text: str):
    return message_type.FromString(base64.b64decode(text))


class NamespaceTransport:
    """The RM's calls, made by a driver process started in ``host`` of ``lab``."""

    def __init__(self, lab, host, address: str, name: str, rm_id: str, revision: Revision = SEED) -> None:
        """``name``: the driver's name in the lab (its log is ``name.log``)."""
        self.revision = revision
        self.proc = lab.start(host, name, [sys.executable, "-m", "tests.e2e.sirm", "--address", address,
                                           "--rm-id", rm_id, "--revision", revision.name],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.replies: queue.Queue = queue.Queue()
        self.ids = itertools.count(1)
        self._lock = threading.Lock()
        # stream -> (generation, sink): responses of a stream opened before under that name are dropped
        self._generations = itertools.count(1)
        self._sinks: dict[str, tuple[int, Any]] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.popen.stdout:
            msg = json.loads(line)
            if "reply" in msg:
                self.replies.put(msg)
                continue
            with self._lock:
                generation, sink = self._sinks.get(msg["stream"], (None, None))
            if generation != msg["generation"]:
                continue
            if "response" in msg:
                sink.put(_decode(self.revision.streams[msg["stream"]].response, msg["response"]))
            else:
                sink.put(StreamEnded(f"{msg['stream']} stream", grpc.StatusCode[msg["code"]], msg["details"]))
        gone = StreamEnded("RM driver", grpc.StatusCode.UNAVAILABLE, f"the RM driver exited:\n{self.proc.tail()}")
        with self._lock:
            for _, sink in self._sinks.values():
                sink.put(gone)
        self.replies.put({"reply": 0, "error": {"code": "UNAVAILABLE", "details": gone.details()}})

    def _call(self, op: str, timeout: float = 30.0, **fields) -> None:
        rid = next(self.ids)
        self.proc.popen.stdin.write((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
        self.proc.popen.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self.replies.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                raise TimeoutError(f"the RM driver gave no answer to {op} within {timeout}s") from None
            if reply["reply"] in (rid, 0):
                if "error" in reply:
                    error = reply["error"]
                    raise StreamEnded(op, grpc.StatusCode[error["code"]], error["details"])
                return

    def unary(self, method: str, request, timeout: float) -> None:
        self._call("unary", timeout=timeout + 5, method=method, request=_b64(request), timeout_s=timeout)

    def open(self, sinks: dict[str, Any], first: dict[str, Any]) -> None:
        with self._lock:
            generations = {name: next(self._generations) for name in sinks}
            self._sinks.update({name: (generations[name], sink) for name, sink in sinks.items()})
        self._call("open", generations=generations,
                   first={name: None if msg is None else _b64(msg) for name, msg in first.items()})

    def send(self, stream: str, request) -> None:
        self._call("send", stream=stream, request=_b64(request))

    def cancel_streams(self) -> None:
        self._call("cancel_streams")

    def close(self) -> None:
        if self.proc.alive():
            try:
                self._call("exit", timeout=5)
            except (TimeoutError, grpc.RpcError, OSError, ValueError):
                pass
            try:
                self.proc.popen.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)


class _Forward:
    """A sink of the driver: writes what a stream delivers to stdout, tagged with its open()."""

    def __init__(self, emit: Callable[[dict], None], stream: str, generation: int) -> None:
        self.emit, self.tag = emit, {"stream": stream, "generation": generation}

    def put(self, item) -> None:
        if isinstance(item, grpc.RpcError):
            self.emit({**self.tag, "code": item.code().name, "details": item.details() or ""})
        else:
            self.emit({**self.tag, "response": _b64(item)})


def _driver(address: str, rm_id: str, revision: Revision) -> int:
    """The driver loop (runs inside a namespace): JSON lines in on stdin, JSON lines out on stdout."""
    transport = GrpcTransport(address, rm_id, revision)
    out_lock = threading.Lock()

    def emit(obj: dict) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    def open_(cmd: dict) -> None:
        transport.open({name: _Forward(emit, name, generation) for name, generation in cmd["generations"].items()},
                       {name: None if text is None else _decode(revision.streams[name].request, text)
                        for name, text in cmd["first"].items()})

    ops: dict[str, Callable[[dict], None]] = {
        "unary": lambda cmd: transport.unary(
            cmd["method"], _decode(_UNARY[cmd["method"]][1](revision), cmd["request"]), cmd["timeout_s"]),
        "open": open_,
        "send": lambda cmd: transport.send(cmd["stream"],
                                           _decode(revision.streams[cmd["stream"]].request, cmd["request"])),
        "cancel_streams": lambda cmd: transport.cancel_streams(),
        "exit": lambda cmd: None,
    }
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] not in ops:
                raise ValueError(f"unknown driver op {cmd['op']!r}")
            ops[cmd["op"]](cmd)
            emit({"reply": cmd["id"]})
        except grpc.RpcError as exc:
            emit({"reply": cmd["id"], "error": {"code": exc.code().name, "details": exc.details() or ""}})
        except Exception as exc:  # noqa: BLE001 (reported to the test, which fails with it)
            emit({"reply": cmd["id"], "error": {"code": "INTERNAL", "details": f"{type(exc).__name__}: {exc}"}})
        if cmd["op"] == "exit":
            break
    transport.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.sirm",
                                     description="an SI RM driven by JSON lines on stdin (NamespaceTransport)")
    parser.add_argument("--address", required=True)
    parser.add_argument("--rm-id", required=True)
    parser.add_argument("--revision", choices=REVISIONS, default=SEED.name)
    args = parser.parse_args(argv)
    return _driver(args.address, args.rm_id, REVISIONS[args.revision])


if __name__ == "__main__":
    sys.exit(main())
