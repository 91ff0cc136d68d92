"""The chaos soak's machinery (issue 12): two RMs under load, SIGKILL of every process kind,
RM re-registrations and configuration updates, and the checks after each fault and at the end.

- ``SoakRM`` and its ``Load`` (``tests/e2e/soak_rm.py``): two RMs that keep asking and finishing
  tasks, re-register like a restarting shim and update their config.
- ``read_failures``: every REST read path of every partition of every RM; the failures.
- ``Chaos``: one fault per step (round-robin over the process kinds), optionally mixed with a
  re-registration or a config update before the kill or in flight when it lands; it measures kill ->
  scheduling again and kill -> every read path 200, and fails naming the seed, the step and the
  fault when a read path still fails 5 s after the RMs re-registered.
- ``final_check``: the scheduler holds exactly each RM's allocations, none lost or doubled, no
  node over capacity, and the RMs saw no violation.

Every wait is on a condition with a bounded timeout; nothing sleeps to let time pass.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import yaml

from common.cli.stack.down import ProcId, load_stack, supervisor_rpc
from si_client import ClientState
from tests.conftest import wait_until
from tests.e2e.soak_rm import (NODE_MEMORY, NODE_VCORE, NODES_PER_PARTITION, OP_TIMEOUT, PARTITIONS, QUEUE_OF,
                               USER, Load, SoakRM, _now, http_get, soak_config)

KINDS = ("worker", "broker", "rmproxy", "redis")
READ_BUDGET = 5.0  # seconds after the RMs re-registered by which every read path answers 200
RECOVERY_CAP = 180.0  # seconds after a kill by which everything must be back, whatever happened
UP_STATES = ("RUNNING",)
MIN_UPTIME = 2.0  # a process is killed only after this long RUNNING (supervisord's startsecs is 1)


@dataclass(frozen=True)
class Failure:
    path: str
    status: int | str
    body: str

    def __str__(self) -> str:
        return f"GET {self.path} -> {self.status}: {self.body[:400]}"


def read_paths(rms: list[SoakRM]) -> list[tuple[str, object]]:
    """Every read path of every partition of every RM, each with a content check (or None)."""
    paths: list[tuple[str, object]] = []
    want = {(rm.rm_id, p) for rm in rms for p in PARTITIONS}
    paths.append(("/ws/v1/partitions",
                  lambda doc: _missing(want, {(x.get("rmID"), x.get("name")) for x in doc}, "partitions")))
    paths.append(("/ws/v1/clusters",
                  lambda doc: _missing(want, {(x.get("clusterName"), x.get("partition")) for x in doc}, "clusters")))
    for path in ("/ws/v1/scheduler/healthcheck", "/ws/v1/fullstatedump", "/ws/v1/events/batch",
                 "/ws/v1/history/apps", "/ws/v1/metrics", "/ws/v1/korral/stack"):
        paths.append((path, None))
    for rm in rms:
        q = f"?rmID={rm.rm_id}"
        paths.append((f"/ws/v1/config{q}", _config_check(rm)))
        for p in PARTITIONS:
            base = f"/ws/v1/partition/{p}"
            app, queue = rm.app_of(p), QUEUE_OF[p]
            nodes = rm.nodes_in(p)
            paths += [
                (f"{base}/queues{q}", _queues_check(rm)),
                (f"{base}/nodes{q}", _nodes_check(nodes)),
                (f"{base}/node/{nodes[0]}{q}", None),
                (f"{base}/applications{q}", None),
                (f"{base}/queue/{queue}/applications{q}", None),
                (f"{base}/queue/{queue}/application/{app}{q}", None),
                (f"{base}/application/{app}{q}", None),
                (f"{base}/usage/users{q}", None),
                (f"{base}/usage/user/{USER}{q}", None),
                (f"{base}/usage/groups{q}", None),
                (f"{base}/usage/group/{USER}{q}", None),
            ]
    return paths


def _missing(want: set, got: set, what: str) -> str | None:
    lost = want - got
    return f"{what} lacks {sorted(lost)}" if lost else None


def _queue_names(tree: dict) -> set[str]:
    return {tree.get("queuename")} | {n for c in tree.get("children") or [] for n in _queue_names(c)}


def _config_check(rm: SoakRM):
    variant = rm.variant

    def check(doc) -> str | None:
        doc = {k: v for k, v in (doc or {}).items() if k not in ("checksum", "extraConfig", "rmID")}
        if doc != yaml.safe_load(soak_config(variant)):
            return f"active config of {rm.rm_id} is not variant {variant} (the RM's last config)"
        return None
    return check


def _queues_check(rm: SoakRM):
    extra = bool(rm.variant % 2)

    def check(doc) -> str | None:
        if ("root.extra" in _queue_names(doc)) != extra:
            return f"root.extra {'missing' if extra else 'still there'} (config variant {rm.variant} of {rm.rm_id})"
        return None
    return check


def _nodes_check(nodes: list[str]):
    def check(doc) -> str | None:
        got = sorted(n["nodeID"] for n in doc)
        return None if got == nodes else f"nodes {got} != the RM's {nodes}"
    return check


def wait_scheduling(rms: list[SoakRM], step, since: float, fail) -> None:
    """Until every partition of every RM got an allocation after ``since`` (the fault) and after its
    RM's last (re-)registration, with every client Running (``step.sched_gap``: seconds from
    ``since``); a client that FAILED, or ``RECOVERY_CAP``, raises ``fail(message)``."""
    def scheduling() -> bool:
        for rm in rms:
            if rm.state() is not ClientState.RUNNING:
                if rm.state() is ClientState.FAILED:
                    raise fail(f"{rm.rm_id}'s client FAILED: {getattr(rm.api, '_failure', '')}")
                return False
            if any(rm.last_alloc.get(p, 0.0) <= max(since, rm.restored_at) for p in PARTITIONS):
                return False
        return True

    def context() -> str:
        return "; ".join(f"{rm.rm_id}: client {rm.state().value}, lost {rm.lost_count}, pending "
                         f"{len(rm.pending)}, running {len(rm.running)}, last allocation "
                         + ", ".join(f"{p} {(_now() - rm.last_alloc.get(p, 0.0)):.1f}s ago" for p in PARTITIONS)
                         for rm in rms)
    try:
        wait_until(scheduling, RECOVERY_CAP, "every partition scheduling again", context, interval=0.02)
    except AssertionError as exc:
        raise fail(str(exc)) from None
    step.sched_gap = _now() - since


def wait_reads(rest: str, rms: list[SoakRM], pool: ThreadPoolExecutor, step, since: float, base,
               what: str, fail) -> None:
    """Read every path until all answer 200 (``step.reads_gap``: seconds from ``since``, the fault;
    ``step.budget_used``: from ``base()``, the last of the fault and the RMs' re-registrations).
    A sweep that starts ``READ_BUDGET`` after ``base()``, with every client Running, and still
    fails raises ``fail(message)``; so does one ``RECOVERY_CAP`` after ``since``."""
    def settled() -> bool:
        return all(rm.state() is ClientState.RUNNING for rm in rms)

    while True:
        began = _now()
        was_settled = settled()
        failures = read_failures(rest, rms, pool)
        step.sweeps += 1
        if failures and not step.first_failures:
            step.first_failures = [str(f)[:200] for f in failures[:3]]
        if not failures:
            step.reads_gap = _now() - since
            step.budget_used = max(0.0, _now() - base())
            return
        # re-read after the sweep: an RM that re-registered meanwhile restarts its budget
        if (was_settled and settled() and began > base() + READ_BUDGET) or began > since + RECOVERY_CAP:
            shown = "\n  ".join(str(f) for f in failures[:10])
            raise fail(f"{len(failures)} read path(s) still failing {began - base():.1f}s after the RMs' last "
                       f"re-registration ({began - since:.1f}s after the {what}):\n  {shown}")


def read_failures(rest: str, rms: list[SoakRM], pool: ThreadPoolExecutor) -> list[Failure]:
    """Read every path once (in parallel); the ones that did not answer 200 with the right content."""
    paths = read_paths(rms)

    def one(item: tuple[str, object]) -> Failure | None:
        path, check = item
        status, body = http_get(rest, path)
        if status != 200:
            return Failure(path, status, body.decode(errors="replace"))
        if check is None:
            return None
        try:
            doc = json.loads(body)
        except ValueError:
            return Failure(path, status, "not JSON: " + body[:200].decode(errors="replace"))
        problem = check(doc)  # type: ignore[operator]
        return Failure(path, status, problem) if problem else None

    return [f for f in pool.map(one, paths) if f is not None]


# -- the stack's processes ----------------------------------------------------------------------

def supervised(stack) -> dict[str, dict]:
    """supervisord's view of every program: name -> {pid, statename, start, now}."""
    rows = supervisor_rpc(load_stack(stack.state_dir), 5.0).supervisor.getAllProcessInfo()
    return {row["name"]: row for row in rows}


def owners(rest: str) -> dict[str, str]:
    """worker name -> "rmID/partition" it owns, from the stack view."""
    status, body = http_get(rest, "/ws/v1/korral/stack")
    if status != 200:
        return {}
    return {w["name"]: w["partition"] for w in json.loads(body)["cluster"].get("workers", []) if w.get("partition")}


# -- chaos --------------------------------------------------------------------------------------

@dataclass
class Step:
    n: int
    kind: str
    victim: str = ""
    owned: str = ""  # what a killed worker owned ("rmID/partition"), "" for a spare
    op: str = ""  # "", "reregister" or "config"
    op_rm: str = ""
    op_variant: int = 0
    op_when: str = ""  # "before" the kill, or "during": its first RPC in flight when the kill lands
    sched_gap: float = 0.0  # kill -> every partition scheduling again
    reads_gap: float = 0.0  # kill -> every read path 200
    budget_used: float = 0.0  # seconds after the RMs re-registered (and the op ended) reads took
    effect_gap: float = 0.0  # kill -> the RMs that must re-register were asked to
    sweeps: int = 0  # read sweeps until every path answered 200
    first_failures: list[str] = field(default_factory=list)  # a few paths of the first failing sweep

    def describe(self) -> str:
        what = f"kill -9 {self.victim}" + (f" (owner of {self.owned})" if self.owned else
                                            " (a spare)" if self.kind == "worker" else "")
        if self.op:
            what += (f" while a {self.op} of {self.op_rm} to config variant {self.op_variant} was in flight"
                     if self.op_when == "during" else
                     f", after a {self.op} of {self.op_rm} to config variant {self.op_variant}")
        return f"step {self.n}: {what}"


class Chaos:
    def __init__(self, stack, rms: list[SoakRM], seed: int, kills: int) -> None:
        self.stack = stack
        self.rest = stack.rest_address
        self.rms = {rm.rm_id: rm for rm in rms}
        self.seed = seed
        self.rng = random.Random(seed)
        self.kills = kills
        self.steps: list[Step] = []
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="soak-read")
        self.started = _now()

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def plan(self) -> list[Step]:
        """The kinds round-robin (each round in a seeded order); every third step a re-registration,
        every third a config update (each done before the kill, or in flight when it lands, on a seeded RM)."""
        steps = []
        ops = []
        for n in range(self.kills):
            if n % len(KINDS) == 0:
                kinds = list(KINDS)
                self.rng.shuffle(kinds)
            if n % 3 == 0:
                ops = ["reregister", "config", ""]
                self.rng.shuffle(ops)
            s = Step(n + 1, kinds[n % len(KINDS)], op=ops[n % 3])
            if s.op:
                s.op_rm = self.rng.choice(sorted(self.rms))
                s.op_when = self.rng.choice(("before", "during"))
            steps.append(s)
        return steps

    def fail(self, step: Step, message: str) -> AssertionError:
        return AssertionError(f"chaos soak seed {self.seed}, {step.describe()}: {message}")

    # -- one step ---------------------------------------------------------------------------

    def run_step(self, step: Step) -> None:
        rm_op = self.rms.get(step.op_rm)
        if rm_op is not None:
            step.op_variant = rm_op.variant + 1 + self.rng.randrange(5)
        if step.op and step.op_when == "before":
            self._op(step)
        victim, pid = self._pick(step)
        losses = {r: rm.lost_count for r, rm in self.rms.items()}
        restored = {r: rm.restored_at for r, rm in self.rms.items()}
        op_thread = op_error = None
        if step.op and step.op_when == "during":  # the kill lands while the op's first RPC is in flight
            errors: list[BaseException] = []
            going = threading.Event()
            assert rm_op is not None
            rm_op.in_flight = going
            op_thread = threading.Thread(target=self._op_catching, args=(step, errors), daemon=True)
            op_thread.start()
            op_error = errors
            if not going.wait(OP_TIMEOUT):
                raise self.fail(step, f"the {step.op} did not start within {OP_TIMEOUT:.0f}s")
        proc = ProcId.of(pid)  # by pid and start time: never a recycled pid
        if proc is None or not proc.signal(signal.SIGKILL):
            raise self.fail(step, f"{victim} pid {pid} vanished before the kill")
        killed = _now()
        self.steps.append(step)
        expected = self._expected(step)
        try:
            wait_until(lambda: all(self.rms[r].lost_count > losses[r] or self.rms[r].restored_at > restored[r]
                                   for r in expected), 30, "the RMs asked to re-register")
        except AssertionError as exc:
            raise self.fail(step, f"{exc}: {sorted(expected)} expected to recover") from None
        step.effect_gap = _now() - killed
        self._wait_scheduling(step, killed)
        if op_thread is not None:
            op_thread.join(OP_TIMEOUT + 30)
            if op_thread.is_alive():
                raise self.fail(step, f"the {step.op} did not end within {OP_TIMEOUT + 30:.0f}s")
            if op_error:
                raise self.fail(step, str(op_error[0]))
            op_done = _now()
        else:
            op_done = 0.0
        # a sweep started 5 s after the kill, the RMs' last re-registration and the op's end must pass
        self._wait_reads(step, killed, max(killed, op_done))
        self._wait_restarted(step, victim, pid, killed)  # before the next step picks a victim

    def _op_catching(self, step: Step, errors: list[BaseException]) -> None:
        try:
            self._op(step)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    def _op(self, step: Step) -> None:
        rm = self.rms[step.op_rm]
        if step.op == "reregister":
            rm.reregister(step.op_variant)
        else:
            rm.update_config(step.op_variant)

    def _pick(self, step: Step) -> tuple[str, int]:
        """The victim of the step's kind, once it has run for ``MIN_UPTIME`` (a process killed
        within supervisord's startsecs counts as a failed start; three make it FATAL)."""
        if step.kind == "worker":
            owned = owners(self.rest)
            workers = sorted(n for n in supervised(self.stack) if n.startswith("worker-"))
            busy = sorted(n for n in workers if n in owned)
            spares = sorted(set(workers) - set(busy))
            pool = busy if busy and (not spares or self.rng.random() < 0.75) else spares
            step.victim = self.rng.choice(pool)
            step.owned = owned.get(step.victim, "")
        else:
            step.victim = step.kind

        def up():
            row = supervised(self.stack).get(step.victim)
            if row and row["statename"] in UP_STATES and row["now"] - row["start"] >= MIN_UPTIME and row["pid"]:
                return row["pid"]
            return None
        pid = wait_until(up, 60, f"{step.victim} RUNNING for {MIN_UPTIME}s", interval=0.1)
        return step.victim, int(pid)

    def _expected(self, step: Step) -> set[str]:
        """The RMs a fault must make re-register."""
        if step.kind in ("rmproxy", "broker"):
            return set(self.rms)
        if step.kind == "worker" and step.owned:
            return {step.owned.split("/", 1)[0]}
        return set()

    def _wait_restarted(self, step: Step, victim: str, pid: int, killed: float) -> float:
        def back():
            row = supervised(self.stack).get(victim)
            return bool(row and row["pid"] and row["pid"] != pid and row["statename"] in UP_STATES)
        try:
            wait_until(back, 60, f"{victim} restarted by supervisord", interval=0.1)
        except AssertionError as exc:
            raise self.fail(step, str(exc)) from None
        return _now()

    def _wait_scheduling(self, step: Step, killed: float) -> None:
        wait_scheduling(list(self.rms.values()), step, killed, lambda message: self.fail(step, message))

    def _wait_reads(self, step: Step, killed: float, floor: float) -> None:
        """``wait_reads`` from the kill; the budget also counts from the step's op's end (``floor``)."""
        def base() -> float:
            return max([floor] + [rm.restored_at for rm in self.rms.values()])
        wait_reads(self.rest, list(self.rms.values()), self.pool, step, killed, base, "kill",
                   lambda message: self.fail(step, message))

    # -- summary ------------------------------------------------------------------------------

    def summary(self) -> dict:
        per_kind: dict[str, int] = {k: 0 for k in KINDS}
        for s in self.steps:
            per_kind[s.kind] += 1
        done = [s for s in self.steps if s.reads_gap]
        sched = [s.sched_gap for s in done]
        reads = [s.reads_gap for s in done]

        def worst(attr: str) -> str:
            if not done:
                return "-"
            s = max(done, key=lambda x: getattr(x, attr))
            return f"{getattr(s, attr):.2f}s ({s.describe()})"
        return {
            "seed": self.seed,
            "kills": len(self.steps),
            "kills_per_kind": per_kind,
            "worker_kills_owner": sum(1 for s in self.steps if s.kind == "worker" and s.owned),
            "worker_kills_spare": sum(1 for s in self.steps if s.kind == "worker" and not s.owned),
            "recoveries": {r: rm.lost_count for r, rm in self.rms.items()},
            "reregistrations": sum(rm.registrations for rm in self.rms.values()) - len(self.rms),
            "register_retries": sum(rm.register_retries for rm in self.rms.values()),
            "config_updates": sum(rm.config_updates for rm in self.rms.values()),
            "config_retries": sum(rm.config_retries for rm in self.rms.values()),
            "sched_gap_median": round(statistics.median(sched), 3) if sched else None,
            "sched_gap_longest": worst("sched_gap"),
            "reads_gap_median": round(statistics.median(reads), 3) if reads else None,
            "reads_gap_longest": worst("reads_gap"),
            "reads_after_reregistration_longest": round(max((s.budget_used for s in done), default=0.0), 3),
            "per_kind_gaps": {k: {"sched_median": _med([s.sched_gap for s in done if s.kind == k]),
                                  "sched_max": _max([s.sched_gap for s in done if s.kind == k]),
                                  "reads_median": _med([s.reads_gap for s in done if s.kind == k]),
                                  "reads_max": _max([s.reads_gap for s in done if s.kind == k])}
                              for k in KINDS},
            "retry_reasons": dict(sum((rm.retry_reasons for rm in self.rms.values()), collections.Counter())
                                  .most_common(8)),
            "allocations": sum(sum(rm.allocated.values()) for rm in self.rms.values()),
            "seconds": round(_now() - self.started, 1),
        }


def _med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _max(xs: list[float]) -> float | None:
    return round(max(xs), 3) if xs else None


# -- the end ------------------------------------------------------------------------------------

def scheduler_partition(rest: str, rm_id: str, partition: str) -> tuple[dict[str, tuple[str, str]], list[str], list[str]]:
    """(allocationKey -> (uuid, node), keys held twice, over-committed nodes) of one partition."""
    status, body = http_get(rest, f"/ws/v1/partition/{partition}/nodes?rmID={rm_id}", timeout=30)
    assert status == 200, f"nodes of [{rm_id}]{partition}: {status} {body[:300]!r}"
    view: dict[str, tuple[str, str]] = {}
    doubled, over = [], []
    for n in json.loads(body):
        summed: dict[str, int] = {}
        for a in n.get("allocations") or []:
            if a["allocationKey"] in view:
                doubled.append(a["allocationKey"])
            view[a["allocationKey"]] = (a["uuid"], a["nodeId"])
            for r, v in (a.get("resource") or {}).items():
                summed[r] = summed.get(r, 0) + v
        cap, alloc = n.get("capacity") or {}, n.get("allocated") or {}
        if any(v > cap.get(r, 0) for r, v in alloc.items()) or any(v > cap.get(r, 0) for r, v in summed.items()):
            over.append(f"{n['nodeID']}: allocated {alloc} (allocations sum {summed}) > capacity {cap}")
    return view, doubled, over


def make_room(rms: list[SoakRM]) -> None:
    """After the load: finish tasks until every pending ask fits, so that the end is quiet."""
    room = NODES_PER_PARTITION * min(NODE_MEMORY // 10, NODE_VCORE) - 20
    for rm in rms:
        with rm.lock:
            done = []
            for p in PARTITIONS:
                running = [a for a in rm.running.values() if rm.partition_of_app(a.applicationID) == p]
                pending = sum(1 for a in rm.pending.values() if rm.partition_of_app(a.applicationID) == p)
                done += running[:max(0, len(running) + pending - room)]
            for a in done:
                del rm.running[a.allocationKey]
            if done:
                rm.finish(done)


def final_check(rest: str, rms: list[SoakRM], seed: int) -> dict:
    """Quiesce (every client Running, nothing pending), then compare each partition's allocations
    with the RM's; returns the figures, raises naming what differs."""
    for rm in rms:
        assert rm.api.wait_running(OP_TIMEOUT), f"{rm.rm_id} client {rm.state()} at the end (seed {seed})"
        rm.wait(lambda r: not r.pending, timeout=120)
    figures = {"allocations_held": 0, "lost": 0, "doubled": 0, "phantom": 0, "overcommitted_nodes": 0}
    for rm in rms:
        for p in PARTITIONS:
            def same():
                view, doubled, over = scheduler_partition(rest, rm.rm_id, p)
                return (view, doubled, over) if view == rm.running_in(p) else None
            try:
                view, doubled, over = wait_until(same, 30, f"[{rm.rm_id}]{p} equal to the RM's view")
            except AssertionError:
                view, doubled, over = scheduler_partition(rest, rm.rm_id, p)
            mine = rm.running_in(p)
            lost = sorted(set(mine) - set(view))
            phantom = sorted(set(view) - set(mine))
            moved = sorted(k for k in set(mine) & set(view) if mine[k] != view[k])
            figures["allocations_held"] += len(view)
            figures["lost"] += len(lost)
            figures["doubled"] += len(doubled)
            figures["phantom"] += len(phantom) + len(moved)
            figures["overcommitted_nodes"] += len(over)
            assert not (lost or phantom or moved or doubled or over), (
                f"seed {seed}: [{rm.rm_id}]{p}: lost {lost[:5]} ({len(lost)}), not the RM's {phantom[:5]} "
                f"({len(phantom)}), different uuid/node {moved[:5]}, doubled {doubled[:5]}, over capacity {over[:3]}")
    violations = [v for rm in rms for v in rm.violations]
    figures["violations"] = len(violations)
    assert violations == [], f"seed {seed}: the RMs saw violations: {violations[:10]}"
    return figures


def seed_from_env() -> int:
    return int(os.environ.get("KORRAL_SOAK_SEED") or time.time())


def write_report(report: dict) -> None:
    path = os.environ.get("KORRAL_SOAK_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=2, default=str)


__all__ = ["Chaos", "Load", "SoakRM", "final_check", "make_room", "read_failures", "seed_from_env",
           "soak_config", "wait_reads", "wait_scheduling", "write_report"]
