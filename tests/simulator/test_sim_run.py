"""korral sim end to end: against the fake scheduler, a broken one, and a real stack."""

from __future__ import annotations

import argparse
import json
import threading

from rich.console import Console

import simulator as sim_cli
from simulator.presets import PRESETS
from simulator.report import print_final_view
from simulator.runner import SimOptions, simulate
from simulator.workload import parse_workload, plan

QUIET = Console(file=open("/dev/null", "w"))

TIGHT = """
name: tight
seed: 1
duration: 20
nodes:
  - {name: n, count: 2, resources: {vcore: 2, memory: 4Gi}}
apps:
  - {name: a, count: 2, queue: root.a, arrival: {interval: 0.05}, tasks: 6,
     resources: {vcore: 1, memory: 1Gi}, duration: 0.3}
"""


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sim_cli.configure(parser)
    return sim_cli.run(parser.parse_args(argv))


def small_plan(text=PRESETS["small"][0]):
    return plan(parse_workload(text))


def test_a_small_workload_finishes_with_every_app_completed_and_no_violation(fake):
    result = simulate(small_plan(), SimOptions(si_address=fake.address, progress=False), QUIET)
    s = result.summary
    assert s["violations"] == []
    assert s["apps"] == {"Completed": 6}
    assert s["tasks"]["done"] == s["allocations"] == small_plan().task_count
    assert s["latency_p50_ms"] is not None and s["latency_p99_ms"] >= s["latency_p50_ms"]
    # every allocation was released and every app removed
    assert fake.allocs == {} and fake.apps == {}


def test_contention_queues_tasks_without_overcommitting(fake):
    """4 slots for 12 tasks: they must wait for releases, and the sim must not report false violations."""
    result = simulate(small_plan(TIGHT), SimOptions(si_address=fake.address, progress=False), QUIET)
    assert result.summary["violations"] == []
    assert result.summary["apps"] == {"Completed": 2}
    assert result.summary["latency_max_ms"] >= 250  # some tasks waited for a release


def test_an_overcommitting_scheduler_is_caught_and_the_exit_status_is_nonzero(broken, tmp_path, capsys):
    workload = tmp_path / "w.yaml"
    workload.write_text(TIGHT)
    out = tmp_path / "out.json"
    status = run_cli(["--si-address", broken.address, "--workload", str(workload), "--no-progress",
                      "--json", str(out)])
    assert status == 1
    summary = json.loads(out.read_text())["summary"]
    kinds = {v["kind"] for v in summary["violations"]}
    assert kinds == {"node-overcommit"}
    assert "over-committed" in capsys.readouterr().out


def test_cli_writes_csv_and_json_and_exits_zero_on_a_clean_run(fake, tmp_path):
    csv_path, json_path = tmp_path / "t.csv", tmp_path / "t.json"
    status = run_cli(["--si-address", fake.address, "--preset", "small", "--no-progress", "--seed", "9",
                      "--csv", str(csv_path), "--json", str(json_path)])
    assert status == 0
    header = csv_path.read_text().splitlines()[0].split(",")
    assert header[:5] == ["t", "running", "pending", "done", "allocations_per_second"]
    assert "share:default:root.a" in header
    data = json.loads(json_path.read_text())
    assert data["summary"]["seed"] == 9 and data["timeline"]


def test_cli_refuses_a_bad_workload_naming_the_fault(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("{nodes: [{name: n, resources: {vcore: 1}}], apps: [{name: a, resources: {vcore: 1}, x: 1}]}")
    assert run_cli(["--workload", str(bad), "--si-address", "127.0.0.1:1"]) == 2
    assert "app template 'a': unknown key 'x'" in capsys.readouterr().err


def test_cli_reports_an_unreachable_scheduler_with_status_2(capsys):
    assert run_cli(["--preset", "small", "--si-address", "127.0.0.1:1", "--no-progress"]) == 2
    assert "RegisterResourceManager" in capsys.readouterr().err


def test_a_resync_in_the_middle_of_a_run_is_replayed_without_violations(fake):
    p = small_plan(TIGHT)
    timer = threading.Timer(0.4, lambda: fake.request_reregister("korral-sim"))
    timer.start()
    result = simulate(p, SimOptions(si_address=fake.address, progress=False), QUIET)
    timer.join()
    assert result.reconnects == 1
    assert result.summary["violations"] == []  # replayed allocations were not allocated again
    assert result.summary["apps"] == {"Completed": 2}
    assert fake.register_count == 2


def test_the_workloads_own_config_update_is_sent_and_the_checks_follow_it(fake):
    from simulator.served import BY_WORKLOAD

    update = TIGHT.replace("duration: 20\n", "duration: 20\nconfig_updates:\n  - at: 0.1\n    config: |\n"
                           "      partitions: [{name: default, placementrules: [{name: provided, create: true}],\n"
                           "        queues: [{name: root, submitacl: '*', queues: [{name: a, resources: "
                           "{max: {vcore: 8}}}]}]}]\n")
    result = simulate(small_plan(update), SimOptions(si_address=fake.address, progress=False), QUIET)
    assert result.summary["violations"] == [] and result.summary["apps"] == {"Completed": 2}
    assert [u.config for u in fake.config_updates] == [parse_workload(update).config_updates[0][1]]
    [change] = result.summary["config_changes"]
    assert change["by"] == BY_WORKLOAD


def test_the_small_preset_on_a_real_stack_has_no_violations(stack_factory):
    stack = stack_factory(workers=1)
    result = simulate(small_plan(), SimOptions(si_address=stack.si_address, progress=False,
                                               rest_address=stack.rest_address), QUIET)
    assert result.summary["violations"] == []
    assert result.summary["apps"] == {"Completed": 6}
    # what ran is shown afterwards: a view read while tasks ran, and the end, read before the RM left
    views = result.final_view
    [(at, busy)] = views["busiest"].values()
    assert busy["name"] == "default" and busy["queues"]["allocatedResource"]
    assert 0 <= at <= result.summary["seconds"] + 1
    [end] = views["end"]["partitions"]
    assert end["name"] == "default" and end["capacity"]["capacity"]
    import io
    buf = io.StringIO()
    print_final_view(views, "korral-sim", Console(file=buf, width=200))
    text = buf.getvalue()
    assert "[korral-sim]default" in text and "its busiest view" in text
    assert "before the RM unregistered" in text


SERVED = """
name: served
seed: 3
duration: 60
config: |
  partitions:
    - name: default
      placementrules: [{name: provided, create: true}]
      queues: [{name: root, submitacl: '*', queues: [{name: a, resources: {max: {vcore: MAX}}}]}]
    - name: edge
      placementrules: [{name: provided, create: true}]
      queues: [{name: root, submitacl: '*'}]
nodes:
  - {name: n, count: 2, partition: default, resources: {vcore: 8, memory: 16Gi}}
  - {name: e, count: 1, partition: edge, resources: {vcore: 4, memory: 8Gi}}
apps:
  - {name: a, count: 1, queue: root.a, partition: default, tasks: 48, resources: {vcore: 1, memory: 1Gi},
     duration: [1.0, 1.5]}
  - {name: e, count: 1, queue: root.e, partition: edge, tasks: 4, resources: {vcore: 1, memory: 1Gi},
     duration: 3.0}
"""


def test_an_operators_change_during_a_run_is_checked_as_served_and_each_partition_shows_its_busiest_view(
        stack_factory, tmp_path):
    """root.a's max is raised from 4 to 8 vcore by `korral config apply` while the sim runs: the
    scheduler then places 8 tasks there, which is no violation of the config it serves; the
    summary says when the config changed. Partition edge finishes long before default: its own
    busiest view is shown (its queue root.e in use), not an idle one taken while default worked.
    (edge's tasks run 3 s, six of the sampler's 0.5 s reads: a loaded machine still catches them.)"""
    import io

    from common.restclient import RestClient
    from tests.conftest import run_korral, wait_until

    stack = stack_factory(workers=2)
    workload = plan(parse_workload(SERVED.replace("MAX", "4")))
    results: list = []
    runner = threading.Thread(target=lambda: results.append(simulate(workload, SimOptions(
        si_address=stack.si_address, rest_address=stack.rest_address, progress=False), QUIET)), daemon=True)
    runner.start()
    rest = RestClient(stack.rest_address)

    def a_at_max() -> bool:
        try:
            used = rest.get("/ws/v1/partition/default/queue/root.a")["allocatedResource"].get("vcore", 0)
        except Exception:  # not there yet
            return False
        return used >= 4000

    wait_until(a_at_max, 60, "root.a at its max of 4 vcore")
    raised = tmp_path / "raised.yaml"
    raised.write_text(workload.workload.config.replace("vcore: 4}", "vcore: 8}"))
    applied = run_korral("config", "apply", str(raised), "--state-dir", str(stack.state_dir), timeout=60)
    assert applied.returncode == 0, applied.stderr
    runner.join(120)
    assert results, "the sim did not finish"
    summary = results[0].summary
    assert summary["violations"] == [], summary["violations"][:3]
    assert summary["apps"] == {"Completed": 2}
    [change] = summary["config_changes"]
    assert change["by"].startswith("not by this RM") and 0 < change["t"] < summary["seconds"]
    peak = max(row["shares"].get("default:root.a", 0) for row in results[0].timeline)
    assert peak > 4 / 16  # more than the old max ran at once (4 of 16 vcore is the old max's share)

    views = results[0].final_view
    at_edge, edge = views["busiest"]["edge"]
    assert edge["queues"]["allocatedResource"] and [c["queuename"] for c in edge["queues"]["children"]] == ["root.e"]
    buf = io.StringIO()
    print_final_view(views, "korral-sim", Console(file=buf, width=200))
    text = buf.getvalue()
    assert "[korral-sim]edge" in text and "its busiest view: memory" in text and "root.e" in text
    from simulator.report import print_summary
    buf = io.StringIO()
    print_summary(summary, Console(file=buf, width=300))
    assert "the config the scheduler serves changed at" in buf.getvalue()


def test_the_live_view_renders_progress_rate_and_queues(fake):
    import io
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    result = simulate(small_plan(), SimOptions(si_address=fake.address, progress=True), console)
    assert result.summary["violations"] == []
    text = buf.getvalue()
    assert "tasks" in text and "alloc/s" in text and "default:root.a" in text


RESTART = """
name: restart
seed: 2
duration: 60
nodes:
  - {name: n, count: 4, resources: {vcore: 4, memory: 8Gi}}
  - {name: e, count: 2, partition: edge, resources: {vcore: 4, memory: 8Gi}}
apps:
  - {name: a, count: 6, queue: root.a, arrival: {interval: 0.3}, tasks: 8,
     resources: {vcore: 1, memory: 1Gi}, duration: [0.5, 1.5]}
  - {name: b, count: 4, queue: root.b, partition: edge, arrival: {interval: 0.4}, tasks: 6,
     resources: {vcore: 1, memory: 1Gi}, duration: [0.5, 1.5]}
"""


def test_killing_rmproxy_mid_run_on_a_real_stack_is_recovered_without_violations(stack_factory):
    import os
    import signal

    stack = stack_factory(workers=2)
    killer = threading.Timer(1.2, lambda: os.kill(stack.pids["rmproxy"], signal.SIGKILL))
    killer.start()
    result = simulate(small_plan(RESTART), SimOptions(si_address=stack.si_address, progress=False), QUIET)
    killer.join()
    assert result.reconnects >= 1
    assert result.summary["violations"] == []
    assert result.summary["apps"] == {"Completed": 10}


def test_a_scheduler_that_ignores_user_and_group_limits_is_caught(fake):
    """The fake scheduler knows no limits: the sim must see every user and group limit broken."""
    result = simulate(small_plan(PRESETS["limits"][0]), SimOptions(si_address=fake.address, progress=False), QUIET)
    kinds = {v["kind"] for v in result.summary["violations"]}
    assert kinds == {"user-limit-exceeded", "group-limit-exceeded"}
    messages = " ".join(v["message"] for v in result.summary["violations"])
    assert "user alice over its limit in queue root.shared" in messages
    assert "group data runs 2 apps in queue root.shared" in messages
