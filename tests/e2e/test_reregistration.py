"""RM re-registration, as a restarting shim does it: every read path answers with current data.

One RM re-registers ten times with alternating configs (a shim restarting with a new config
map), a second RM re-registers in between, and a worker is killed with SIGKILL in the middle.
After each step, every ``/ws/v1`` read path of both RMs answers 200 with the data of that step
(the app just submitted, the queues of the config just registered), ``korral status`` shows
each RM and the owner of each partition as soon as ``RegisterResourceManager`` returns, and the
epoch a killed worker took with it is named the same by the RM's stream, the broker's log and
the status.
"""

from __future__ import annotations

import os
import signal

import grpc
import pytest

from common.netutil import http_get_json
from tests.conftest import wait_until
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node

pytestmark = pytest.mark.timeout(240)


def config(extra_queue: str) -> str:
    return f"""partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: default
          - name: {extra_queue}
"""


CONFIGS = [config("alpha"), config("beta")]


class Session:
    """One SI RM (generated stubs only) and what it reported in its current registration."""

    def __init__(self, si: str, rm_id: str) -> None:
        self.rm_id = rm_id
        self.rm = SIRM(si, rm_id)
        self.config = CONFIGS[0]
        self.app = ""

    def register(self, config: str) -> None:
        self.rm.cancel_streams()  # the shim restarts: its old streams go away
        self.rm.register(config)
        self.config = config

    def report(self, step: int) -> None:
        """What the shim reports after registering: its node, one app, one ask; waits for the allocation."""
        self.rm.open()
        self.rm.nodes(node(f"{self.rm_id}-n1", memory=1000, vcore=10))
        self.app = f"{self.rm_id}-app-{step}"
        self.rm.apps(app(self.app, queue="root.default"))
        self.rm.wait_accepted("application", {self.app})
        self.rm.asks(ask(f"{self.app}-k", self.app, memory=10, vcore=1))
        self.rm.wait_allocated({f"{self.app}-k"})

    def close(self) -> None:
        self.rm.cancel_streams()
        self.rm.close()


def get(stack, path: str):
    return http_get_json(f"http://{stack.rest_address}{path}", timeout=10)


def ok(stack, path: str):
    answer = get(stack, path)
    assert answer.status == 200, f"GET {path}: {answer.status} {answer.body}"
    return answer.body


def queue_names(tree: dict) -> set[str]:
    return {tree["queuename"]} | {n for c in tree.get("children") or [] for n in queue_names(c)}


def check_reads(stack, s: Session) -> None:
    """Every read path for the RM's partition answers 200 with the data of the current step."""
    q = f"?rmID={s.rm_id}"
    base = "/ws/v1/partition/default"
    extra = "root.alpha" if "alpha" in s.config else "root.beta"
    assert extra in queue_names(ok(stack, f"{base}/queues{q}"))
    assert ({"root.alpha", "root.beta"} - {extra}) & queue_names(ok(stack, f"{base}/queues{q}")) == set()
    assert ok(stack, f"{base}/queue/root.default{q}")["queuename"] == "root.default"
    assert [n["nodeID"] for n in ok(stack, f"{base}/nodes{q}")] == [f"{s.rm_id}-n1"]
    assert ok(stack, f"{base}/node/{s.rm_id}-n1{q}")["nodeID"] == f"{s.rm_id}-n1"
    assert [a["applicationID"] for a in ok(stack, f"{base}/queue/root.default/applications{q}")] == [s.app]
    assert [a["applicationID"] for a in ok(stack, f"{base}/applications{q}")] == [s.app]
    for path in (f"{base}/application/{s.app}{q}", f"{base}/queue/root.default/application/{s.app}{q}"):
        got = ok(stack, path)
        assert got["applicationID"] == s.app and len(got["allocations"]) == 1
    assert [u["userName"] for u in ok(stack, f"{base}/usage/users{q}")] == ["alice"]
    assert ok(stack, f"{base}/usage/user/alice{q}")["userName"] == "alice"
    groups = [g["groupName"] for g in ok(stack, f"{base}/usage/groups{q}")]
    assert groups and ok(stack, f"{base}/usage/group/{groups[0]}{q}")["groupName"] == groups[0]
    assert ok(stack, f"/ws/v1/korral/partition/default/heatmap{q}")
    assert ok(stack, f"/ws/v1/korral/partition/default/applications{q}")["total"] == 1
    active = ok(stack, f"/ws/v1/config{q}")  # asked for as JSON
    assert active["rmID"] == s.rm_id
    assert [c["name"] for c in active["partitions"][0]["queues"][0]["queues"]] == ["default", extra[5:]]


def check_cluster_reads(stack, sessions: list[Session]) -> None:
    parts = ok(stack, "/ws/v1/partitions")
    assert sorted(p.get("rmID") for p in parts) == sorted(s.rm_id for s in sessions), parts
    clusters = ok(stack, "/ws/v1/clusters")
    assert {c["clusterName"] for c in clusters} == {s.rm_id for s in sessions}
    assert all(c["totalApplications"] == "1" for c in clusters), clusters
    assert ok(stack, "/ws/v1/scheduler/healthcheck")["Healthy"] is True
    dump = ok(stack, "/ws/v1/fullstatedump")
    assert {a["applicationID"] for a in dump["Applications"]} == {s.app for s in sessions}
    for path in ("/ws/v1/events/batch", "/ws/v1/history/apps", "/ws/v1/history/containers",
                 "/ws/v1/korral/processes", "/ws/v1/korral/stack"):
        ok(stack, path)
    assert get(stack, "/ws/v1/metrics").status == 200


def check_status_right_after_registration(stack, s: Session) -> int:
    """The moment RegisterResourceManager returned, status shows the RM and its partition's owner."""
    view = ok(stack, "/ws/v1/korral/stack")["cluster"]
    rms = {rm: info for rp in view["rmproxies"] for rm, info in (rp.get("rms") or {}).items()}
    assert rms.get(s.rm_id, {}).get("state") == "Running", view
    [part] = [p for p in view["partitions"] if p["rmID"] == s.rm_id]
    assert part["worker"] and part["loaded"] and part["state"] == "owned", part
    [worker] = [w for w in view["workers"] if w["name"] == part["worker"]]
    assert worker["partition"] == f"{s.rm_id}/default" and worker["epoch"] == part["epoch"], (worker, part)
    return part["epoch"]


@pytest.mark.parametrize("stack_options", [{"workers": 3}])
def test_ten_re_registrations_a_second_rm_and_a_killed_worker_keep_every_read_path_current(stack):
    a, b = Session(stack.si_address, "rm-a"), Session(stack.si_address, "rm-b")
    try:
        b.register(CONFIGS[1])
        b.report(0)
        epochs = []
        for step in range(10):
            a.register(CONFIGS[step % 2])
            epochs.append(check_status_right_after_registration(stack, a))
            a.report(step)
            if step == 4:  # the second RM re-registers in between, with the other config
                b.register(CONFIGS[0])
                check_status_right_after_registration(stack, b)
                b.report(step)
            if step == 6:
                lost = kill_the_worker_of(stack, a)
                assert lost == epochs[-1]
                a.register(CONFIGS[step % 2])  # what the RM does when asked to re-register
                epochs.append(check_status_right_after_registration(stack, a))
                a.report(step)
            for s in (a, b):
                check_reads(stack, s)
            check_cluster_reads(stack, [a, b])
        assert epochs == sorted(set(epochs)), f"epochs must increase at every registration: {epochs}"
    finally:
        a.close()
        b.close()


def kill_the_worker_of(stack, s: Session) -> int:
    """SIGKILL the worker owning the RM's partition; returns the epoch it took with it, after
    checking that the RM's stream, the status and the broker's log all name that epoch."""
    view = ok(stack, "/ws/v1/korral/stack")["cluster"]
    [part] = [p for p in view["partitions"] if p["rmID"] == s.rm_id]
    [worker] = [w for w in view["workers"] if w["name"] == part["worker"]]
    os.kill(worker["pid"], signal.SIGKILL)
    try:
        s.rm.wait_for("allocation", lambda r: False, timeout=20)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE
        details = exc.details()
    else:  # pragma: no cover - wait_for raises
        raise AssertionError("the RM's stream was not ended")
    epoch = part["epoch"]
    assert details.startswith(f"korral: re-register: partition [{s.rm_id}]default lost epoch {epoch}: "), details
    assert f"its worker {worker['name']} is gone" in details

    def status_names_it():
        [p] = [p for p in ok(stack, "/ws/v1/korral/stack")["cluster"]["partitions"] if p["rmID"] == s.rm_id]
        return p if p["lastEpoch"] == epoch and p["worker"] is None else None

    part_now = wait_until(status_names_it, 10, "the status showing the lost epoch")
    assert f"epoch {epoch} lost" in part_now["state"] and "re-register" in part_now["state"]
    broker_log = (stack.state_dir / "logs" / "broker.log").read_text()
    assert f"[{s.rm_id}]default epoch {epoch} lost: its worker {worker['name']} is gone" in broker_log
    # a read of the partition while it waits for its RM says so, naming RM and partition
    answer = get(stack, f"/ws/v1/partition/default/nodes?rmID={s.rm_id}")
    assert answer.status == 503 and f"[{s.rm_id}]default" in answer.body["message"]
    assert "re-register" in answer.body["message"]
    # a stream opened before the RM registered again is ended with the same request
    s.rm.open()
    with pytest.raises(grpc.RpcError) as err:
        s.rm.next("node", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and err.value.details() == details
    return epoch


def test_a_re_registration_with_an_invalid_config_names_the_rm_and_loses_nothing(stack):
    a = Session(stack.si_address, "rm-bad")
    try:
        a.register(CONFIGS[0])
        a.report(0)
        with pytest.raises(grpc.RpcError) as err:
            a.rm.register("partitions:\n  - name: default\n    queues: [{name: root, bogus: 1}]\n")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details()
        assert details.startswith("registration of RM failed: RM rm-bad: ") and "bogus" in details, details
        assert "rm-bad keeps its current registration and partitions" in details
        # what was accepted before is all still there, and the RM's streams keep scheduling
        check_reads(stack, a)
        a.rm.asks(ask("after-bad-config", a.app, memory=10, vcore=1))
        a.rm.wait_allocated({"after-bad-config"})
        assert len(ok(stack, f"/ws/v1/partition/default/application/{a.app}?rmID=rm-bad")["allocations"]) == 2
    finally:
        a.close()


def test_a_stream_for_an_unknown_rm_is_refused_naming_it(stack):
    rm = SIRM(stack.si_address, "rm-nobody")
    try:
        rm.open()
        with pytest.raises(grpc.RpcError) as err:
            rm.next("node", timeout=10)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert err.value.details() == 'received NodeRequest, but RmID="rm-nobody" not registered'
    finally:
        rm.close()
