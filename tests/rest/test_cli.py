"""``korral queues | apps | nodes | dump`` against the loaded stack (in-process, via the dispatcher)."""

from __future__ import annotations

import json
import re

import pytest

from common.cli import main
from tests.conftest import wait_until
from tests.si_builders import app, remove_app
from tests.rest.workload import Loaded


def korral(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse: bad flags
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def addr(loaded: Loaded) -> str:
    return loaded.handle.rest_address


def test_queues_table_shows_the_tree_with_resources(loaded: Loaded, capsys) -> None:
    code, out, _ = korral(capsys, "queues", "--rest-address", addr(loaded), "--partition", "default", "--raw")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "[rm-rest]default" and lines[1].split()[:3] == ["QUEUE", "STATE", "GUARANTEED"]
    a = next(line for line in lines if line.strip().startswith("a "))
    assert "memory=400" in a and "memory=1000" in a and "memory=200,vcore=20" in a


def test_tables_show_the_dashboards_units_unless_raw(loaded: Loaded, capsys) -> None:
    code, out, _ = korral(capsys, "queues", "--rest-address", addr(loaded), "--partition", "default")
    a = next(line for line in out.splitlines() if line.strip().startswith("a "))
    assert code == 0 and "memory: 400 B" in a and "memory: 200 B, vcore: 20m" in a
    code, out, _ = korral(capsys, "nodes", "--rest-address", addr(loaded), "--partition", "default")
    assert code == 0 and "vcore: 1 core" in out and ", vcore=" not in out  # utilisation stays in %


def test_apps_of_a_queue_as_json(loaded: Loaded, capsys) -> None:
    code, out, _ = korral(capsys, "apps", "--rest-address", addr(loaded), "--queue", "root.a", "--json")
    assert code == 0
    doc = json.loads(out)
    assert [d["partition"] for d in doc] == ["default"]  # gpu has no root.a
    assert [a["applicationID"] for a in doc[0]["apps"]] == ["app-a1"]


def test_apps_filtered_by_state(loaded: Loaded, capsys) -> None:
    code, out, _ = korral(capsys, "apps", "--rest-address", addr(loaded), "--partition", "default",
                          "--state", "Starting")
    assert code == 0 and "app-b1" in out and "app-a1" not in out


def test_nodes_of_every_partition(loaded: Loaded, capsys) -> None:
    code, out, _ = korral(capsys, "nodes", "--rest-address", addr(loaded))
    assert code == 0
    assert "[rm-rest]default" in out and "[rm-rest]gpu" in out
    assert "g1" in out and "gpu=25%" in out


@pytest.mark.parametrize("args,message", [
    (("nodes", "--partition", "nope"), "partition 'nope' not found"),
    (("apps", "--queue", "root.zz"), "Queue not found"),
], ids=["unknown partition", "unknown queue"])
def test_errors_exit_1_with_the_message(loaded: Loaded, capsys, args, message) -> None:
    code, _, err = korral(capsys, args[0], "--rest-address", addr(loaded), *args[1:])
    assert code == 1 and message in err


def test_unreachable_api_exits_1(capsys) -> None:
    code, _, err = korral(capsys, "queues", "--rest-address", "127.0.0.1:1")
    assert code == 1 and "cannot reach the REST API" in err


def test_dump_writes_the_full_state_to_a_file(loaded: Loaded, capsys, tmp_path) -> None:
    target = tmp_path / "dump.json"
    code, out, _ = korral(capsys, "dump", "--rest-address", addr(loaded), "--output", str(target))
    assert code == 0 and "2 partition(s), 3 application(s), 3 node(s)" in out
    doc = json.loads(target.read_text())
    assert sorted(p["name"] for p in doc["Partitions"]) == ["default", "gpu"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_dump_to_an_unwritable_place_fails_cleanly(loaded: Loaded, capsys, tmp_path) -> None:
    code, _, err = korral(capsys, "dump", "--rest-address", addr(loaded), "--output",
                          str(tmp_path / "no" / "such" / "dir" / "d.json"))
    assert code == 1 and "cannot write" in err


def test_explain_says_what_holds_each_pending_ask(loaded: Loaded, capsys) -> None:
    code, out, _ = korral(capsys, "explain", "app-a1", "--rest-address", addr(loaded))
    assert code == 0
    assert out.splitlines()[0] == "application app-a1 is in partition [rm-rest]default"  # every partition searched
    assert out.splitlines()[1].startswith("ask a1-huge of app-a1: 1 pending")
    assert "held by the headroom of queue root.a" in out  # 200 used + 900 > max 1000
    code, out, _ = korral(capsys, "explain", "app-a1", "a1-huge", "--rest-address", addr(loaded), "--json")
    assert code == 0
    (e,) = json.loads(out)
    assert (e["allocationKey"], e["queueHeadroomBlockedBy"], e["limitBlockedBy"]) == ("a1-huge", "root.a", "")
    assert sum(e["nodes"].values()) == 2  # both nodes of the partition were examined


def test_explain_names_a_missing_ask_or_application(loaded: Loaded, capsys) -> None:
    code, _, err = korral(capsys, "explain", "app-a1", "nope", "--rest-address", addr(loaded))
    assert code == 1 and "404 Allocation ask not found" in err
    code, _, err = korral(capsys, "explain", "app-zz", "k", "--rest-address", addr(loaded))
    assert code == 1 and "Application not found: application app-zz is in no partition (searched: " \
        "[rm-rest]default, [rm-rest]gpu)" in err
    code, _, err = korral(capsys, "explain", "app-zz", "--rest-address", addr(loaded), "--partition", "gpu")
    assert code == 1 and "application app-zz is not in partition [rm-rest]gpu; nor in any other partition" in err
    code, out, _ = korral(capsys, "explain", "app-b1", "--rest-address", addr(loaded), "--partition", "default")
    assert code == 0 and out.strip() == "application app-b1 has no pending asks"


def test_explain_finds_an_application_of_another_partition_and_says_where(loaded: Loaded, capsys) -> None:
    rm = loaded.rm
    rm.apps(app("app-elsewhere", queue="root.default", partition="gpu", user="dave"))
    rm.wait_accepted("application", {"app-elsewhere"})
    try:
        code, _, err = korral(capsys, "explain", "app-elsewhere", "--rest-address", addr(loaded), "--partition",
                              "default")
        assert code == 1 and "application app-elsewhere is not in partition [rm-rest]default; it is in partition " \
            "[rm-rest]gpu: " in err and "explain app-elsewhere --partition '[rm-rest]gpu'" in err
        code, out, _ = korral(capsys, "explain", "app-elsewhere", "--rest-address", addr(loaded))
        assert code == 0 and out.splitlines()[0] == "application app-elsewhere is in partition [rm-rest]gpu"
    finally:  # the stack is the package's: leave its applications as they were
        rm.remove_apps(remove_app("app-elsewhere", "gpu"))


@pytest.mark.parametrize("command", [["queues"], ["apps"], ["nodes"], ["explain", "app-a1"], ["dump", "-o", "-"],
                                     ["config", "get"]], ids=lambda c: c[0])
def test_every_rest_client_takes_the_stack_of_state_dir(loaded: Loaded, capsys, command) -> None:
    code, out, err = korral(capsys, *command, "--state-dir", str(loaded.handle.state_dir))
    assert code == 0, err
    assert ("rm-rest" in out) or ("partitions:" in out)
    code, _, err = korral(capsys, *command, "--state-dir", str(loaded.handle.state_dir), "--rest-address", "127.0.0.1:1")
    assert code == 1 and "127.0.0.1:1" in err  # an address given wins over the stack's


def test_a_state_dir_without_a_stack_is_named(capsys, tmp_path) -> None:
    code, _, err = korral(capsys, "queues", "--state-dir", str(tmp_path))
    assert code == 1 and f"no stack in {tmp_path}" in err


def test_explain_of_a_removed_application_says_so_and_when(loaded: Loaded, capsys) -> None:
    rm = loaded.rm
    rm.apps(app("app-gone", queue="root.default", partition="gpu", user="dave"))
    rm.wait_accepted("application", {"app-gone"})
    rm.remove_apps(remove_app("app-gone", "gpu"))

    def explained() -> str | None:
        code, out, _ = korral(capsys, "explain", "app-gone", "--rest-address", addr(loaded), "--partition", "gpu")
        return out if code == 0 and "was removed" in out else None

    out = wait_until(explained, 20, "app-gone explained as removed")
    assert re.fullmatch(r"application app-gone was removed by the RM at \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ "
                        r"while (New|Accepted) \(queue root\.default\): nothing of it waits\n", out), out
    code, out, _ = korral(capsys, "explain", "app-gone", "--rest-address", addr(loaded), "--partition", "gpu",
                          "--json")
    doc = json.loads(out)
    assert code == 0 and (doc["active"], doc["removed"], doc["queue"]) == (False, True, "root.default")
