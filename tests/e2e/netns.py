"""Linux network namespaces as "hosts" for multi-host tests, and an RM that runs inside one.

``NetLab`` builds a private network out of namespaces it creates itself:

- one bridge namespace holding a Linux bridge ``br0``;
- one namespace per host, joined to the bridge by a veth pair created *inside* the bridge
  namespace (``ip -n BR link add vN type veth peer name eth0 netns HOST``), so nothing is ever
  created in, moved through or addressed from the namespace the tests run in;
- addresses from one private /24 (``10.250.X.0/24``, X from the pid), used only inside them.

Processes start with ``ip netns exec NS argv`` (which execs, so the pid is the program's own)
and are stopped by their own pid; ``close()`` then kills anything still inside the
namespaces (``ip netns pids``: only processes of this lab can be there) and deletes them,
which removes the veths and the bridge. Use it as a context manager or fixture so cleanup
runs on failure too.

``set_hosts`` gives the hosts an /etc/hosts (``/etc/netns/<ns>/hosts``, removed on close) so
processes can reach each other by name, as compose services do.

``NsRM`` is ``tests.e2e.sirm.SIRM`` across a namespace boundary: a driver process
(``python -m tests.e2e.netns rm-driver``) runs in a host namespace and pipes serialized
si.v1 messages both ways as JSON lines, so the test process keeps all the logic.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
IP = shutil.which("ip") or "/usr/sbin/ip"
NETNS_ETC = Path("/etc/netns")  # per-namespace /etc overrides of `ip netns exec`
_COUNTER = itertools.count(1)


class NetnsUnavailable(RuntimeError):
    """This machine refuses network namespaces (not root, no iproute2, or the kernel says no)."""


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here, or None when a probe namespace can be created and removed."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if not os.access(IP, os.X_OK):
        return "iproute2's `ip` command is not installed"
    probe = f"kprobe{os.getpid()}"
    add = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True, timeout=10)
    if add.returncode != 0:
        return f"the kernel refuses `ip netns add`: {add.stderr.strip()}"
    try:
        veth = subprocess.run([IP, "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
                              capture_output=True, text=True, timeout=10)
        if veth.returncode != 0:
            return f"the kernel refuses veth pairs in a namespace: {veth.stderr.strip()}"
        bridge = subprocess.run([IP, "-n", probe, "link", "add", "b0", "type", "bridge"],
                                capture_output=True, text=True, timeout=10)
        if bridge.returncode != 0:
            return f"the kernel refuses bridges in a namespace: {bridge.stderr.strip()}"
    finally:
        subprocess.run([IP, "netns", "del", probe], capture_output=True, timeout=10)
    return None


@dataclass(slots=True)
class Host:
    """One namespace joined to the lab's bridge: ``ip`` is its address on ``eth0``."""

    name: str
    ns: str
    ip: str
    bridge_port: str  # its veth end in the bridge namespace (``ip link set down`` there cuts it off)


@dataclass
class Proc:
    name: str
    host: Host
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([IP, *args], capture_output=True, text=True, timeout=15)
    if check and result.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


@dataclass
class NetLab:
    """A bridge plus host namespaces; start processes in them; cut links; remove it all on close()."""

    log_dir: Path
    tag: str = field(default_factory=lambda: f"k{os.getpid() % 100000}{next(_COUNTER)}")
    subnet: str = field(default_factory=lambda: f"10.250.{os.getpid() % 250}")
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)
    _etc_dirs: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.bridge_ns = f"{self.tag}-br"
        self._add_ns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")

    def __enter__(self) -> "NetLab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new namespace with ``eth0`` at the next address of the lab's /24, plugged into the bridge."""
        index = len(self.hosts) + 1
        if index > 250:
            raise ValueError("a lab holds at most 250 hosts")
        ns = f"{self.tag}-{name}"
        self._add_ns(ns)
        port = f"v{index}"
        _ip("-n", self.bridge_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0")
        _ip("-n", self.bridge_ns, "link", "set", port, "up")
        host = Host(name=name, ns=ns, ip=f"{self.subnet}.{index + 1}", bridge_port=port)
        _ip("-n", ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    def set_hosts(self, names: dict[str, str]) -> None:
        """Give every host of the lab an /etc/hosts of name -> address (as compose's service DNS does).

        ``ip netns exec`` bind-mounts ``/etc/netns/<ns>/hosts`` over ``/etc/hosts`` for the
        program it runs; close() removes the ``/etc/netns/<ns>`` directories made here.
        """
        text = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in names.items())
        if not NETNS_ETC.exists():
            NETNS_ETC.mkdir(parents=True)
            self._etc_dirs.append(NETNS_ETC)  # made here: removed (when empty) after ours
        for host in self.hosts.values():
            directory = NETNS_ETC / host.ns
            directory.mkdir(parents=True, exist_ok=True)
            self._etc_dirs.append(directory)
            (directory / "hosts").write_text(text)

    def link_down(self, host: Host) -> None:
        """Cut the host off the network (its bridge port goes down; the host keeps running)."""
        _ip("-n", self.bridge_ns, "link", "set", host.bridge_port, "down")

    def link_up(self, host: Host) -> None:
        _ip("-n", self.bridge_ns, "link", "set", host.bridge_port, "up")

    def start(self, host: Host, name: str, argv: list[str], env: dict[str, str] | None = None,
              stdin=subprocess.DEVNULL, stdout=None) -> Proc:
        """Run argv in the host's namespace; output goes to ``log_dir/name.log`` unless stdout is given."""
        log = self.log_dir / f"{name}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
        full_env.update({"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)})
        full_env.update(env or {})
        with open(log, "ab") as err:  # the child keeps its own descriptor
            popen = subprocess.Popen([IP, "netns", "exec", host.ns, *argv], stdin=stdin,
                                     stdout=err if stdout is None else stdout, stderr=err, env=full_env,
                                     cwd=REPO, start_new_session=True)
        proc = Proc(name, host, popen, log)
        self.procs.append(proc)
        return proc

    def korral(self, host: Host, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        """``korral ARGS`` in the host's namespace (the virtualenv's interpreter, this repository)."""
        return self.start(host, name, [sys.executable, "-m", "common.cli", *args], env=env)

    def run(self, host: Host, argv: list[str], timeout: float = 15.0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run argv to completion in the host's namespace (this environment plus env)."""
        return subprocess.run([IP, "netns", "exec", host.ns, *argv], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})

    def http_get_json(self, host: Host, url: str, timeout: float = 5.0) -> tuple[int, Any]:
        """GET url from inside host's namespace: (status, parsed JSON body); status 0 if unreachable."""
        code = ("import json, sys, urllib.request, urllib.error\n"
                "try:\n"
                f"    r = urllib.request.urlopen({url!r}, timeout={timeout})\n"
                "    print(r.status); print(r.read().decode())\n"
                "except urllib.error.HTTPError as e:\n"
                "    print(e.code); print(e.read().decode())\n"
                "except OSError as e:\n"
                "    print(0); print(json.dumps(str(e)))\n")
        result = self.run(host, [sys.executable, "-c", code], timeout=timeout + 10)
        status, _, body = result.stdout.partition("\n")
        try:
            return int(status), json.loads(body or "null")
        except ValueError:
            return 0, result.stdout + result.stderr

    def kill(self, proc: Proc, sig: int = signal.SIGKILL) -> None:
        if proc.alive():
            os.kill(proc.pid, sig)

    def stop(self, proc: Proc, timeout: float = 5.0) -> None:
        """SIGTERM by pid, SIGKILL after timeout; reaps it."""
        if proc.alive():
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
        try:
            proc.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def leftovers(self) -> list[int]:
        """Pids of processes still inside this lab's namespaces."""
        pids = []
        for ns in self._namespaces:
            out = _ip("netns", "pids", ns, check=False).stdout.split()
            pids += [int(p) for p in out if p.isdigit()]
        return pids

    def close(self) -> list[str]:
        """Stop every process (by pid), then delete every namespace; returns problems found on the way."""
        problems = []
        for proc in reversed(self.procs):
            try:
                self.stop(proc, timeout=3.0)
            except ProcessLookupError:
                pass
        for pid in self.leftovers():  # only processes started in our namespaces can be there
            problems.append(f"pid {pid} was still inside the lab's namespaces (killed)")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ns in reversed(self._namespaces):
            result = _ip("netns", "del", ns, check=False)
            if result.returncode != 0:
                problems.append(f"ip netns del {ns}: {result.stderr.strip()}")
        self._namespaces.clear()
        for directory in reversed(self._etc_dirs):
            if directory == NETNS_ETC:
                try:
                    directory.rmdir()  # only if no one else put a namespace's files there meanwhile
                except OSError:
                    pass
            else:
                shutil.rmtree(directory, ignore_errors=True)
        self._etc_dirs.clear()
        return problems

    def namespaces(self) -> list[str]:
        return list(self._namespaces)


# --- an RM inside a namespace ---------------------------------------------------------------------

class StreamEnded(Exception):
    """A stream of the RM ended; ``code`` is the gRPC status name, ``details`` its text."""

    def __init__(self, stream: str, code: str, details: str) -> None:
        super().__init__(f"{stream} stream ended: {code}: {details}")
        self.stream, self.code, self.details = stream, code, details


class RPCFailed(Exception):
    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


_STREAMS = ("node", "application", "allocation")


class NsRM:
    """SIRM's interface (register, open, nodes, apps, asks, next, wait_for, close) for an RM in a namespace."""

    def __init__(self, lab: NetLab, host: Host, address: str, rm_id: str) -> None:
        from common import si_pb2

        self.si = si_pb2
        self.rm_id = rm_id
        self.proc = lab.start(host, f"rm-{rm_id}", [sys.executable, "-m", "tests.e2e.netns", "rm-driver",
                                                     "--address", address, "--rm-id", rm_id],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.replies: queue.Queue = queue.Queue()
        self.streams: dict[str, queue.Queue] = {s: queue.Queue() for s in _STREAMS}
        self.ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        response_types = {"node": self.si.NodeResponse, "application": self.si.ApplicationResponse,
                          "allocation": self.si.AllocationResponse}
        for line in self.proc.popen.stdout:
            msg = json.loads(line)
            if "reply" in msg:
                self.replies.put(msg)
            elif msg.get("event") == "response":
                self.streams[msg["stream"]].put(response_types[msg["stream"]].FromString(
                    base64.b64decode(msg["data"])))
            elif msg.get("event") == "end":
                self.streams[msg["stream"]].put(StreamEnded(msg["stream"], msg["code"], msg["details"]))
        for q in self.streams.values():
            q.put(StreamEnded("driver", "DRIVER_EXITED", "the RM driver process exited"))
        self.replies.put({"reply": 0, "error": {"code": "DRIVER_EXITED", "details": self.proc.tail()}})

    def _call(self, op: str, timeout: float = 30.0, **fields) -> dict:
        rid = next(self.ids)
        self.proc.popen.stdin.write((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode())
        self.proc.popen.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"RM driver gave no answer to {op} within {timeout}s")
            reply = self.replies.get(timeout=left)
            if reply["reply"] in (rid, 0):
                if "error" in reply:
                    raise RPCFailed(reply["error"]["code"], reply["error"]["details"])
                return reply

    def register(self, config: str = "", timeout: float = 20.0) -> None:
        req = self.si.RegisterResourceManagerRequest(rmID=self.rm_id, version="test", policyGroup="queues",
                                                     config=config)
        self._call("register", timeout=timeout + 5, request=_b64(req), timeout_s=timeout)

    def open(self) -> None:
        for q in self.streams.values():  # what the previous streams left is stale
            while not q.empty():
                q.get_nowait()
        self._call("open")

    def send(self, stream: str, request) -> None:
        self._call("send", stream=stream, request=_b64(request))

    def nodes(self, *nodes) -> None:
        self.send("node", self.si.NodeRequest(rmID=self.rm_id, nodes=list(nodes)))

    def apps(self, *apps) -> None:
        self.send("application", self.si.ApplicationRequest(rmID=self.rm_id, new=list(apps)))

    def asks(self, *asks) -> None:
        self.send("allocation", self.si.AllocationRequest(rmID=self.rm_id, asks=list(asks)))

    def next(self, stream: str, timeout: float = 10.0):
        item = self.streams[stream].get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return item

    def wait_for(self, stream: str, predicate: Callable[[Any], bool], timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching {stream} response within {timeout}s")
            try:
                r = self.next(stream, left)
            except queue.Empty:
                continue
            if predicate(r):
                return r

    def wait_ended(self, timeout: float = 20.0) -> dict[str, StreamEnded]:
        """Read every stream until it ends; returns stream -> StreamEnded (responses meanwhile are dropped)."""
        ended: dict[str, StreamEnded] = {}
        deadline = time.monotonic() + timeout
        for stream in _STREAMS:
            while stream not in ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the {stream} stream did not end within {timeout}s")
                try:
                    self.next(stream, left)
                except queue.Empty:
                    continue
                except StreamEnded as end:
                    ended[stream] = end
        return ended

    def close_streams(self) -> None:
        self._call("close_streams")

    def close(self) -> None:
        if self.proc.alive():
            try:
                self._call("exit", timeout=5)
            except (TimeoutError, RPCFailed, OSError, ValueError):
                pass
            try:
                self.proc.popen.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)


def _b64(message) -> str:
    return base64.b64encode(message.SerializeToString()).decode()


def _rm_driver(address: str, rm_id: str) -> int:
    """The driver loop (runs inside a namespace): JSON lines in on stdin, JSON lines out on stdout."""
    import grpc

    from common import si_pb2, si_pb2_grpc

    out_lock = threading.Lock()

    def emit(obj: dict) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    channel = grpc.insecure_channel(address)
    stub = si_pb2_grpc.SchedulerStub(channel)
    methods = {"node": (stub.UpdateNode, si_pb2.NodeRequest),
               "application": (stub.UpdateApplication, si_pb2.ApplicationRequest),
               "allocation": (stub.UpdateAllocation, si_pb2.AllocationRequest)}
    outgoing: dict[str, queue.Queue] = {}

    def open_stream(name: str) -> None:
        method, request_type = methods[name]
        q: queue.Queue = queue.Queue()
        q.put(request_type(rmID=rm_id))  # attach the stream to the RM
        outgoing[name] = q

        def requests():
            while (item := q.get()) is not None:
                yield item

        def read():
            call = method(requests())
            try:
                for response in call:
                    emit({"event": "response", "stream": name,
                          "data": base64.b64encode(response.SerializeToString()).decode()})
                emit({"event": "end", "stream": name, "code": "OK", "details": ""})
            except grpc.RpcError as exc:
                emit({"event": "end", "stream": name, "code": exc.code().name, "details": exc.details() or ""})

        threading.Thread(target=read, daemon=True).start()

    for line in sys.stdin:
        cmd = json.loads(line)
        rid, op = cmd.get("id", 0), cmd["op"]
        try:
            if op == "register":
                req = si_pb2.RegisterResourceManagerRequest.FromString(base64.b64decode(cmd["request"]))
                stub.RegisterResourceManager(req, timeout=cmd.get("timeout_s", 20.0))
            elif op == "open":
                for q in outgoing.values():
                    q.put(None)
                for name in methods:
                    open_stream(name)
            elif op == "send":
                _, request_type = methods[cmd["stream"]]
                outgoing[cmd["stream"]].put(request_type.FromString(base64.b64decode(cmd["request"])))
            elif op == "close_streams":
                for q in outgoing.values():
                    q.put(None)
                outgoing.clear()
            elif op == "exit":
                emit({"reply": rid})
                break
            else:
                raise ValueError(f"unknown driver op {op!r}")
            emit({"reply": rid})
        except grpc.RpcError as exc:
            emit({"reply": rid, "error": {"code": exc.code().name, "details": exc.details() or ""}})
        except Exception as exc:  # noqa: BLE001 (reported to the test, which fails with it)
            emit({"reply": rid, "error": {"code": type(exc).__name__, "details": str(exc)}})
    for q in outgoing.values():
        q.put(None)
    channel.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.netns")
    sub = parser.add_subparsers(dest="command", required=True)
    drv = sub.add_parser("rm-driver", help="an SI RM driven by JSON lines on stdin (see NsRM)")
    drv.add_argument("--address", required=True)
    drv.add_argument("--rm-id", required=True)
    args = parser.parse_args(argv)
    return _rm_driver(args.address, args.rm_id)


if __name__ == "__main__":
    sys.exit(main())
