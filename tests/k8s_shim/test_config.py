"""The shim's configuration from YuniKorn's configmaps (``k8s_shim.config``): merging the two
maps, gzip binary data, the policy group's queues file, extra config, YuniKorn's settings parsed
as Go parses them, and the settings a reload may not change."""

from __future__ import annotations

import base64
import gzip

import pytest

from k8s_shim.config import (NON_RELOADABLE, ConfigMapError, ShimConf, flatten, go_duration, keep_non_reloadable,
                                load, parse)


def cm(name: str, data: dict | None = None, binary: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "yunikorn"}, "data": data or {},
            "binaryData": {k: base64.b64encode(v).decode() for k, v in (binary or {}).items()}}


def test_configs_override_defaults_and_the_policy_groups_yaml_is_the_queues_config():
    defaults = cm("yunikorn-defaults", {"queues.yaml": "old", "log.level": "INFO", "service.clusterId": "c1"})
    configs = cm("yunikorn-configs", {"queues.yaml": "partitions: []", "korral.compatibility": "yunikorn-1.6"})
    loaded, warnings = load([defaults, configs])
    assert loaded.queues == "partitions: []" and loaded.conf.cluster_id == "c1" and not warnings
    assert loaded.extra == {"log.level": "INFO", "service.clusterId": "c1", "korral.compatibility": "yunikorn-1.6"}


def test_another_policy_group_picks_its_own_file():
    loaded, _ = load([cm("yunikorn-configs", {"service.policyGroup": "batch", "queues.yaml": "a", "batch.yaml": "b"})])
    assert loaded.queues == "b" and loaded.conf.policy_group == "batch"
    assert "queues.yaml" not in loaded.extra and "batch.yaml" not in loaded.extra


def test_missing_configmaps_give_yunikorns_defaults_and_the_default_queues():
    loaded, _ = load([None, None])
    assert loaded.conf == ShimConf() and loaded.queues == "" and loaded.extra == {}


def test_gzipped_binary_data_is_unpacked_under_its_key_without_gz():
    flat = flatten([cm("yunikorn-configs", {"a": "1"}, {"queues.yaml.gz": gzip.compress(b"partitions: x"),
                                                        "plain.txt": b"text"})])
    assert flat == {"a": "1", "queues.yaml": "partitions: x", "plain.txt": "text"}


def test_binary_data_that_is_not_gzip_names_the_key():
    with pytest.raises(ConfigMapError, match=r"yunikorn-configs: binaryData\[queues.yaml.gz\] is not gzip data"):
        flatten([cm("yunikorn-configs", binary={"queues.yaml.gz": b"not gzip"})])
    bad = {"metadata": {"name": "yunikorn-configs"}, "binaryData": {"x": "@@@"}}
    with pytest.raises(ConfigMapError, match=r"binaryData\[x\] is not base64"):
        flatten([bad])


@pytest.mark.parametrize("text, seconds", [("1s", 1), ("300ms", 0.3), ("1h30m", 5400), ("0", 0), ("-2s", -2),
                                           ("1.5m", 90), ("10us", 1e-5)])
def test_go_durations(text, seconds):
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("key, value, words", [
    ("service.schedulingInterval", "fast", "not a duration"),
    ("service.disableGangScheduling", "yes", "not a boolean"),
    ("kubernetes.qps", "1.5", "not an integer"),
    ("service.eventChannelCapacity", "9999999999", "out of range"),
    ("service.placeholderRunAsUser", "root", "not an integer"),
])
def test_a_setting_that_does_not_parse_fails_the_load_naming_the_key(key, value, words):
    with pytest.raises(ConfigMapError) as err:
        parse({key: value})
    assert err.value.problems[0].startswith(f"{key}: ") and words in err.value.problems[0]


def test_settings_parse_as_yunikorn_parses_them():
    conf = parse({"service.disableGangScheduling": "T", "service.dispatchTimeout": "2m", "kubernetes.burst": "20",
                  "admissionController.filtering.generateUniqueAppId": "true", "service.placeholderFsGroup": "-1"})
    assert conf.disable_gang_scheduling and conf.dispatch_timeout == 120 and conf.kube_burst == 20
    assert conf.generate_unique_app_ids and conf.placeholder_fs_group == -1


def test_a_reload_keeps_the_non_reloadable_settings_with_a_warning():
    running = parse({"service.clusterId": "c1"})
    new, warnings = keep_non_reloadable(running, parse({"service.clusterId": "c2", "service.enableConfigHotRefresh": "false"}))
    assert new.cluster_id == "c1" and not new.enable_config_hot_refresh
    assert warnings == ["service.clusterId changed from 'c1' to 'c2': not reloadable, kept the running value "
                        "(restart the shim to use it)"]
    assert "service.enableConfigHotRefresh" not in NON_RELOADABLE and "service.policyGroup" in NON_RELOADABLE


def test_a_reload_with_the_same_queues_and_extra_is_the_same_for_korral():
    a, _ = load([cm("yunikorn-configs", {"queues.yaml": "x", "log.level": "1"})])
    b, _ = load([cm("yunikorn-configs", {"queues.yaml": "x", "log.level": "1"})])
    c, _ = load([cm("yunikorn-configs", {"queues.yaml": "x", "log.level": "2"})])
    assert a.same_for_korral(b) and not a.same_for_korral(c) and not a.same_for_korral(None)
