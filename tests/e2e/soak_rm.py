"""The chaos soak's RMs and their load (issue 12; the soak itself is ``tests/e2e/soak.py``).

- ``SoakRM``: a ``ClusterRM`` with two partitions, one app in each, driven by a ``Load`` thread
  (asks submitted and tasks finished continuously); it re-registers the way a restarting shim
  does (a new ``SchedulerAPI`` with the same rmID, the old one closed without Shutdown, the
  state replayed from the hook) and updates its configuration (``korral.v1 UpdateConfiguration``),
  both with a changed config (an extra queue added or removed, a queue max changed).
"""

from __future__ import annotations

import collections
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import grpc

from common import si_pb2
from si_client import Backoff, ClientState, SchedulerAPI, SchedulerError, channel_options
from benchmarks.cluster_rm import ClusterRM
from tests.conftest import Background, wait_until
from tests.si_builders import ask, release

PARTITIONS = ("default", "second")
QUEUE_OF = {"default": "root.a", "second": "root.b"}
USER = "tester"  # ClusterRM's apps run as this user; with no groups given its group is its name
NODES_PER_PARTITION = 5
NODE_MEMORY = 400  # 40 tasks of memory 10 per node: 200 per partition
NODE_VCORE = 400
TARGET_RUNNING = 150  # per partition: nodes stay 75-95% full, so a doubled replay would overcommit
PENDING_CAP = 40
BATCH = 5  # asks submitted (and tasks finished) per app per load tick
TICK = 0.2  # seconds between load ticks
HTTP_TIMEOUT = 5.0
OP_TIMEOUT = 120.0  # seconds a re-registration or config update may retry through faults


def soak_config(variant: int) -> str:
    """The RMs' queues.yaml: two partitions, apps placed in root.a / root.b; odd variants add
    root.extra, and root.a's max memory moves between three values (all far above the load)."""
    extra = "\n          - name: extra" if variant % 2 else ""
    max_memory = (variant % 3 + 1) * 100_000_000
    text = "partitions:\n"
    for name in PARTITIONS:
        text += f"""  - name: {name}
    placementrules: [{{name: provided, create: true}}]
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: a
            resources: {{max: {{memory: {max_memory}, vcore: 100000000}}}}
          - name: b{extra}
"""
    return text


def _now() -> float:
    return time.monotonic()


# -- the RMs ------------------------------------------------------------------------------

@dataclass
class SoakRM(ClusterRM):
    """A ClusterRM with both partitions, per-partition allocation clocks and re-registration."""

    si_address: str = ""
    rest_address: str = ""
    variant: int = 0
    seed: int = 0
    allocated: dict[str, int] = field(default_factory=dict)  # partition -> allocations received
    last_alloc: dict[str, float] = field(default_factory=dict)  # partition -> monotonic time
    lost_count: int = 0
    restored_at: float = 0.0  # monotonic time the RM last finished (re-)registering and replaying
    registrations: int = 0  # successful RegisterResourceManager calls made by the soak itself
    register_retries: int = 0
    retry_reasons: collections.Counter = field(default_factory=collections.Counter)
    config_updates: int = 0
    config_retries: int = 0
    keys: int = 0
    ops: threading.Lock = field(default_factory=threading.Lock)  # one re-registration or update at a time
    # set just before an op's first RPC goes out: the soak kills a process while it is in flight
    in_flight: threading.Event | None = None

    @property
    def config(self) -> str:
        return soak_config(self.variant)

    def app_of(self, partition: str) -> str:
        return f"{self.rm_id}-{partition}"

    def partition_of_app(self, app_id: str) -> str:
        return self.apps[app_id].partitionName

    # -- set-up and re-registration ----------------------------------------------------

    def start(self) -> None:
        self._register(self.config)
        for p in PARTITIONS:
            self.add_nodes(NODES_PER_PARTITION, p)
            self.add_app(self.app_of(p), QUEUE_OF[p], p)
        self.wait(lambda r: len(r.accepted_nodes) == len(PARTITIONS) * NODES_PER_PARTITION, timeout=60)

    def _register(self, config: str) -> None:
        """Register with a fresh client, retrying what a fault makes fail (Redis or rmproxy down,
        no idle worker yet) until ``OP_TIMEOUT``; a refused config fails at once."""
        deadline = _now() + OP_TIMEOUT
        request = si_pb2.RegisterResourceManagerRequest(rmID=self.rm_id, policyGroup="queues", config=config)
        while True:
            backoff = Backoff(rng=random.Random(self.seed))
            # a restarted shim is a new process: its channel shares no subchannel (and no
            # reconnect backoff) with the client it replaces
            channel = grpc.insecure_channel(self.si_address, options=channel_options(backoff)
                                            + [("grpc.use_local_subchannel_pool", 1)])
            api = SchedulerAPI(self.si_address, channel=channel, recovery_timeout=60.0, rpc_timeout=30.0,
                               backoff=backoff)
            with self.lock:
                self.api = api  # sends raise NotConnectedError until registered: the replay covers them
            try:
                self._going()
                api.register_resource_manager(request, self)
            except SchedulerError as exc:
                api.close(shutdown=False)
                if exc.code is grpc.StatusCode.INVALID_ARGUMENT or _now() > deadline:
                    raise AssertionError(f"registration of {self.rm_id} failed (seed {self.seed}): {exc}") from None
                self.register_retries += 1
                self.retry_reasons[f"register {exc.code.name if exc.code else '-'}: {exc.details[:90]}"] += 1
                wait_ready(self.rest_address, deadline - _now())
                continue
            with self.lock:
                self.restored_at = _now()
                self.registrations += 1
            return

    def _going(self) -> None:
        if self.in_flight is not None:
            self.in_flight.set()
            self.in_flight = None

    def reregister(self, variant: int) -> None:
        """Restart as a shim does, with config ``variant``: the old client goes without Shutdown
        (the RM stays registered, Paused), a new one registers and replays the RM's state."""
        with self.ops:
            old = self.api
            if not old.wait_running(OP_TIMEOUT):
                raise AssertionError(f"{self.rm_id}: client not Running before a re-registration: {old.state}")
            old.close(shutdown=False)
            self.variant = variant
            self._register(self.config)

    def update_config(self, variant: int) -> None:
        """``UpdateConfiguration`` with config ``variant``; retried while a fault makes it fail."""
        with self.ops:
            deadline = _now() + OP_TIMEOUT
            request = si_pb2.UpdateConfigurationRequest(rmID=self.rm_id, policyGroup="queues",
                                                        config=soak_config(variant))
            while True:
                if not self.api.wait_running(max(0.0, deadline - _now())):
                    raise AssertionError(f"{self.rm_id}: client not Running for a config update: {self.api.state}")
                try:
                    self._going()
                    self.api.update_configuration(request)
                except SchedulerError as exc:
                    transient = exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION,
                                             grpc.StatusCode.DEADLINE_EXCEEDED)
                    if not transient or _now() > deadline:
                        raise AssertionError(f"config update of {self.rm_id} to variant {variant} failed "
                                             f"(seed {self.seed}): {exc}") from None
                    self.config_retries += 1
                    self.retry_reasons[f"config {exc.code.name if exc.code else '-'}: {exc.details[:90]}"] += 1
                    wait_ready(self.rest_address, deadline - _now())
                    continue
                self.variant = variant
                self.config_updates += 1
                return

    # -- load ---------------------------------------------------------------------------

    def tick(self) -> None:
        """One load step: submit asks while few are pending, finish tasks once near the target."""
        with self.lock:
            pending = {p: 0 for p in PARTITIONS}
            for a in self.pending.values():
                pending[self.partition_of_app(a.applicationID)] += 1
            running: dict[str, list[si_pb2.Allocation]] = {p: [] for p in PARTITIONS}
            for a in self.running.values():
                running[self.partition_of_app(a.applicationID)].append(a)
            asks = []
            for p in PARTITIONS:
                if pending[p] < PENDING_CAP:
                    app = self.app_of(p)
                    for _ in range(BATCH):
                        self.keys += 1
                        asks.append(ask(f"{app}-{self.keys}", app, p, memory=10, vcore=1))
            done = []
            for p in PARTITIONS:
                finish = BATCH if len(running[p]) >= TARGET_RUNNING else 1
                done.extend(running[p][:finish])
            for a in done:
                del self.running[a.allocationKey]
            for a in asks:
                self.pending[a.allocationKey] = a
            # state first, then the sends (the replay hook's contract): a send that raises while
            # the client is between registrations is covered by the next replay
            try:
                if done:
                    self.finish(done)
                if asks:
                    self.api.update_allocation(si_pb2.AllocationRequest(rmID=self.rm_id, asks=asks))
            except SchedulerError:
                pass

    def finish(self, done: list[si_pb2.Allocation]) -> None:
        """Tell the scheduler these tasks completed (the caller dropped them from ``running``)."""
        self.api.update_allocation(si_pb2.AllocationRequest(rmID=self.rm_id, releases=si_pb2.AllocationReleasesRequest(
            allocationsToRelease=[release(a, message="task completed") for a in done])))

    # -- callbacks ----------------------------------------------------------------------

    def update_allocation(self, response: si_pb2.AllocationResponse) -> None:
        with self.changed:
            super().update_allocation(response)
            now = _now()
            for a in response.new:
                app = self.apps.get(a.applicationID)
                if app is not None:
                    p = app.partitionName
                    self.allocated[p] = self.allocated.get(p, 0) + 1
                    self.last_alloc[p] = now

    def connection_lost(self, reason: str) -> None:
        with self.changed:
            super().connection_lost(reason)
            self.lost_count += 1
            self.changed.notify_all()

    def connection_restored(self) -> None:
        with self.changed:
            self.restored_at = _now()
            self.changed.notify_all()

    # -- views ----------------------------------------------------------------------------

    def running_in(self, partition: str) -> dict[str, tuple[str, str]]:
        with self.lock:
            return {k: (a.UUID, a.nodeID) for k, a in self.running.items()
                    if self.partition_of_app(a.applicationID) == partition}

    def nodes_in(self, partition: str) -> list[str]:
        with self.lock:
            return sorted(n for n, info in self.nodes.items()
                          if info.attributes["si/node-partition"] == partition)

    def state(self) -> ClientState:
        return self.api.state if self.api is not None else ClientState.NEW


class Load(Background):
    """Keeps every RM's partitions busy: one tick per RM every ``TICK`` seconds until stopped."""

    interval = TICK

    def __init__(self, rms: list[SoakRM]) -> None:
        super().__init__("soak-load")
        self.rms = rms
        self.errors: list[str] = []

    def step(self) -> None:
        for rm in self.rms:
            try:
                rm.tick()
            except Exception as exc:  # noqa: BLE001 - reported by the soak, never silently lost
                self.errors.append(f"{rm.rm_id}: {type(exc).__name__}: {exc}")


# -- REST reads ---------------------------------------------------------------------------------


def http_get(rest: str, path: str, timeout: float = HTTP_TIMEOUT) -> tuple[int | str, bytes]:
    request = urllib.request.Request(f"http://{rest}{path}", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()
    except (OSError, urllib.error.URLError) as exc:  # refused (rmproxy restarting), timed out
        return type(exc).__name__, str(exc).encode()


def wait_ready(rest: str, timeout: float) -> None:
    """Until rmproxy says it hears the broker and Redis (or the time is up: the caller retries)."""
    try:
        wait_until(lambda: http_get(rest, "/ws/v1/korral/ready", timeout=2.0)[0] == 200, max(0.0, timeout),
                   "rmproxy ready")
    except AssertionError:
        pass
