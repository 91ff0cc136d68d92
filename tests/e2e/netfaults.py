"""Network faults between the hosts of a ``NetLab``: cuts, one-way loss, random loss, delay and
jitter, flapping links. One interface for every kind: build a ``Fault``, ``Injector.inject`` it
(in effect when the call returns), ``Injector.heal`` it (gone when the call returns).

Every fault is rules inside the namespace of one host of the lab, on its own ``eth0``; nothing
outside the lab's namespaces is touched:

- **cut, one-way, loss** (``Fault.partition``, ``cut``, ``one_way``, ``loss``): an nftables table
  of the fault's own (``inet kfN``) with an input and an output chain dropping the packets from
  and to the peers (``numgen random mod 100 < P`` for random loss). Healing deletes the table.
- **delay and jitter** (``Fault.delay``): the kernel's ``netem`` qdisc is not available
  everywhere (it is not in this machine's kernel), so the packets of the link are handed to user
  space with an NFQUEUE rule and a delayer of the lab (this module run as a program, inside the
  host) gives each one back to the kernel after ``delay ± jitter`` (uniform, seeded), as netem
  does: TCP sees the longer round trips, and jitter reorders packets as on a real network. The
  rule is nftables' ``queue`` where the kernel has it, else iptables' ``NFQUEUE`` target (the
  same hook, through the compatibility layer), both with ``bypass``: a packet passes untouched
  when no delayer is bound.
- **flapping** (``Fault.flap``): a cut put in and taken out by a thread of the injector, down
  for ``down_s`` then up for ``up_s``, until healed.

A cut drops silently (no reset), as a pulled cable does: TCP retransmits with its backoff, so
data sent during a cut arrives after the heal, up to the next retransmission later.
"""

from __future__ import annotations

import argparse
import errno
import functools
import heapq
import itertools
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from tests.e2e.netns import IP, NFT, Host, NetLab, NetnsUnavailable, Proc, unavailable_reason as netns_reason

__all__ = ["Fault", "Injector", "unavailable_reason", "delay_unavailable_reason"]

IPTABLES = shutil.which("iptables") or "/usr/sbin/iptables"
PRIORITY = -10  # before any other filter chain of the namespace
DELAYER_READY = 10.0  # seconds a delayer may take to bind its queue


def unavailable_reason() -> str | None:
    """Why faults cannot be made here (no namespaces, no nftables), or None."""
    reason = netns_reason()
    if reason is not None:
        return reason
    if not os.access(NFT, os.X_OK):
        return "nftables' `nft` command is not installed (Debian: apt-get install nftables)"
    return _probe(lambda ns: _run([IP, "netns", "exec", ns, NFT, "-f", "-"], _drop_script("kprobe", None, "both", 100)))


@functools.cache
def delay_unavailable_reason() -> str | None:
    """Why delay faults cannot be made here (no NFQUEUE support in the kernel), or None."""
    reason = unavailable_reason()
    if reason is not None:
        return reason
    if not os.path.exists("/proc/net/netfilter/nfnetlink_queue"):
        return "the kernel has no nfnetlink_queue (NFQUEUE), which the delayer needs"

    def probe(ns: str) -> str | None:
        if _run([IP, "netns", "exec", ns, NFT, "-f", "-"], _queue_script("kprobe", ("127.0.0.2",), 1)) is None:
            return None
        if not os.access(IPTABLES, os.X_OK):
            return "the kernel refuses nftables' queue statement and iptables is not installed for its NFQUEUE target"
        return _run([IP, "netns", "exec", ns, IPTABLES, "-w", "-A", "OUTPUT", "-d", "127.0.0.2", "-j", "NFQUEUE",
                     "--queue-num", "1", "--queue-bypass"])
    return _probe(probe)


def _probe(check) -> str | None:
    ns = f"kfprobe{os.getpid()}"
    added = _run([IP, "netns", "add", ns])
    if added is not None:
        return added
    try:
        return check(ns)
    finally:
        _run([IP, "netns", "del", ns])


def _run(argv: list[str], stdin: str | None = None) -> str | None:
    """None if argv succeeded, else its error."""
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=15)
    return None if result.returncode == 0 else f"{' '.join(argv[-3:])}: {result.stderr.strip()}"


# -- faults ---------------------------------------------------------------------------------------

_NUMBERS = itertools.count(1)


@dataclass(frozen=True, eq=False)
class Fault:
    """One network fault, made by rules in ``host``'s namespace on its ``eth0``.

    ``peers`` empty means every other host (the host's whole link); ``direction`` "both", "out"
    (``host`` -> peers lost) or "in" (peers -> ``host`` lost)."""

    kind: str  # "cut", "loss", "delay" or "flap"
    host: Host
    peers: tuple[Host, ...] = ()
    direction: str = "both"
    percent: int = 100  # loss: the share of packets dropped, each way
    delay_ms: float = 0.0  # delay: each packet held this long, each way ...
    jitter_ms: float = 0.0  # ... plus or minus up to this (uniform)
    down_s: float = 0.0  # flap: cut this long ...
    up_s: float = 0.0  # ... then up this long, again and again
    number: int = field(default_factory=lambda: next(_NUMBERS))

    @classmethod
    def partition(cls, host: Host) -> "Fault":
        """``host`` cut off from every other host, both ways."""
        return cls("cut", host)

    @classmethod
    def cut(cls, a: Host, b: Host) -> "Fault":
        """The link between a and b cut, both ways (each still reaches everyone else)."""
        return cls("cut", a, (b,))

    @classmethod
    def one_way(cls, src: Host, dst: Host) -> "Fault":
        """src's packets to dst are lost; dst's packets to src arrive."""
        return cls("cut", src, (dst,), direction="out")

    @classmethod
    def loss(cls, a: Host, b: Host, percent: int) -> "Fault":
        """``percent`` % of the packets between a and b lost, at random, each way."""
        if not 0 < percent <= 100:
            raise ValueError(f"loss between {a.name} and {b.name}: percent must be in 1..100, got {percent}")
        return cls("loss", a, (b,), percent=percent)

    @classmethod
    def delay(cls, a: Host, b: Host, ms: float, jitter_ms: float = 0.0, direction: str = "both") -> "Fault":
        """Every packet between a and b held ``ms`` ± ``jitter_ms``, each way (``direction``
        "out": only a's packets to b; "in": only b's packets to a)."""
        if ms < 0 or not 0 <= jitter_ms <= ms:
            raise ValueError(f"delay between {a.name} and {b.name}: need 0 <= jitter ({jitter_ms}) <= delay ({ms})")
        if direction not in ("both", "out", "in"):
            raise ValueError(f"delay between {a.name} and {b.name}: direction is both, out or in, not {direction!r}")
        return cls("delay", a, (b,), direction=direction, delay_ms=ms, jitter_ms=jitter_ms)

    @classmethod
    def flap(cls, a: Host, b: Host | None, down_s: float, up_s: float) -> "Fault":
        """The link between a and b (b None: a's whole link) down ``down_s``, up ``up_s``, again."""
        if down_s <= 0 or up_s <= 0:
            raise ValueError(f"flap of {a.name}: down and up must be positive, got {down_s} and {up_s}")
        return cls("flap", a, () if b is None else (b,), down_s=down_s, up_s=up_s)

    def describe(self) -> str:
        link = f"{self.host.name}<->{'+'.join(p.name for p in self.peers)}" if self.peers else f"{self.host.name}<->all"
        if self.kind == "cut":
            if self.direction == "out":
                return f"one-way {self.host.name}->{'+'.join(p.name for p in self.peers)} lost"
            if self.direction == "in":
                return f"one-way {'+'.join(p.name for p in self.peers)}->{self.host.name} lost"
            return f"partition {self.host.name}" if not self.peers else f"cut {link}"
        if self.kind == "loss":
            return f"loss {self.percent}% {link}"
        if self.kind == "delay":
            arrow = {"both": link, "out": f"{self.host.name}->{'+'.join(p.name for p in self.peers)}",
                     "in": f"{'+'.join(p.name for p in self.peers)}->{self.host.name}"}[self.direction]
            return f"delay {self.delay_ms:.0f}±{self.jitter_ms:.0f} ms {arrow}"
        return f"flap {link} down {self.down_s:.1f}s up {self.up_s:.1f}s"


def _addresses(peers: tuple[Host, ...]) -> str:
    return "{ " + ", ".join(p.ip for p in peers) + " }"


def _drop_script(table: str, peers: tuple[Host, ...] | None, direction: str, percent: int) -> str:
    """A table of its own dropping host <-> peers traffic on eth0 (peers None/(): all of it)."""
    chance = f" numgen random mod 100 < {percent}" if percent < 100 else ""
    chains = ""
    if direction in ("both", "in"):
        match = f" ip saddr {_addresses(peers)}" if peers else ""
        chains += (f"    chain input {{\n        type filter hook input priority {PRIORITY}; policy accept;\n"
                   f"        iifname \"eth0\"{match}{chance} drop\n    }}\n")
    if direction in ("both", "out"):
        match = f" ip daddr {_addresses(peers)}" if peers else ""
        chains += (f"    chain output {{\n        type filter hook output priority {PRIORITY}; policy accept;\n"
                   f"        oifname \"eth0\"{match}{chance} drop\n    }}\n")
    return f"table inet {table} {{\n{chains}}}\n"


def _queue_script(table: str, addresses: tuple[str, ...], queue: int, direction: str = "both") -> str:
    """nftables' own queue statement for host <-> addresses (not in every kernel)."""
    where = "{ " + ", ".join(addresses) + " }"
    chains = ""
    if direction in ("both", "in"):
        chains += (f"    chain input {{\n        type filter hook input priority {PRIORITY}; policy accept;\n"
                   f"        ip saddr {where} queue num {queue} bypass\n    }}\n")
    if direction in ("both", "out"):
        chains += (f"    chain output {{\n        type filter hook output priority {PRIORITY}; policy accept;\n"
                   f"        ip daddr {where} queue num {queue} bypass\n    }}\n")
    return f"table inet {table} {{\n{chains}}}\n"


@dataclass
class _Active:
    fault: Fault
    table: str
    delayer: Proc | None = None
    chain: str | None = None  # iptables chain of a delay (when nftables has no queue statement)
    flapper: threading.Thread | None = None
    table_in: bool = False  # the fault's nftables table is in the host's ruleset
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


class Injector:
    """Puts faults into a lab and takes them out again; ``heal_all`` on the way out of a test."""

    def __init__(self, lab: NetLab, seed: int = 0) -> None:
        self.lab = lab
        self.seed = seed
        self._active: dict[int, _Active] = {}
        self._lock = threading.Lock()

    def inject(self, fault: Fault) -> Fault:
        """Put ``fault`` in; it is in effect when this returns."""
        with self._lock:
            if fault.number in self._active:
                raise ValueError(f"{fault.describe()} is already in")
            active = _Active(fault, f"kf{fault.number}")
            self._active[fault.number] = active
        if fault.kind in ("cut", "loss", "flap"):  # a flap starts down
            direction = "both" if fault.kind == "flap" else fault.direction
            self.lab.nft(fault.host, _drop_script(active.table, fault.peers, direction, fault.percent))
            active.table_in = True
        elif fault.kind == "delay":
            self._start_delay(active)
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        if fault.kind == "flap":
            active.flapper = threading.Thread(target=self._flap, args=(active,), name=f"flap-{fault.number}",
                                              daemon=True)
            active.flapper.start()
        return fault

    def heal(self, fault: Fault) -> None:
        """Take ``fault`` out; it is gone when this returns (a flap ends up)."""
        with self._lock:
            active = self._active.pop(fault.number, None)
        if active is None:
            return
        active.stop.set()
        if active.flapper is not None:
            active.flapper.join(10)
        if active.chain is not None:
            for hook in ("INPUT", "OUTPUT"):
                if fault.direction in ("both", "in" if hook == "INPUT" else "out"):
                    self._iptables(fault.host, "-D", hook, "-j", active.chain)
            self._iptables(fault.host, "-F", active.chain)
            self._iptables(fault.host, "-X", active.chain)
        elif active.table_in:
            self._delete_table(fault.host, active.table)
        if active.delayer is not None:
            self.lab.stop(active.delayer)  # gives back every packet it still holds, then unbinds
        if active.errors:
            raise AssertionError(f"{fault.describe()}: {'; '.join(active.errors)}")

    def heal_all(self) -> None:
        errors = []
        for number in list(self._active):
            active = self._active.get(number)
            if active is None:
                continue
            try:
                self.heal(active.fault)
            except (AssertionError, NetnsUnavailable) as exc:
                errors.append(str(exc))
        if errors:
            raise AssertionError("; ".join(errors))

    def active(self) -> list[Fault]:
        return [a.fault for a in self._active.values()]

    # -- kinds ------------------------------------------------------------------------------

    def _delete_table(self, host: Host, table: str) -> None:
        self.lab.nft(host, f"delete table inet {table}\n")

    def _flap(self, active: _Active) -> None:
        """Down (inject put the table in) for down_s, up for up_s, ... until healed."""
        f = active.fault
        while not active.stop.wait(f.down_s if active.table_in else f.up_s):
            try:
                if active.table_in:
                    self._delete_table(f.host, active.table)
                else:
                    self.lab.nft(f.host, _drop_script(active.table, f.peers, "both", 100))
            except NetnsUnavailable as exc:
                active.errors.append(str(exc))
                return
            active.table_in = not active.table_in

    def _start_delay(self, active: _Active) -> None:
        f = active.fault
        queue = f.number % 65000 + 1
        proc = self.lab.start(f.host, f"delayer-{f.number}", [
            sys.executable, "-m", "tests.e2e.netfaults", "delay", "--queue", str(queue),
            "--delay-ms", str(f.delay_ms), "--jitter-ms", str(f.jitter_ms), "--seed", str(self.seed + f.number)],
            stdout=subprocess.PIPE)
        active.delayer = proc
        assert proc.popen.stdout is not None
        ready, _, _ = select.select([proc.popen.stdout], [], [], DELAYER_READY)
        line = proc.popen.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line != "ready":
            self.lab.stop(proc)
            raise NetnsUnavailable(f"the delayer of {f.describe()} did not bind queue {queue}: {line!r}\n{proc.tail()}")
        addresses = tuple(p.ip for p in f.peers)
        script = _queue_script(active.table, addresses, queue, f.direction)
        if _run([IP, "netns", "exec", f.host.ns, NFT, "-f", "-"], script) is None:
            active.table_in = True
            return
        chain = active.chain = f"KF{f.number}"
        self._iptables(f.host, "-N", chain)
        for address in addresses:  # -s matches on the way in, -d on the way out
            for match in ("-s", "-d"):
                self._iptables(f.host, "-A", chain, match, address, "-j", "NFQUEUE", "--queue-num", str(queue),
                               "--queue-bypass")
        for hook, iface in (("INPUT", "-i"), ("OUTPUT", "-o")):
            if f.direction in ("both", "in" if hook == "INPUT" else "out"):
                self._iptables(f.host, "-I", hook, iface, "eth0", "-j", chain)

    def _iptables(self, host: Host, *args: str) -> None:
        if args[0] == "-D":  # the jump was put with the interface: delete it the same way
            args = (*args[:2], "-i" if args[1] == "INPUT" else "-o", "eth0", *args[2:])
        error = _run([IP, "netns", "exec", host.ns, IPTABLES, "-w", *args])
        if error is not None:
            raise NetnsUnavailable(f"iptables in {host.name}: {error}")


# -- the delayer: ``python -m tests.e2e.netfaults delay --queue N --delay-ms D --jitter-ms J`` --------
# A user-space netem over NFQUEUE (netfilter's nfnetlink_queue protocol, spoken over a raw
# netlink socket): each queued packet's id is held for its delay, then given back (ACCEPT).

NETLINK_NETFILTER = 12
SO_RCVBUFFORCE = 33
NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, CFG_MASK, CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND, CMD_UNBIND = 1, 2
COPY_META = 1  # the packet's metadata only: its id is all the delayer needs
F_FAIL_OPEN = 1  # a full queue lets packets pass instead of dropping them
PACKET_HDR, VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4


def _attr(kind: int, data: bytes) -> bytes:
    length = 4 + len(data)
    return struct.pack("=HH", length, kind) + data + b"\0" * (-length % 4)


class _Queue:
    """One bound nfnetlink queue: packet ids in, verdicts out."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        self.arrived: list[int] = []  # packet ids read while waiting for an acknowledgement

    def _send(self, msg: int, payload: bytes, ack: bool) -> None:
        self.seq += 1
        header = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(self.number))
        body = header + payload
        self.sock.send(struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg,
                                   NLM_F_REQUEST | (NLM_F_ACK if ack else 0), self.seq, 0) + body)
        if ack:
            while (error := self._read(want_ack=self.seq)) is None:
                pass
            if error:
                raise OSError(-error, f"nfnetlink_queue refused config of queue {self.number}: {os.strerror(-error)}")

    def config(self, *attrs: bytes) -> None:
        self._send(MSG_CONFIG, b"".join(attrs), ack=True)

    def accept(self, packet_id: int) -> None:
        self._send(MSG_VERDICT, _attr(VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id)), ack=False)

    def _read(self, want_ack: int | None = None) -> int | None:
        """Read one datagram: packet ids go to ``arrived``; returns the error code (0: ok) of the
        acknowledgement of ``want_ack`` if it was in it."""
        data = self.sock.recv(1 << 20)
        found = None
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, offset)
            if length < 16:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | MSG_PACKET:
                at = offset + 20  # past the netlink and nfgen headers
                while at + 4 <= offset + length:
                    alen, atype = struct.unpack_from("=HH", data, at)
                    if alen < 4:
                        break
                    if atype & 0x3FFF == PACKET_HDR:
                        self.arrived.append(struct.unpack_from(">I", data, at + 4)[0])
                    at += (alen + 3) & ~3
            elif kind == NLMSG_ERROR and seq == want_ack:
                found = struct.unpack_from("=i", data, offset + 16)[0]
            offset += (length + 3) & ~3
        return found


def _delayer(queue_number: int, delay: float, jitter: float, seed: int) -> int:
    rng = random.Random(seed)
    queue = _Queue(queue_number)
    queue.config(_attr(CFG_CMD, struct.pack("=BBH", CMD_BIND, 0, 0)))
    queue.config(_attr(CFG_PARAMS, struct.pack(">IB", 0, COPY_META)))
    queue.config(_attr(CFG_QUEUE_MAXLEN, struct.pack(">I", 50_000)))
    queue.config(_attr(CFG_MASK, struct.pack(">I", F_FAIL_OPEN)), _attr(CFG_FLAGS, struct.pack(">I", F_FAIL_OPEN)))
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    print("ready", flush=True)
    held: list[tuple[float, int]] = []  # (release at, packet id)
    while not stopping:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else 1.0
        readable, _, _ = select.select([queue.sock, wake_r], [], [], timeout)
        if queue.sock in readable:
            try:
                queue._read()
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:  # a burst overflowed the socket: those packets pass at unbind
                    raise
                print("delayer: netlink buffer overflowed", file=sys.stderr, flush=True)
        now = time.monotonic()
        for packet_id in queue.arrived:
            heapq.heappush(held, (now + max(0.0, delay + rng.uniform(-jitter, jitter)), packet_id))
        queue.arrived.clear()
        while held and held[0][0] <= now:
            queue.accept(heapq.heappop(held)[1])
    for _, packet_id in held:  # healed: everything held goes now
        queue.accept(packet_id)
    queue.config(_attr(CFG_CMD, struct.pack("=BBH", CMD_UNBIND, 0, 0)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.netfaults")
    sub = parser.add_subparsers(dest="command", required=True)
    delay = sub.add_parser("delay", help="hold every packet of an NFQUEUE queue for delay +- jitter")
    delay.add_argument("--queue", type=int, required=True)
    delay.add_argument("--delay-ms", type=float, required=True)
    delay.add_argument("--jitter-ms", type=float, default=0.0)
    delay.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return _delayer(args.queue, args.delay_ms / 1000, args.jitter_ms / 1000, args.seed)


if __name__ == "__main__":
    sys.exit(main())
