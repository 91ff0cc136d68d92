"""`korral check-config FILE`: errors printed, exit 1 when invalid, 0 with a summary when valid."""

import subprocess
import sys

import pytest

from common.cli import main
from common.config import MAX_CONFIG_BYTES
from tests.placement.seed001_cases import COMPLEX_1

GOOD = COMPLEX_1
BAD = "partitions:\n  - queues:\n      - name: a.b\n        submitacl: 'x y z'\n    placementrules:\n      - name: fixed\n"


def write(tmp_path, text, name="queues.yaml"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def test_valid_file_exits_zero_with_summary(tmp_path, capsys):
    assert main(["check-config", write(tmp_path, GOOD)]) == 0
    out = capsys.readouterr().out
    assert "queues.yaml: valid" in out
    assert "partition default: 4 queues, 3 placement rules, node sort fair" in out
    assert "checksum " in out


def test_the_summary_names_the_topology_levels(tmp_path, capsys):
    text = ("partitions:\n  - name: default\n    queues: [{name: root}]\n    topology:\n      levels:\n"
            "        - {name: block, label: example.com/block}\n        - {name: rack, label: example.com/rack}\n")
    assert main(["check-config", write(tmp_path, text)]) == 0
    assert "node sort fair, topology block > rack" in capsys.readouterr().out


def test_invalid_file_prints_each_error_and_exits_one(tmp_path, capsys):
    assert main(["check-config", write(tmp_path, BAD)]) == 1
    lines = capsys.readouterr().out.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == [
        "error: partition default, queue root.a.b: invalid child name a.b, a name must only have alphanumeric "
        "characters, - or _, and be no longer than 64 characters",
        "error: partition default, queue root.a.b: submitacl: multiple spaces found in ACL: 'x y z'",
        "error: partition default, placement rule 1 (fixed): a fixed queue rule must have a queue name set",
    ]
    assert lines[-1].endswith("invalid, 3 error(s)")


def test_missing_file_exits_two(tmp_path, capsys):
    assert main(["check-config", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_too_large_file_is_invalid_without_reading_it_whole(tmp_path, capsys):
    assert main(["check-config", write(tmp_path, b"#" * (MAX_CONFIG_BYTES + 10))]) == 1
    assert "config too large" in capsys.readouterr().out


def test_invalid_utf8_is_invalid(tmp_path, capsys):
    assert main(["check-config", write(tmp_path, b"\xff\xfe")]) == 1
    assert "not valid UTF-8" in capsys.readouterr().out


@pytest.mark.parametrize("strict,expected", [(False, 0), (True, 1)], ids=["warnings allowed", "strict"])
def test_warnings(tmp_path, capsys, strict, expected):
    text = "partitions:\n  - statedumpfilepath: /x\n    queues: [{name: root}]\n"
    args = ["check-config", write(tmp_path, text)] + (["--strict"] if strict else [])
    assert main(args) == expected
    assert "warning: partition default: statedumpfilepath is deprecated and ignored" in capsys.readouterr().out


def test_runs_as_a_command_reading_stdin():
    result = subprocess.run(
        [sys.executable, "-m", "common.cli", "check-config", "-"], input=BAD.encode(), capture_output=True, timeout=60
    )
    assert result.returncode == 1
    assert b"a fixed queue rule must have a queue name set" in result.stdout


def test_too_large_file_is_reported_with_its_size(tmp_path, capsys):
    size = MAX_CONFIG_BYTES + (3 << 20)  # bigger than what is read of it
    assert main(["check-config", write(tmp_path, b"#" * size)]) == 1
    assert f"error: config too large: {size} bytes, the limit is {MAX_CONFIG_BYTES} bytes" in capsys.readouterr().out


def test_too_large_stdin_is_reported_with_its_size():
    size = MAX_CONFIG_BYTES + 12345
    result = subprocess.run([sys.executable, "-m", "common.cli", "check-config", "-"], input=b"#" * size,
                            capture_output=True, timeout=60)
    assert result.returncode == 1
    assert f"config too large: {size} bytes".encode() in result.stdout


def _checksum_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("  checksum ")).split()[1]


def test_the_checksum_is_what_the_scheduler_would_serve_for_an_empty_file(tmp_path, capsys):
    from common.config import config_with_checksum

    assert main(["check-config", write(tmp_path, "")]) == 0
    out = capsys.readouterr().out
    served = config_with_checksum("")  # what /ws/v1/config serves when the RM registered an empty config
    assert f"checksum: {_checksum_line(out)}\n" == served.splitlines(keepends=True)[-1]
    assert "was ignored" not in out


@pytest.mark.parametrize("line,verdict", [(None, "it matches"), ("checksum: " + "0" * 64, "it differs")],
                         ids=["saved by config get", "edited afterwards"])
def test_a_files_own_checksum_line_is_ignored_and_said_so(tmp_path, capsys, line, verdict):
    from common.config import config_with_checksum

    saved = config_with_checksum(GOOD)  # as `korral config get` writes it
    if line is not None:
        saved = saved.rsplit("checksum:", 1)[0] + line + "\n"
    assert main(["check-config", write(tmp_path, saved)]) == 0
    out = capsys.readouterr().out
    assert _checksum_line(out) == config_with_checksum(GOOD).split("checksum: ")[1].strip()
    assert "the file's own checksum: line" in out and f"was ignored: it is not part of the config ({verdict})" in out
