"""``korral bench k8s``: pods per second through the Kubernetes shim, on the fake cluster.

Processes, each its own: a Korral stack (``korral up``, one worker: one partition), the fake API
server with its fake kubelet (``korral k8s-fake --nodes N``), the shim (``korral k8s-shim``), and
this process, which creates the pods and watches them. The creator is here, not in the shim and
not in the fake: pods arrive over HTTP as a controller would create them (so the API server's
cost of a create is in the fake's figure, as a real server pays it), and its own CPU is reported
apart (``bench``), never in the shim's or the fake's. It sends pre-encoded pod bodies on a few
kept-alive connections, which costs little next to the processes measured.

The workload: ``--pods`` pods created at ``--rate`` pods/s (for at most ``--duration`` seconds),
in ``--apps`` applications (label ``applicationId``) over ``--queues`` queues (label ``queue``:
``root.q<i>``), four sizes (0.5-4 CPUs), each running ``--run-seconds`` on average (0.5-1.5 times
that, the fake kubelet's ``korral.io/fake-run-seconds``) then ending ``Succeeded``, so the
cluster stays busy at ``rate x run-seconds`` running pods and the shim handles pods ending as
well as starting.

With ``--constraints`` every pod also carries inter-pod constraints the core evaluates: label
``deploy: d-<app>`` (each application is a deployment), required pod anti-affinity on
``kubernetes.io/hostname`` against its own deployment's pods (at most one running pod of a
deployment per node), and a topology spread constraint on ``topology.kubernetes.io/zone``
(``maxSkew`` 1, ``DoNotSchedule``, the same selector) over ``ZONES`` zones (the fake's nodes are
made as node pools ``zone-0`` .. labelled with the zone). Compare its pods/s with a run without.

Measured, over the steady window (from the time the first pods end, ``run-seconds`` x 1.5, to
the end of the creation; at least the last 80 % of it):

- pods bound per second (a pod is bound when this process's watch sees its ``nodeName``), and
  whether the rate is sustained: the pods were created at the rate asked for (at least 95 % of
  it: on a saturated machine the creator falls behind, and a backlog that does not grow then says
  nothing about the rate asked for) and the backlog (created, not bound) does not grow;
- creation -> binding latency, p50/p99/max: from the create request being sent to the watch
  line that shows the pod bound;
- CPU seconds per 1,000 pods bound, per process: the fake, the shim, rmproxy, the broker, the
  worker, Redis, and this process (from /proc), and the same over the whole run.

``--rate`` may list several rates and ``--runs`` repeats each; every run starts everything
afresh. ``--baseline DIR`` runs the fake and the shim from another source tree as well,
alternating run by run with this one, to compare two versions on one machine at the same load.
Output: a line per run (``--json``: one JSON object per run), the medians, and for each run a
JSON file and a PNG over time (``benchmarks.k8s_plot``) in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import orjson

from common.netutil import free_ports
from common.series import percentile, slope
from benchmarks.cpu import cpu_seconds
from k8s_shim.kube.http import HttpError, Pool

__all__ = ["configure", "run", "Shape", "k8s_run", "pod_body", "queues_yaml", "summarize"]

NAMESPACE = "bench"
SHIM_NAMESPACE = "yunikorn"
RM_ID = "mycluster"
SIZES = (("500m", "1Gi"), ("1", "2Gi"), ("2", "4Gi"), ("4", "8Gi"))
SENDERS = 32  # connections the creator sends on (a create waits in the API server's queue: 8 capped the rate near 400/s)
TICK = 0.004  # seconds between the creator's rounds
SAMPLE = 0.25  # seconds between samples of the counts and the CPU
FLAT_FRACTION = 0.02  # a backlog growing by more than 2 % of the rate is not sustained
OFFERED_FRACTION = 0.95  # created below 95 % of the rate asked for: that rate was not offered
WARMUP_PODS = 20
ZONES = 3  # --constraints: the zones the nodes are spread over
ZONE_KEY, HOST_KEY = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
BENCH = "bench"  # this process's name in the CPU figures
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class Shape:
    nodes: int = 5000
    pods: int = 50_000
    rate: float = 1000.0
    duration: float = 0.0  # 0: pods / rate
    apps: int = 300
    queues: int = 10
    run_seconds: float = 10.0
    seed: int = 1
    tls: bool = False
    constraints: bool = False  # pods carry hostname anti-affinity and zone spread (module doc)

    @property
    def creation_seconds(self) -> float:
        planned = self.pods / self.rate
        return min(planned, self.duration) if self.duration > 0 else planned


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", default="1000",
                        help="pods created per second; several comma-separated rates run one after the other "
                             "(default 1000)")
    parser.add_argument("--pods", type=int, default=50_000, help="pods to create per run (default 50000)")
    parser.add_argument("--duration", type=float, default=0.0,
                        help="stop creating after this many seconds (default: pods / rate)")
    parser.add_argument("--nodes", type=int, default=5000, help="fake nodes, 32 CPUs and 128Gi each (default 5000)")
    parser.add_argument("--apps", type=int, default=300, help="applications the pods belong to (default 300)")
    parser.add_argument("--queues", type=int, default=10, help="leaf queues the applications use (default 10)")
    parser.add_argument("--run-seconds", type=float, default=10.0,
                        help="mean seconds a pod runs before it ends Succeeded (default 10)")
    parser.add_argument("--runs", type=int, default=1, help="runs per rate (default 1); medians are reported")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    parser.add_argument("--tls", action="store_true", help="serve the fake API over HTTPS (default plain HTTP)")
    parser.add_argument("--constraints", action="store_true",
                        help=f"pods carry required pod anti-affinity on {HOST_KEY} per application (deployment) and "
                             f"a zone spread constraint (maxSkew 1, DoNotSchedule) over {ZONES} zones")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the fake and the shim from the source tree DIR (e.g. `git worktree add "
                             "DIR <commit>`), alternating run by run with this tree")
    parser.add_argument("--out", default=".state/k8s", help="directory for the JSON and PNG files (default .state/k8s)")
    parser.add_argument("--no-plot", action="store_true", help="write no PNG (matplotlib is in the `bench` extra)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run on stdout")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep each run's logs of the fake and the shim in --out (default: removed)")


# ---------------------------------------------------------------------- the workload
def queues_yaml(queues: int) -> str:
    """The queues config: ``root.q0`` .. ``root.q<n-1>``, the queue each pod names."""
    leaves = "".join(f"          - name: q{i}\n" for i in range(queues))
    return ("partitions:\n  - name: default\n    placementrules:\n      - name: provided\n"
            "    queues:\n      - name: root\n        submitacl: '*'\n        queues:\n" + leaves)


def _constraints(app: int) -> bytes:
    """``--constraints``: the label, anti-affinity and spread of a pod of application ``app``."""
    selector = b'{"matchLabels":{"deploy":"d-%d"}}' % app
    return (b',"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":%s,'
            b'"topologyKey":"%s"}]}},"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"%s",'
            b'"whenUnsatisfiable":"DoNotSchedule","labelSelector":%s}]') % (selector, HOST_KEY.encode(),
                                                                          ZONE_KEY.encode(), selector)


def pod_body(i: int, shape: Shape, rng: random.Random) -> bytes:
    """Pod ``i`` as a controller would create it (JSON bytes)."""
    app = i % shape.apps
    cpu, memory = SIZES[app % len(SIZES)]
    run = shape.run_seconds * (0.5 + rng.random())
    if shape.constraints:
        return (b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p-%d","namespace":"%s","labels":'
                b'{"applicationId":"app-%d","queue":"root.q%d","deploy":"d-%d"},"annotations":'
                b'{"korral.io/fake-run-seconds":"%.2f"}},"spec":{"schedulerName":"yunikorn","restartPolicy":"Never",'
                b'"terminationGracePeriodSeconds":0,"containers":[{"name":"main","image":"registry.k8s.io/pause:3.9",'
                b'"resources":{"requests":{"cpu":"%s","memory":"%s"}}}]%s}}') % (
                    i, NAMESPACE.encode(), app, app % shape.queues, app, run, cpu.encode(), memory.encode(),
                    _constraints(app))
    return (b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p-%d","namespace":"%s","labels":'
            b'{"applicationId":"app-%d","queue":"root.q%d"},"annotations":{"korral.io/fake-run-seconds":"%.2f"}},'
            b'"spec":{"schedulerName":"yunikorn","restartPolicy":"Never","terminationGracePeriodSeconds":0,'
            b'"containers":[{"name":"main","image":"registry.k8s.io/pause:3.9","resources":{"requests":'
            b'{"cpu":"%s","memory":"%s"}}}]}}') % (i, NAMESPACE.encode(), app, app % shape.queues, run,
                                                    cpu.encode(), memory.encode())


def _object(kind: str, name: str, namespace: str = "", **rest: Any) -> bytes:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return orjson.dumps({"apiVersion": "v1", "kind": kind, "metadata": meta, **rest})


# ---------------------------------------------------------------------- one run
@dataclass
class _Books:
    """What this process saw: per pod, when its create was sent and answered, when it was seen bound."""

    sent: list[float]
    acked: list[float]
    bound: list[float]
    finished: int = 0
    errors: list[str] = field(default_factory=list)
    created: int = 0
    bound_count: int = 0


class _Processes:
    """The fake and the shim as processes, from a source tree; stopped by pid."""

    def __init__(self, workdir: Path, code: Path) -> None:
        self.workdir, self.code = workdir, code
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
        env.update(PYTHONPATH=str(self.code), PYTHONUNBUFFERED="1")
        log = open(self.workdir / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "common.cli", *args], cwd=self.workdir, env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.procs[name] = proc
        return proc

    def check(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.tail(name)}")

    def tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


async def _wait(predicate, timeout: float, what: str, procs: _Processes, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        procs.check()
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(every)


async def _json(pool: Pool, method: str, path: str, body: bytes | None = None) -> Any:
    r = await pool.request(method, path, body, JSON_TYPE if body is not None else "")
    if r.status >= 400 and not (method == "POST" and r.status == 409):
        raise RuntimeError(f"{method} {path}: HTTP {r.status}: {r.body[:300]!r}")
    return orjson.loads(r.body) if r.body else None


async def _all_nodes_ready(pool: Pool, count: int) -> bool:
    try:
        nodes = await _json(pool, "GET", "/api/v1/nodes")
    except HttpError:
        return False
    ready = sum(any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or []) for n in nodes["items"])
    return ready >= count


async def _korral_open_nodes(rest: Pool) -> int:
    try:
        r = await rest.request("GET", f"/ws/v1/partition/%5B{RM_ID}%5Ddefault/nodes")
    except HttpError:
        return 0
    if r.status != 200:
        return 0
    nodes = orjson.loads(r.body)
    return sum(1 for n in nodes if n.get("schedulable")) if isinstance(nodes, list) else 0


class _Watcher:
    """This process's watch of the benchmark's pods: when each is seen bound, how many ended."""

    def __init__(self, books: _Books) -> None:
        self.books = books
        self.stream = None

    async def run(self, pool: Pool, rv: str) -> None:
        books = self.books
        self.stream = await pool.stream(f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={rv}"
                                        f"&timeoutSeconds=86400", read_timeout=None)
        done: set[int] = set()
        async for batch in self.stream.batches():
            now = time.perf_counter()
            for line in batch:
                event = orjson.loads(line)
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                if not name.startswith("p-"):
                    continue
                i = int(name[2:])
                if i >= len(books.bound):
                    continue
                if not books.bound[i] and (obj.get("spec") or {}).get("nodeName"):
                    books.bound[i] = now
                    books.bound_count += 1
                if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") and i not in done:
                    done.add(i)
                    books.finished += 1


async def _create(pool: Pool, shape: Shape, books: _Books, stop: asyncio.Event) -> float:
    """Create the pods at the shape's rate; returns the seconds it took."""
    rng = random.Random(shape.seed)
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    async def sender() -> None:
        while (i := await queue.get()) is not None:
            books.sent[i] = time.perf_counter()
            try:
                r = await pool.request("POST", path, pod_body(i, shape, rng), JSON_TYPE)
            except HttpError as exc:
                books.errors.append(f"create p-{i}: {exc}")
                continue
            books.acked[i] = time.perf_counter()
            if r.status != 201:
                books.errors.append(f"create p-{i}: HTTP {r.status} {r.body[:200]!r}")
            else:
                books.created += 1

    senders = [asyncio.create_task(sender()) for _ in range(SENDERS)]
    start = time.perf_counter()
    end = start + shape.creation_seconds
    queued = 0
    total = shape.pods
    # every pod due by the end is queued, however late the last tick came (a loaded machine's loop
    # wakes late: stopping at the end time would leave the last pods of the plan uncreated)
    due_by_end = min(total, round(shape.creation_seconds * shape.rate))
    while queued < due_by_end and not stop.is_set():
        now = time.perf_counter()
        due = due_by_end if now >= end else min(due_by_end, int((now - start) * shape.rate) + 1)
        while queued < due:
            queue.put_nowait(queued)
            queued += 1
        await asyncio.sleep(TICK)
    for _ in senders:
        queue.put_nowait(None)
    await asyncio.gather(*senders)
    books.sent = books.sent[:queued]
    return time.perf_counter() - start


def _cpu(pids: dict[str, int]) -> dict[str, float | None]:
    snap = {name: cpu_seconds(pid) for name, pid in pids.items()}
    snap[BENCH] = time.process_time()
    return snap


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return round(next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024, 1)
    except (OSError, StopIteration):
        return None


async def _run(shape: Shape, code: Path, stack, workdir: Path) -> dict:
    procs = _Processes(workdir, code)
    fake_port = free_ports(1)[0]
    scheme = "https" if shape.tls else "http"
    kubeconfig = workdir / "kubeconfig"
    plain_nodes = 0 if shape.constraints else shape.nodes
    fake_args = ["k8s-fake", "--address", f"127.0.0.1:{fake_port}", "--nodes", str(plain_nodes),
                 "--kubeconfig-out", str(kubeconfig), "--log-level", "WARNING", "--state-dir", str(workdir)]
    if shape.constraints:  # the same number of nodes, as node pools zone-0.. labelled with their zone
        zones = [shape.nodes // ZONES + (z < shape.nodes % ZONES) for z in range(ZONES)]
        fake_args += ["--node-pools", ",".join(f"zone-{z}={n}" for z, n in enumerate(zones) if n),
                      "--node-pool-label", ZONE_KEY]
    fake_args += [] if shape.tls else ["--no-tls", "--token", "none"]
    procs.start("k8s-fake", *fake_args)
    try:
        return await _measure(shape, code, stack, workdir, procs, f"{scheme}://127.0.0.1:{fake_port}", kubeconfig)
    finally:
        procs.stop()


async def _fake_pool(url: str, kubeconfig: Path, limit: int) -> Pool:
    from k8s_shim.kube import kubeconfig as kc

    conf = kc.load(str(kubeconfig))
    return Pool(url, ssl=conf.ssl, limit=limit, auth=conf.auth_header,
                headers={"User-Agent": "korral-bench-k8s", "Accept": JSON_TYPE})


async def _measure(shape: Shape, code: Path, stack, workdir: Path, procs: _Processes, url: str,
                   kubeconfig: Path) -> dict:
    async def kubeconfig_written() -> bool:
        return kubeconfig.exists()

    await _wait(kubeconfig_written, 120, "the fake API server", procs)
    pool = await _fake_pool(url, kubeconfig, SENDERS + 2)
    rest = Pool(f"http://{stack.rest_address}", limit=2)
    watcher_task: asyncio.Task | None = None
    try:
        await _wait(lambda: _all_nodes_ready(pool, shape.nodes), 300, f"{shape.nodes} nodes Ready", procs, 1.0)
        for ns in (NAMESPACE, SHIM_NAMESPACE):
            await _json(pool, "POST", "/api/v1/namespaces", _object("Namespace", ns))
        await _json(pool, "POST", f"/api/v1/namespaces/{SHIM_NAMESPACE}/configmaps",
                    _object("ConfigMap", "yunikorn-configs", SHIM_NAMESPACE,
                            data={"queues.yaml": queues_yaml(shape.queues)}))
        procs.start("k8s-shim", "k8s-shim", "--kubeconfig", str(kubeconfig), "--namespace", SHIM_NAMESPACE,
                    "--si-address", stack.si_address, "--log-level", "warning")
        await _wait(lambda: _korral_open_nodes(rest), 300, "the shim to register the nodes", procs, 1.0)
        await _warm_up(pool, shape, procs)
        pids = {"k8s-fake": procs.procs["k8s-fake"].pid, "k8s-shim": procs.procs["k8s-shim"].pid,
                **stack.processes()}
        listed = await _json(pool, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")
        books = _Books([0.0] * shape.pods, [0.0] * shape.pods, [0.0] * shape.pods)
        watcher = _Watcher(books)
        watcher_task = asyncio.create_task(watcher.run(pool, listed["metadata"]["resourceVersion"]))
        samples: list[tuple[float, int, int, int, dict]] = []
        stop = asyncio.Event()
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        cpu0 = _cpu(pids)

        async def sampler() -> None:
            while True:
                samples.append((time.perf_counter() - t0, books.created, books.bound_count, books.finished,
                                _cpu(pids)))
                if watcher_task.done():
                    return
                await asyncio.sleep(SAMPLE)

        sampling = asyncio.create_task(sampler())
        creating = asyncio.create_task(_create(pool, shape, books, stop))
        try:
            while not creating.done():
                procs.check()
                await asyncio.sleep(0.5)
            creation = creating.result()
            created = len(books.sent)
            drain = max(60.0, shape.run_seconds * 3)
            deadline = time.perf_counter() + drain
            while books.bound_count < books.created and time.perf_counter() < deadline:
                procs.check()
                await asyncio.sleep(0.2)
            bound_all = time.perf_counter()
            while books.finished < books.bound_count and time.perf_counter() < deadline + shape.run_seconds * 2:
                procs.check()
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)  # the last pods' endings reach the shim and Korral
            cpu_end = _cpu(pids)
        finally:
            stop.set()
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
        rss = {name: _rss_mb(procs.procs[name].pid) for name in ("k8s-fake", "k8s-shim")}
        result = summarize(shape, books, samples, t0, creation, created, bound_all - t0, cpu0, cpu_end,
                           load0, os.getloadavg()[0], rss, str(code))
        result["events_per_pod"] = round(await _events(pool) / created, 2) if created else None
        result["shim_events"] = await _shim_events(rest)
        return result
    finally:
        if watcher_task is not None:
            watcher_task.cancel()
            await asyncio.gather(watcher_task, return_exceptions=True)
        await pool.close()
        await rest.close()


async def _events(pool: Pool) -> int:
    """How many events the shim got into the API server about the benchmark's pods."""
    page = await _json(pool, "GET", f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events?limit=1")
    return len(page["items"]) + int((page.get("metadata") or {}).get("remainingItemCount") or 0)


async def _shim_events(rest: Pool) -> dict[str, int] | None:
    """The shim's own event counters (posted, dropped when the API server did not keep up, folded,
    counted in a series), from its state dump inside Korral's full state dump; None when the dump
    does not have them."""
    try:
        r = await rest.request("GET", "/debug/fullstatedump")
        if r.status != 200:
            return None
        rms = orjson.loads(r.body).get("rmDiagnostics") or {}
        shim = (rms.get(RM_ID) or {}).get("stateDump")  # the shim's dump, already decoded
        return shim.get("events") if isinstance(shim, dict) else None
    except (HttpError, ValueError):
        return None


async def _warm_up(pool: Pool, shape: Shape, procs: _Processes) -> None:
    """A few pods bound and deleted first: the shim's connections and Korral's queues are up."""
    names = [f"warmup-{i}" for i in range(WARMUP_PODS)]
    for i, name in enumerate(names):
        body = orjson.loads(pod_body(i, shape, random.Random(i)))
        body["metadata"]["name"] = name
        await _json(pool, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", orjson.dumps(body))

    async def all_bound() -> bool:
        pods = await _json(pool, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods")
        return sum(1 for p in pods["items"] if p["spec"].get("nodeName")) >= len(names)

    await _wait(all_bound, 120, "the warm-up pods to be bound", procs, 0.2)
    for name in names:
        await _json(pool, "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")


# ---------------------------------------------------------------------- the figures
def _window(shape: Shape, creation: float) -> tuple[float, float]:
    start = min(shape.run_seconds * 1.5, creation * 0.2)
    return start, creation


def _per_1000(delta: dict[str, float | None], pods: int) -> dict[str, float | None]:
    return {k: (round(v / pods * 1000, 3) if v is not None and pods else None) for k, v in delta.items()}


def _delta(a: dict, b: dict) -> dict[str, float | None]:
    return {k: (b[k] - v if v is not None and b.get(k) is not None else None) for k, v in a.items()}


def _at(samples: list, t: float) -> tuple:
    """The sample nearest to time ``t``."""
    return min(samples, key=lambda s: abs(s[0] - t))


def summarize(shape: Shape, books: _Books, samples: list, t0: float, creation: float, created: int,
              bound_all_s: float, cpu0: dict, cpu_end: dict, load0: float, load1: float,
              rss: dict, code: str) -> dict:
    """The figures of one run (see module doc) and the series the plot draws."""
    w0, w1 = _window(shape, creation)
    sent = books.sent
    lat_window, lat_all, series_lat = [], [], []
    for i in range(created):
        if not books.bound[i] or not sent[i]:
            continue
        ms = (books.bound[i] - sent[i]) * 1000
        lat_all.append(ms)
        series_lat.append((round(books.bound[i] - t0, 3), round(ms, 2)))
        if w0 <= sent[i] - t0 <= w1:
            lat_window.append(ms)
    bound_in_window = sum(1 for b in books.bound if b and w0 <= b - t0 <= w1)
    create_ms = [(books.acked[i] - sent[i]) * 1000 for i in range(created) if books.acked[i] and sent[i]]
    in_window = [s for s in samples if w0 <= s[0] <= w1]
    backlog = [(s[0], float(s[1] - s[2])) for s in in_window]
    trend = slope(backlog)
    a, b = (_at(samples, w0), _at(samples, w1)) if samples else (None, None)
    cpu_window = _delta(a[4], b[4]) if a and b else {}
    bound_rate = bound_in_window / (w1 - w0) if w1 > w0 else 0.0
    creation_rate = created / creation if creation else 0.0
    unbound = created - sum(1 for i in range(created) if books.bound[i])
    p99 = percentile(lat_window, 99)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "code": code,
        "shape": shape.__dict__ | {"creation_seconds": round(shape.creation_seconds, 2)},
        "created": created, "create_errors": len(books.errors), "first_error": books.errors[0] if books.errors else "",
        "creation_seconds": round(creation, 2), "creation_rate": round(creation_rate, 1),
        "window_s": [round(w0, 2), round(w1, 2)],
        "bound_per_second": round(bound_rate, 1), "backlog_slope_per_s": round(trend, 2),
        "backlog_end": backlog[-1][1] if backlog else 0,
        "offered": creation_rate >= OFFERED_FRACTION * shape.rate,
        "sustained": creation_rate >= OFFERED_FRACTION * shape.rate and trend <= FLAT_FRACTION * shape.rate
        and unbound == 0,
        "unbound": unbound, "all_bound_after_s": round(bound_all_s, 2),
        "latency_ms": {"p50": _r(percentile(lat_window, 50)), "p99": _r(p99),
                       "max": _r(max(lat_window) if lat_window else None), "pods": len(lat_window)},
        "latency_all_ms": {"p50": _r(percentile(lat_all, 50)), "p99": _r(percentile(lat_all, 99)),
                           "max": _r(max(lat_all) if lat_all else None)},
        "create_request_ms": {"p50": _r(percentile(create_ms, 50)), "p99": _r(percentile(create_ms, 99))},
        "cpu_seconds_per_1000_pods": _per_1000(cpu_window, bound_in_window),
        "cpu_seconds_per_1000_pods_whole_run": _per_1000(_delta(cpu0, cpu_end), created),
        "loadavg_1m": [round(load0, 2), round(load1, 2)], "rss_mb": rss,
        "series": {"samples": [(round(s[0], 3), s[1], s[2], s[3], {k: (round(v, 3) if v is not None else None)
                                                                    for k, v in s[4].items()}) for s in samples],
                   "latency": series_lat},
    }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def k8s_run(shape: Shape, code: Path, logs: Path | None = None) -> dict:
    """One run: a fresh stack, fake and shim; returns ``summarize``'s dict. The logs of the fake
    and the shim are kept in ``logs`` when given."""
    from common.cli.stack.throwaway import LocalStack

    with tempfile.TemporaryDirectory(prefix="korral-bench-k8s-") as tmp, \
            LocalStack(1, extra=("--log-level", "warning")) as stack:
        try:
            return asyncio.run(_run(shape, code, stack, Path(tmp)))
        finally:
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                for path in Path(tmp).glob("*.log"):
                    shutil.copy(path, logs / path.name)


# ---------------------------------------------------------------------- the command
HEADLINE = ("bound_per_second", "latency_ms.p50", "latency_ms.p99")
CPU_ORDER = ("k8s-shim", "k8s-fake", "rmproxy", "broker", "worker", "redis", BENCH)


def _get(d: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def _cpu_name(name: str) -> str:
    return "worker" if name.startswith("worker") else name


def _line(r: dict) -> str:
    cpu = {}
    for k, v in r["cpu_seconds_per_1000_pods"].items():
        if v is not None:
            cpu[_cpu_name(k)] = cpu.get(_cpu_name(k), 0) + v
    cpu_text = ", ".join(f"{k} {cpu[k]:.2f}" for k in CPU_ORDER if k in cpu)
    lat = r["latency_ms"]
    return (f"rate {r['shape']['rate']:>6,.0f}/s  created {r['creation_rate']:,.0f}/s  bound {r['bound_per_second']:,.0f}/s "
            f"({'sustained' if r['sustained'] else 'NOT sustained'}, backlog slope {r['backlog_slope_per_s']}/s"
            f"{'' if r['offered'] else ', the rate was not offered: the creator fell behind'})  "
            f"create->bind p50 {lat['p50']} ms p99 {lat['p99']} ms  events/pod {r.get('events_per_pod')}"
            f"{_dropped_text(r.get('shim_events'))}  "
            f"cpu s/1000 pods: {cpu_text}  "
            f"load {r['loadavg_1m'][0]:.1f}-{r['loadavg_1m'][1]:.1f}  [{r['code']}]")


def _dropped_text(counters: dict | None) -> str:
    if not counters:
        return ""
    return f" (the shim dropped {counters.get('dropped', 0):,})"


def _medians(results: list[dict]) -> dict:
    out: dict[str, Any] = {"runs": len(results)}
    for key in HEADLINE + ("creation_rate", "events_per_pod", "shim_events.dropped"):
        values = [_get(r, key) for r in results if _get(r, key) is not None]
        out[key] = round(median(values), 2) if values else None
    cpu: dict[str, list[float]] = {}
    for r in results:
        per: dict[str, float] = {}
        for k, v in r["cpu_seconds_per_1000_pods"].items():
            if v is not None:
                per[_cpu_name(k)] = per.get(_cpu_name(k), 0) + v
        for k, v in per.items():
            cpu.setdefault(k, []).append(v)
    out["cpu_seconds_per_1000_pods"] = {k: round(median(v), 3) for k, v in cpu.items()}
    out["sustained"] = sum(1 for r in results if r["sustained"])
    out["loadavg_1m"] = [r["loadavg_1m"][0] for r in results]
    return out


def run(args: argparse.Namespace) -> int:
    try:
        rates = [float(x) for x in str(args.rate).split(",") if x.strip()]
    except ValueError:
        print(f"korral bench k8s: --rate must be numbers, got {args.rate!r}", file=sys.stderr)
        return 2
    problems = [f"--{name} must be positive" for name, v in (
        ("pods", args.pods), ("nodes", args.nodes), ("apps", args.apps), ("queues", args.queues),
        ("runs", args.runs), ("run-seconds", args.run_seconds)) if v <= 0]
    if not rates or any(r <= 0 for r in rates):
        problems.append("--rate must be positive")
    if args.duration < 0:
        problems.append("--duration must be 0 (pods / rate) or positive")
    here = Path(__file__).resolve().parents[1]
    trees = [("current", here)]
    if args.baseline:
        base = Path(args.baseline).resolve()
        if not (base / "k8s_shim" / "shim.py").exists():
            problems.append(f"--baseline {args.baseline}: not a Korral source tree (no k8s_shim/shim.py)")
        trees = [("baseline", base), ("current", here)]
    if problems:
        print("korral bench k8s: " + "; ".join(problems), file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupted)  # stopped from a script: clean up as for Ctrl-C
    try:
        return _runs(args, rates, trees, out)
    except KeyboardInterrupt:
        print("korral bench k8s: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def _runs(args: argparse.Namespace, rates: list[float], trees: list[tuple[str, Path]], out: Path) -> int:
    results: dict[tuple[str, float], list[dict]] = {}
    for rate in rates:
        shape = Shape(nodes=args.nodes, pods=args.pods, rate=rate, duration=args.duration, apps=args.apps,
                      queues=args.queues, run_seconds=args.run_seconds, seed=args.seed, tls=args.tls,
                      constraints=args.constraints)
        for n in range(args.runs):
            for label, tree in (trees if n % 2 == 0 else trees[::-1]):
                stem = out / time.strftime(f"k8s-{rate:g}-{label}-%Y%m%d-%H%M%S", time.gmtime())
                try:
                    result = k8s_run(shape, tree, Path(f"{stem}-logs") if args.keep_logs else None)
                except RuntimeError as exc:
                    print(f"korral bench k8s: {exc}", file=sys.stderr)
                    return 1
                result["tree"] = label
                results.setdefault((label, rate), []).append(result)
                stem.with_suffix(".json").write_text(json.dumps(result))
                written = [str(stem.with_suffix(".json"))]
                if not args.no_plot:
                    written += _plot(result, stem.with_suffix(".png"))
                if args.json:
                    print(json.dumps({k: v for k, v in result.items() if k != "series"}), flush=True)
                else:
                    print(_line(result) + f"  -> {', '.join(written)}", flush=True)
    summary = {f"{label} {rate:g}/s": _medians(rs) for (label, rate), rs in results.items()}
    if args.baseline:
        for rate in rates:
            base, cur = summary[f"baseline {rate:g}/s"], summary[f"current {rate:g}/s"]
            summary[f"current/baseline {rate:g}/s"] = {
                k: (round(cur[k] / base[k], 3) if cur.get(k) and base.get(k) else None) for k in HEADLINE} | {
                "cpu_seconds_per_1000_pods": {k: round(v / base["cpu_seconds_per_1000_pods"][k], 3)
                                              for k, v in cur["cpu_seconds_per_1000_pods"].items()
                                              if base["cpu_seconds_per_1000_pods"].get(k)}}
    print(json.dumps({"medians": summary}) if args.json else
          "medians:\n" + "\n".join(f"  {k}: {json.dumps(v)}" for k, v in summary.items()),
          file=sys.stderr if args.json else sys.stdout)
    return 0


def _plot(result: dict, path: Path) -> list[str]:
    try:
        from benchmarks.k8s_plot import plot
    except ImportError as exc:
        print(f"korral bench k8s: no plot ({exc}; install the bench extra: pip install -e '.[bench]')",
              file=sys.stderr)
        return []
    plot(result, path)
    return [str(path)]
