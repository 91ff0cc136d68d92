"""YAML nesting beyond MAX_NESTING: Korral's own message with the line, whatever the YAML parser does."""

import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import common.config._yaml as yaml_reader
from common.cli import main
from common.config import ConfigError, load_config
from common.config._nesting import first_too_deep
from common.config._yaml import MAX_NESTING, YamlError

PARSERS = {"libyaml": getattr(yaml, "CBaseLoader", None), "pure Python": yaml.BaseLoader}


@pytest.fixture(params=list(PARSERS))
def parser(request, monkeypatch):
    """Each test runs with libyaml (when this PyYAML has it) and with PyYAML's pure-Python parser."""
    loader = PARSERS[request.param]
    if loader is None:
        pytest.skip("this PyYAML is built without libyaml")
    monkeypatch.setattr(yaml_reader, "_Parser", loader)
    return loader


def too_deep(line: int, column: int) -> str:
    return f"invalid YAML at line {line}, column {column}: nesting deeper than {MAX_NESTING} levels"


def indented(step: str, levels: int) -> str:
    return "".join(" " * i + step + "\n" for i in range(levels)) + " " * levels + "leaf\n"


def nested_queues(levels: int) -> str:
    lines = ["partitions:", "  - name: default", "    queues:"]
    for i in range(levels):
        lines += [" " * (6 + 2 * i) + "- name: q", " " * (8 + 2 * i) + "queues:"]
    return "\n".join(lines) + "\n"


# (text, line, column) of the first mapping or sequence at level MAX_NESTING + 1 (257).
SHAPES = {
    "flow sequences": ("[" * 5000 + "]" * 5000, 1, 257),
    "flow mappings": ("{a: " * 5000 + "b" + "}" * 5000, 1, 4 * 256 + 1),
    "flow sequences over lines": ("[\n" * 5000 + "]" * 5000, 257, 1),
    "flow in a block mapping": ("partitions: " + "[" * 5000 + "]" * 5000 + "\n", 1, 13 + 255),
    "compact block sequences": ("- " * 5000 + "a\n", 1, 2 * 256 + 1),
    "indented mappings": (indented("a:", 400), 257, 257),
    "indented sequences": (indented("-", 400), 257, 257),
    "queues nested in queues": (nested_queues(200), 256, 261),
}


@pytest.mark.parametrize("text,line,column", SHAPES.values(), ids=SHAPES.keys())
def test_nesting_too_deep_names_the_line_and_the_limit(parser, text, line, column):
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert err.value.errors == [too_deep(line, column)]


@pytest.mark.parametrize("text,line,column", SHAPES.values(), ids=SHAPES.keys())
def test_without_the_scan_each_parser_still_gives_korrals_message(parser, monkeypatch, text, line, column):
    """The composer's bound, or the parser's own depth failure mapped; 1,200 levels pass libyaml's limit of 1,000."""
    monkeypatch.setattr(yaml_reader, "first_too_deep", lambda text, limit: None)
    text = text.replace("[" * 5000, "[" * 1200).replace("{a: " * 5000, "{a: " * 1200)
    with pytest.raises(YamlError) as err:
        yaml_reader.read_yaml(text)
    assert err.value.args[0].startswith("invalid YAML at line ")
    assert err.value.args[0].endswith(f"nesting deeper than {MAX_NESTING} levels")


def test_nesting_at_the_limit_is_accepted(parser):
    assert yaml_reader.read_yaml("[" * MAX_NESTING + "]" * MAX_NESTING) is not None
    assert first_too_deep(indented("a:", MAX_NESTING - 1), MAX_NESTING) is None


@pytest.mark.parametrize(
    "text",
    [
        "partitions:\n  - name: default # " + "[" * 300 + "\n    queues: [{name: root}]\n",
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        properties: {x: '" + "[{" * 300 + "'}\n",
        'partitions:\n  - name: default\n    queues:\n      - name: root\n        properties:\n          x: "a\n'
        + "           [[" * 300 + '"\n',
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        properties:\n          x: |\n"
        + "            - [{\n" * 300,
        "partitions:\n  - name: default\n    queues:\n      - name: root\n        properties:\n          x: a\n"
        + "            - b [\n" * 300,
    ],
    ids=["comment", "single-quoted", "double-quoted over lines", "block scalar", "plain scalar over lines"],
)
def test_brackets_and_dashes_in_text_do_not_count(parser, text):
    assert load_config(text).partitions[0].name == "default"


def fake_parse(events, failure):
    def parse(text, Loader):
        yield from events
        raise failure

    return parse


def mark(line: int, column: int) -> yaml.Mark:
    return yaml.Mark("<unicode string>", 0, line, column, None, None)


def test_the_parsers_own_depth_error_gets_korrals_message(monkeypatch):
    """libyaml >= 0.2.5 stops at 1,000 levels with 'exceeded maximum nesting depth'."""
    failure = yaml.scanner.ScannerError("while increasing flow level", mark(0, 0), "exceeded maximum nesting depth", mark(3, 1000))
    monkeypatch.setattr(yaml_reader, "first_too_deep", lambda text, limit: None)
    monkeypatch.setattr(yaml, "parse", fake_parse([yaml.StreamStartEvent()], failure))
    with pytest.raises(ConfigError) as err:
        load_config("x: y\n", source="queues.yaml")
    assert err.value.errors == ["queues.yaml: " + too_deep(4, 1001)]


def test_a_recursion_error_in_the_parser_gets_korrals_message(monkeypatch):
    """Older parsers recurse until RecursionError: reported where the last event was read."""
    events = [yaml.StreamStartEvent(), yaml.DocumentStartEvent(), yaml.SequenceStartEvent(None, None, True, mark(6, 2))]
    monkeypatch.setattr(yaml_reader, "first_too_deep", lambda text, limit: None)
    monkeypatch.setattr(yaml, "parse", fake_parse(events, RecursionError("maximum recursion depth exceeded")))
    with pytest.raises(ConfigError) as err:
        load_config("x: y\n")
    assert err.value.errors == [too_deep(7, 3)]


TEXT = st.text(alphabet="ab[]{}'\":#-?,|>&*! \\\n", max_size=6)
VALUES = st.recursive(
    st.none() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=25,
)


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    VALUES.filter(lambda v: depth(v) >= 2),
    st.sampled_from([True, False, None]),
    st.sampled_from([None, "'", '"', "|"]),
    st.sampled_from([2, 4]),
    st.sampled_from([20, 1000]),
)
def test_the_scan_never_counts_more_than_the_composer(monkeypatch_module, value, flow, style, indent, width):
    """Any document PyYAML writes: the scan accepts it at its real depth and stops where the composer stops one below."""
    text = yaml.dump(value, default_flow_style=flow, default_style=style, indent=indent, width=width, allow_unicode=True)
    levels = depth(value)
    assert first_too_deep(text, levels) is None
    found = first_too_deep(text, levels - 1)
    monkeypatch_module.setattr(yaml_reader, "MAX_NESTING", levels - 1)
    monkeypatch_module.setattr(yaml_reader, "first_too_deep", lambda text, limit: None)
    try:
        with pytest.raises(YamlError) as err:
            yaml_reader.read_yaml(text)
    finally:
        monkeypatch_module.undo()
    assert found is not None
    assert err.value.args[0] == f"invalid YAML at line {found[0]}, column {found[1]}: nesting deeper than {levels - 1} levels"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_check_config_names_the_file_the_line_and_the_limit(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text(nested_queues(200))
    assert main(["check-config", str(path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"error: {path}: {too_deep(256, 261)}",
        f"{path}: invalid, 1 error(s)",
    ]


@pytest.mark.parametrize("text,line,column", [SHAPES["flow sequences"], SHAPES["indented mappings"]], ids=["flow", "block"])
def test_check_config_reading_stdin_names_it(text, line, column):
    result = subprocess.run(
        [sys.executable, "-m", "common.cli", "check-config", "-"], input=text.encode(), capture_output=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stdout.decode().splitlines() == [f"error: <stdin>: {too_deep(line, column)}", "<stdin>: invalid, 1 error(s)"]
