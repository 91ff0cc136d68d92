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

``portal(host, target)`` gives the test process a way in without joining the namespaces: a port
on the test's own loopback whose connections a forwarder process of the lab makes from inside
``host`` to ``target``. The listening socket is bound here and handed to the forwarder, which
runs in ``host`` (a socket keeps the namespace it was made in), so nothing is routed, addressed
or created between the lab and the test's namespace; the client-based RM and REST reads of the
test process reach the lab through it, their traffic crossing the lab's network from ``host``.

``nft(host, script)`` runs an nftables script inside a host (``tests/e2e/netfaults.py`` builds
its network faults from it).

An RM inside a host is the stub-based test RM with its calls made from there:
``SIRM.in_namespace(lab, host, address, rm_id)`` (``tests/e2e/sirm.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import stop_process

__all__ = ["NetLab", "Host", "Proc", "NetnsUnavailable", "unavailable_reason", "tails"]

REPO = Path(__file__).resolve().parents[2]
IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"
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


def tails(procs) -> str:
    """The end of each process's log, headed by its name and whether it still runs (for failures)."""
    return "\n".join(f"--- {p.name} (alive={p.alive()}) ---\n{p.tail()}" for p in procs)


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
              stdin=subprocess.DEVNULL, stdout=None, pass_fds: tuple[int, ...] = ()) -> Proc:
        """Run argv in the host's namespace; output goes to ``log_dir/name.log`` unless stdout is
        given; ``pass_fds`` are inherited by the program (``ip netns exec`` keeps them open)."""
        log = self.log_dir / f"{name}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
        full_env.update({"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)})
        full_env.update(env or {})
        with open(log, "ab") as err:  # the child keeps its own descriptor
            popen = subprocess.Popen([IP, "netns", "exec", host.ns, *argv], stdin=stdin,
                                     stdout=err if stdout is None else stdout, stderr=err, env=full_env,
                                     cwd=REPO, start_new_session=True, pass_fds=pass_fds)
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

    def portal(self, host: Host, target: str, name: str) -> str:
        """``127.0.0.1:PORT`` in the test's namespace, leading to ``target`` ("ip:port") from inside
        ``host``: a forwarder of the lab (stopped on close) makes each connection from there."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)  # connections queue until the forwarder accepts them
            port = listener.getsockname()[1]
            self.start(host, name, [sys.executable, "-m", "tests.e2e.netns", "portal", "--fd",
                                    str(listener.fileno()), "--to", target], pass_fds=(listener.fileno(),))
        finally:
            listener.close()  # the forwarder holds its own copy
        return f"127.0.0.1:{port}"

    def nft(self, host: Host, script: str) -> None:
        """Run an nftables script (``nft -f -``) inside host's namespace; NetnsUnavailable if refused."""
        result = subprocess.run([IP, "netns", "exec", host.ns, NFT, "-f", "-"], input=script, capture_output=True,
                                text=True, timeout=15)
        if result.returncode != 0:
            raise NetnsUnavailable(f"nft in {host.name}: {result.stderr.strip()}\n{script}")

    def kill(self, proc: Proc, sig: int = signal.SIGKILL) -> None:
        if proc.alive():
            os.kill(proc.pid, sig)

    def stop(self, proc: Proc, timeout: float = 5.0) -> None:
        """SIGTERM by pid, SIGKILL after timeout; reaps it."""
        stop_process(proc.popen, timeout)

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


# -- the portal's forwarder (``python -m tests.e2e.netns portal --fd N --to IP:PORT``) ----------------

async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, then half-close the other side (the reply may still come)."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()  # a reset on one side is a reset on the other


async def _portal(fd: int, target: str) -> None:
    host, port = target.rsplit(":", 1)

    async def forward(down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 30)
        except (OSError, asyncio.TimeoutError):
            down_w.transport.abort()
            return
        try:
            await asyncio.gather(_pipe(down_r, up_w), _pipe(up_r, down_w))
        finally:
            up_w.close()
            down_w.close()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(forward, sock=socket.socket(fileno=fd))
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.netns")
    sub = parser.add_subparsers(dest="command", required=True)
    portal = sub.add_parser("portal", help="accept on an inherited listening socket, connect to --to from here")
    portal.add_argument("--fd", type=int, required=True)
    portal.add_argument("--to", required=True, help="ip:port")
    args = parser.parse_args(argv)
    asyncio.run(_portal(args.fd, args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
