"""``korral config``: an operator changes an RM's queues.yaml on a running stack through rmproxy's
admin endpoint (authenticated by the stack's admin token): get, apply, diff, history, rollback,
the dry run, and every bad input refused with the old config kept."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import threading
from pathlib import Path

import pytest

from common.config import MAX_CONFIG_BYTES
from tests.conftest import korral_env, run_korral
from tests.core.whatif_scenario import LIVE, NEW
from tests.e2e.sirm import SIRM
from tests.si_builders import app, ask, node
from tests.rest.workload import http

RM = "rm-admin"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def loaded(stack):
    """An RM with apps in root.a (alice, 300 memory) and root.b (bob, 50 memory)."""
    rm = SIRM(stack.si_address, RM)
    rm.register(LIVE)
    rm.open()
    rm.report(nodes=(node("n1", memory=10_000, vcore=10_000),),
              apps=(app("app-a", queue="root.a", user="alice"), app("app-b", queue="root.b", user="bob")))
    asks = [*[ask(f"a{i}", "app-a", memory=100, vcore=1) for i in range(3)], ask("b0", "app-b", memory=50, vcore=1)]
    rm.asks(*asks)
    rm.wait_allocated({a.allocationKey for a in asks})
    yield stack
    rm.close()


def config(stack, *args: str):
    return run_korral("config", *args, "--state-dir", str(stack.state_dir), timeout=60)


def active_checksum(stack) -> str:
    text = http(f"http://{stack.rest_address}", f"/ws/v1/config?rmID={RM}").body.decode()
    return re.search(r"^checksum: (\w+)$", text, re.M).group(1)


def queue_max(stack, queue: str) -> dict:
    return http(f"http://{stack.rest_address}", f"/ws/v1/partition/default/queue/{queue}").json()["maxResource"]


def test_get_edit_apply_history_rollback(loaded, tmp_path: Path):
    stack = loaded
    got = config(stack, "get")
    assert got.returncode == 0, got.stderr
    first = active_checksum(stack)
    assert got.stdout.rstrip().endswith(f"checksum: {first}") and "name: a" in got.stdout
    edited = tmp_path / "queues.yaml"
    edited.write_text(got.stdout.replace("memory: 1000", "memory: 600"))

    diff = config(stack, "diff", str(edited))
    assert diff.returncode == 0 and "-          - {name: a, resources: {guaranteed: {memory: 100}, max: {memory: 1000}}}" \
        in diff.stdout and "max: {memory: 600}" in diff.stdout

    applied = config(stack, "apply", str(edited))
    assert applied.returncode == 0, applied.stderr
    second = active_checksum(stack)
    assert applied.stdout.strip() == f"RM {RM}: config changed {first} -> {second} as change 1"
    assert queue_max(stack, "root.a") == {"memory": 600}  # the worker runs the new config

    again = config(stack, "apply", str(edited))  # the file still says `checksum: <first>`, but nothing changes
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr

    history = json.loads(config(stack, "history", "--json").stdout)["records"]
    assert [(r["id"], r["who"], r["action"], r["oldChecksum"], r["newChecksum"]) for r in history] == \
        [(1, "token admin", "apply", first, second)]

    back = config(stack, "rollback", "1")
    assert back.returncode == 0, back.stderr
    assert active_checksum(stack) == first and queue_max(stack, "root.a") == {"memory": 1000}
    history = json.loads(config(stack, "history", "--json").stdout)["records"]
    assert [(r["id"], r["action"], r["newChecksum"]) for r in history][-1] == (2, "rollback", first)
    table = config(stack, "history").stdout
    assert re.search(r"^2 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ +token admin +rollback ", table, re.M), table


def test_a_stale_checksum_is_a_conflict_naming_both_and_the_config_stays(loaded, tmp_path: Path):
    stack = loaded
    read = config(stack, "get").stdout
    first = active_checksum(stack)
    mine, theirs = tmp_path / "mine.yaml", tmp_path / "theirs.yaml"
    mine.write_text(read.replace("memory: 1000", "memory: 700"))
    theirs.write_text(read.replace("memory: 1000", "memory: 800"))
    assert config(stack, "apply", str(theirs)).returncode == 0
    now = active_checksum(stack)
    late = config(stack, "apply", str(mine))  # made against `first`, which is no longer active
    assert late.returncode == 1
    assert f"409 config of RM {RM} changed since it was read: the active checksum is {now}, the change was made " \
           f"against {first}" in late.stderr
    assert queue_max(stack, "root.a") == {"memory": 800}


def test_concurrent_changes_against_the_same_checksum_one_wins(loaded):
    stack = loaded
    first = active_checksum(stack)
    token = (stack.state_dir / "admin-token").read_text().split(":", 1)[1].strip()
    answers: list[int] = []

    def put(memory: int) -> None:
        answers.append(http(f"http://{stack.rest_address}", f"/ws/v1/korral/admin/config/{RM}", method="PUT",
                            data=LIVE.replace("memory: 1000", f"memory: {memory}").encode(),
                            headers={"Authorization": f"Bearer {token}", "If-Match": first}).status)

    threads = [threading.Thread(target=put, args=(m,)) for m in (300, 400)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(answers) == [200, 409]
    assert len(json.loads(config(stack, "history", "--json").stdout)["records"]) == 1


def test_bad_input_is_refused_with_the_old_config_kept(loaded, tmp_path: Path):
    stack = loaded
    first = active_checksum(stack)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("partitions:\n  - name: default\n    queues: [\n")
    out = config(stack, "apply", str(bad_yaml))
    assert out.returncode == 1 and "400 update of configuration failed:" in out.stderr and "YAML" in out.stderr

    unknown = config(stack, "get", "--rm-id", "rm-nobody")
    assert unknown.returncode == 1 and f"404 RM 'rm-nobody' is not registered (registered RMs: {RM})" in unknown.stderr

    big = tmp_path / "big.yaml"
    big.write_text(LIVE + "#" * (MAX_CONFIG_BYTES + 1))
    out = config(stack, "apply", str(big))
    assert out.returncode == 1 and f"413 config for RM {RM} is too large" in out.stderr

    missing = config(stack, "rollback", "99")
    assert missing.returncode == 1 and f"404 RM {RM} has no config change 99" in missing.stderr
    assert active_checksum(stack) == first and queue_max(stack, "root.a") == {"memory": 1000}
    assert json.loads(config(stack, "history", "--json").stdout)["records"] == []


def test_credentials_are_required_and_checked(loaded):
    stack = loaded
    base = f"http://{stack.rest_address}/ws/v1/korral/admin/config/{RM}"
    assert http(base, "").status == 401
    wrong = http(base, "", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert (wrong.status, wrong.json()["message"]) == (401, "admin token not accepted")
    put = http(base, "", method="PUT", data=b"partitions: []", headers={"If-Match": active_checksum(stack)})
    assert put.status == 401
    assert queue_max(stack, "root.a") == {"memory": 1000}


def test_the_rms_own_changes_are_in_the_history(loaded):
    stack = loaded
    rm = SIRM(stack.si_address, RM)
    try:
        rm.register(LIVE.replace("memory: 1000", "memory: 900"))  # the RM's truth replaces the config
    finally:
        rm.close()
    (record,) = json.loads(config(stack, "history", "--json").stdout)["records"]
    assert (record["who"], record["action"]) == (f"RM {RM}", "rm-register")
    assert "another config" in record["note"]


def test_dry_run_reports_what_the_config_would_do_and_changes_nothing(loaded, tmp_path: Path):
    stack = loaded
    first = active_checksum(stack)
    new = tmp_path / "new.yaml"
    new.write_text(NEW)
    out = config(stack, "apply", "--dry-run", str(new))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"dry run of {new} for RM {RM}" in text and "nothing was changed" in text
    assert f"[{RM}]default: kept" in text
    assert "queue root.b drains: left out of the config, it still holds 1 applications using memory: 50 B" in text
    assert "queue root.d is added" in text
    assert "queue root.a is over its new max memory: 200 B by memory: 100 B" in text
    assert "quota preemption: none (preemption.quotapreemptionenabled is off for the partition)" in text
    assert "user alice in root.a would exceed the new limit: over maxresources memory: 250 B by memory: 50 B" in text
    assert "app-b (bob): root.b -> root.d" in text
    assert active_checksum(stack) == first and queue_max(stack, "root.a") == {"memory": 1000}
    doc = json.loads(config(stack, "apply", "--dry-run", str(new), "--json").stdout)
    (part,) = doc["partitions"]
    assert part["overMax"][0]["overBy"] == {"memory": 100} and doc["unchanged"] is False


def test_the_admin_line_korral_up_printed_runs_as_printed(loaded):
    stack = loaded
    row = next(line for line in stack.up_output.splitlines() if line.strip().startswith("admin token"))
    printed = row.rsplit("(", 1)[1].rstrip(")")
    assert " config get --state-dir " in printed, row
    result = subprocess.run(shlex.split(printed), capture_output=True, text=True, timeout=60, cwd=REPO,
                            env=korral_env(), stdin=subprocess.DEVNULL)
    assert result.returncode == 0 and result.stdout.rstrip().endswith(f"checksum: {active_checksum(stack)}"), \
        result.stderr


def test_one_checksum_everywhere_for_the_same_input(loaded, tmp_path: Path):
    """check-config, config get, /ws/v1/config and the admin endpoint show one checksum for one
    input: the checksum of what the scheduler serves for it."""
    stack = loaded
    token = (stack.state_dir / "admin-token").read_text().split(":", 1)[1].strip()
    saved = config(stack, "get").stdout  # ends with its checksum line
    for variant, text in (("saved by config get", saved.replace("memory: 1000", "memory: 990")),
                          ("blank lines around", "\n\n" + LIVE.replace("memory: 1000", "memory: 980") + "\n\n"),
                          ("empty", "")):
        path = tmp_path / "queues.yaml"
        path.write_text(text)
        checked = run_korral("check-config", str(path))
        assert checked.returncode == 0, checked.stdout
        offline = re.search(r"^  checksum (\w+)$", checked.stdout, re.M).group(1)
        assert ("was ignored" in checked.stdout) == (variant == "saved by config get"), variant
        applied = config(stack, "apply", "--allow-partition-removal", str(path))  # empty: asked for explicitly
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.split(" -> ")[1].split()[0] == offline, variant  # the change's new checksum
        assert active_checksum(stack) == offline, variant  # /ws/v1/config
        admin = http(f"http://{stack.rest_address}", f"/ws/v1/korral/admin/config/{RM}",
                     headers={"Authorization": f"Bearer {token}"}).json()
        assert admin["checksum"] == offline and admin["default"] is (variant == "empty"), variant
        got = config(stack, "get")
        assert got.stdout.rstrip().endswith(f"checksum: {offline}"), variant
    # the YAML the default config stands for, not only a checksum
    assert "partitions:\n  - name: default\n" in got.stdout and "the default config" in got.stderr
