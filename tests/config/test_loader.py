"""load_config: default, checksum, normalisation, and bad input within documented limits."""

import hashlib
import time

import pytest

from common.config import (
    DEFAULT_CONFIG_TEXT,
    MAX_CONFIG_BYTES,
    MAX_ERRORS,
    MAX_QUEUES,
    ConfigError,
    config_checksum,
    config_with_checksum,
    default_config,
    load_config,
)

SIMPLE = """
partitions:
  - name: default
    queues:
      - name: root
        submitacl: '*'
"""


@pytest.mark.parametrize("text", ["", "   ", "\n\n", "\t \n"], ids=["empty", "spaces", "newlines", "mixed"])
def test_empty_config_is_the_default(text):
    assert load_config(text) == default_config()


def test_default_config_matches_yunikorn():
    config = default_config()
    (p,) = config.partitions
    assert p.name == "default"
    assert p.root.name == "root" and p.root.submitacl == "*" and p.root.is_parent
    (rule,) = p.placementrules
    assert (rule.name, rule.value, rule.create) == ("tag", "namespace", True)
    # the checksum of the text served for it: without the leading newline of YuniKorn's text
    assert config.checksum == hashlib.sha256(DEFAULT_CONFIG_TEXT.lstrip("\n").encode()).hexdigest().upper()
    assert load_config("").checksum == config.checksum == config_checksum("")


def test_checksum_is_sha256_uppercase_hex_of_the_served_text():
    config = load_config(SIMPLE)
    served = SIMPLE.lstrip("\n")
    assert config.checksum == hashlib.sha256(served.encode()).hexdigest().upper()
    assert config_with_checksum(SIMPLE) == served + f"checksum: {config.checksum}\n"


@pytest.mark.parametrize("variant", [
    "checksum: " + "A" * 64 + "\n" + SIMPLE,  # a checksum line first
    SIMPLE + "checksum: 0123\n",  # a file saved by `korral config get`, its line last
    "\n\n" + SIMPLE + "\n\n",  # blank lines around it
    SIMPLE.lstrip("\n"),  # as served
], ids=["checksum line first", "checksum line last", "blank lines around", "as served"])
def test_the_checksum_is_that_of_what_the_scheduler_serves_for_the_text(variant):
    assert load_config(variant).checksum == config_checksum(variant) == config_checksum(SIMPLE)
    assert config_checksum(config_with_checksum(variant)) == config_checksum(SIMPLE)


def test_names_are_lower_cased_and_root_inserted():
    config = load_config("partitions:\n  - name: DEFAULT\n    queues:\n      - name: Dev\n      - name: PROD\n        queues:\n          - name: Web\n"
                         "    placementrules:\n      - name: Fixed\n        value: Dev\n")
    p = config.partition("default")
    assert p.root.name == "root" and p.root.is_parent
    assert [q.name for q in p.root.queues] == ["dev", "prod"]
    assert p.root.queues[1].queues[0].name == "web"
    assert p.placementrules[0].name == "fixed"


def test_partition_name_empty_means_default_and_other_names_keep_case():
    config = load_config("partitions:\n  - name: ''\n    queues: [{name: root}]\n  - name: GPU\n    queues: [{name: root}]\n")
    assert [p.name for p in config.partitions] == ["default", "GPU"]


def test_quantities_are_parsed():
    config = load_config("partitions:\n  - queues:\n      - name: a\n        resources:\n          max: {memory: 1Gi, vcore: 2, gpu: 1}\n")
    assert dict(config.partitions[0].root.queues[0].resources.max) == {"memory": 2**30, "vcore": 2000, "gpu": 1}


def test_all_errors_are_reported_together():
    with pytest.raises(ConfigError) as err:
        load_config("partitions:\n  - queues:\n      - name: a.b\n        submitacl: 'a b c'\n        bogus: 1\n")
    assert len(err.value.errors) == 3


def test_warnings_are_collected_not_fatal():
    config = load_config(
        "partitions:\n  - statedumpfilepath: /tmp/x\n    queues:\n      - name: root\n        submitacl: '1bad,ok'\n"
        "        properties: {application.sort.policy: FIFO, priority.offset: big}\n"
    )
    text = "\n".join(config.warnings)
    assert "statedumpfilepath is deprecated" in text
    assert "submitacl: invalid names ignored: 1bad" in text
    assert "unknown application sort policy 'FIFO', fifo is used" in text
    assert "priority.offset: 'big' is not a 32-bit integer" in text


def test_bytes_are_decoded_and_bad_utf8_is_an_error():
    assert load_config(SIMPLE.encode()).partitions[0].name == "default"
    with pytest.raises(ConfigError, match="config is not valid UTF-8"):
        load_config(b"\xff\xfe partitions")


@pytest.mark.parametrize(
    "text,message",
    [
        ("partitions: [", "invalid YAML"),
        ("partitions:\n  - name: a\n   queues: x", "invalid YAML"),
        ("a: 1\na: 2\n", "invalid YAML at line 2, column 1: key 'a' already set in this mapping"),
        ("partitions: []\n---\npartitions: []\n", "only one document is allowed"),
        ("partitions: *nope\n", "invalid YAML"),
        ("\x00\x01binary", "invalid YAML"),
        ("[" * 5000 + "]" * 5000, "nesting deeper than"),
    ],
    ids=["unclosed flow", "bad indentation", "duplicate key", "two documents", "unknown alias", "binary", "deep nesting"],
)
def test_invalid_yaml_is_a_clear_error(text, message):
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert message in str(err.value)


def test_config_over_the_size_limit_is_rejected_without_parsing():
    text = "partitions:\n" + "#" * (10 * 1024 * 1024)
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert time.monotonic() - start < 1.0
    assert err.value.errors == [f"config too large: {len(text)} bytes, the limit is {MAX_CONFIG_BYTES} bytes"]


def _many_queues(n: int) -> str:
    return "partitions:\n  - name: default\n    queues:\n      - name: root\n        submitacl: '*'\n        queues:\n" + "".join(
        f"          - name: q{i}\n            resources: {{max: {{memory: 1G, vcore: 2}}}}\n" for i in range(n)
    )


def test_ten_thousand_queues_load_quickly():
    start = time.monotonic()
    config = load_config(_many_queues(10_000))
    assert len(config.partitions[0].root.queues) == 10_000
    assert time.monotonic() - start < 10.0


def test_more_queues_than_the_limit_is_rejected():
    with pytest.raises(ConfigError) as err:
        load_config(_many_queues(MAX_QUEUES + 1))
    assert err.value.errors == [f"partition default: too many queues: more than {MAX_QUEUES} queues in one config"]


def test_alias_bomb_is_cut_short():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    start = time.monotonic()
    with pytest.raises(ConfigError, match="config too large"):
        load_config("\n".join(lines) + "\n")
    assert time.monotonic() - start < 5.0


def test_error_list_is_capped():
    text = "partitions:\n  - queues:\n" + "".join(f"      - {{name: q{i}, bad{i}: 1}}\n" for i in range(MAX_ERRORS + 50))
    with pytest.raises(ConfigError) as err:
        load_config(text)
    assert len(err.value.errors) == MAX_ERRORS + 1
    assert err.value.errors[-1] == "... and 50 more errors"


def test_unicode_rule_name_is_a_clear_error():
    with pytest.raises(ConfigError) as err:
        load_config(SIMPLE + "    placementrules:\n      - name: ユーザー\n")
    assert err.value.errors == [
        "partition default, placement rule 1 (ユーザー): invalid rule name ユーザー, a name must be a valid identifier"
    ]


def test_yaml_anchors_are_supported():
    text = ("partitions:\n  - queues:\n      - name: a\n        resources: &r {max: {memory: 10}}\n"
            "      - name: b\n        resources: *r\n")
    root = load_config(text).partitions[0].root
    assert root.queues[0].resources == root.queues[1].resources


def _deep_queues(levels: int) -> str:
    lines = ["partitions:", "  - queues:"]
    indent = "      "
    for i in range(levels):
        lines.append(f"{indent}- name: q{i}")
        lines.append(f"{indent}  queues:")
        indent += "    "
    lines.append(f"{indent}- name: leaf")
    return "\n".join(lines) + "\n"


def test_queue_depth_within_the_limit_loads():
    from common.config import MAX_QUEUE_DEPTH

    load_config(_deep_queues(MAX_QUEUE_DEPTH))


def test_queue_depth_over_the_limit_is_rejected():
    from common.config import MAX_QUEUE_DEPTH

    with pytest.raises(ConfigError) as err:
        load_config(_deep_queues(MAX_QUEUE_DEPTH + 1))
    assert any(f"queue hierarchy deeper than {MAX_QUEUE_DEPTH} levels" in e for e in err.value.errors)


def _nested_rules(levels: int) -> str:
    rule = "{name: fixed, value: base}"
    for _ in range(levels):
        rule = "{name: user, create: true, parent: " + rule + "}"
    return SIMPLE + "    placementrules:\n      - " + rule + "\n"


def test_nested_parent_rules_within_the_limit_load():
    from common.config import MAX_RULE_DEPTH

    rule = load_config(_nested_rules(MAX_RULE_DEPTH)).partitions[0].placementrules[0]
    depth = 0
    while rule.parent is not None:
        rule, depth = rule.parent, depth + 1
    assert depth == MAX_RULE_DEPTH and rule.name == "fixed"


def test_nested_parent_rules_over_the_limit_are_rejected():
    from common.config import MAX_RULE_DEPTH

    with pytest.raises(ConfigError, match=f"parent rules nested deeper than {MAX_RULE_DEPTH} levels"):
        load_config(_nested_rules(MAX_RULE_DEPTH + 1))


@pytest.mark.parametrize(
    "rule,warning",
    [
        ("{name: fixed, value: leafq.sub, create: true}",
         "references queue root.leafq.sub below root.leafq, which is a leaf: the rule can never place an application"),
        ("{name: fixed, value: root.parentq}", "references queue root.parentq, which is a parent queue: the rule can never place an application"),
        ("{name: fixed, value: ghost}", "references queue root.ghost, which is not configured and create is false"),
        ("{name: fixed, value: x, parent: {name: fixed, value: leafq}}",
         "references queue root.leafq.x below root.leafq, which is a leaf: the rule can never place an application"),
    ],
    ids=["leaf as parent", "parent as leaf", "missing without create", "fixed parent chain"],
)
def test_static_fixed_paths_that_never_match_are_warned(rule, warning):
    text = ("partitions:\n  - queues:\n      - name: leafq\n      - name: parentq\n        parent: true\n"
            f"    placementrules:\n      - {rule}\n")
    assert f"partition default, placement rule 1 (fixed): {warning}" in load_config(text).warnings


def test_static_fixed_path_to_a_configured_leaf_gives_no_warning():
    text = "partitions:\n  - queues:\n      - name: leafq\n    placementrules:\n      - {name: fixed, value: leafq}\n"
    assert load_config(text).warnings == ()
