"""The three patch types on the fields the shim and kubectl patch (metadata, status.conditions,
containers, finalizers) and the directives kubectl sends."""

from __future__ import annotations

import pytest

from k8s_shim.fake.patch import PatchError, json_patch, merge_patch, strategic_merge_patch

POD = {"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
       "spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}],
                "tolerations": [{"key": "t"}]},
       "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}


def test_a_merge_patch_deletes_with_null_and_replaces_lists():
    out = merge_patch(POD, {"metadata": {"labels": {"a": None, "c": "3"}},
                            "status": {"conditions": [{"type": "Z", "status": "False"}]}})
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert out["status"]["conditions"] == [{"type": "Z", "status": "False"}]
    assert POD["metadata"]["labels"] == {"a": "1", "b": "2"}  # the original is untouched


def test_a_strategic_patch_merges_conditions_by_type_in_place():
    out = strategic_merge_patch(POD, {"status": {"conditions": [{"type": "B", "status": "False"}]}})
    assert out["status"]["conditions"] == [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]


def test_a_strategic_patch_puts_a_new_condition_before_the_ones_it_did_not_name():
    # file 23: the new condition type came first in the stored list
    out = strategic_merge_patch(POD, {"status": {"conditions": [{"type": "N", "status": "False"}]}})
    assert [c["type"] for c in out["status"]["conditions"]] == ["N", "A", "B"]


def test_a_strategic_patch_merges_containers_by_name_and_replaces_lists_without_a_merge_key():
    out = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "c2", "image": "new"}],
                                               "tolerations": [{"key": "u"}]}})
    assert out["spec"]["containers"] == [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "new"}]
    assert out["spec"]["tolerations"] == [{"key": "u"}]


@pytest.mark.parametrize("patch, containers", [
    ({"spec": {"containers": [{"name": "c1", "$patch": "delete"}]}}, ["c2"]),
    ({"spec": {"containers": [{"$patch": "replace"}, {"name": "c9", "image": "i"}]}}, ["c9"]),
    ({"spec": {"$setElementOrder/containers": [{"name": "c2"}, {"name": "c1"}],
               "containers": [{"name": "c1", "image": "x"}]}}, ["c2", "c1"]),
], ids=["delete-item", "replace-list", "set-element-order"])
def test_strategic_patch_directives(patch, containers):
    assert [c["name"] for c in strategic_merge_patch(POD, patch)["spec"]["containers"]] == containers


def test_finalizers_merge_as_a_set_and_leave_with_delete_from_primitive_list():
    added = strategic_merge_patch(POD, {"metadata": {"finalizers": ["y", "x"]}})
    assert added["metadata"]["finalizers"] == ["x", "y"]
    removed = strategic_merge_patch(added, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert removed["metadata"]["finalizers"] == ["y"]


def test_retain_keys_drops_the_fields_not_named():
    out = strategic_merge_patch({"spec": {"a": 1, "b": 2}}, {"spec": {"$retainKeys": ["a"], "a": 3}})
    assert out == {"spec": {"a": 3}}


def test_json_patch_operations_with_escaped_paths():
    out = json_patch(POD, [{"op": "add", "path": "/metadata/labels/yunikorn.apache.org~1user", "value": "alice"},
                           {"op": "replace", "path": "/spec/containers/0/image", "value": "i9"},
                           {"op": "remove", "path": "/metadata/labels/a"},
                           {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "v"}},
                           {"op": "test", "path": "/metadata/labels/b", "value": "2"}])
    assert out["metadata"]["labels"] == {"b": "2", "yunikorn.apache.org/user": "alice"}
    assert out["spec"]["containers"][0]["image"] == "i9"
    assert out["spec"]["tolerations"] == [{"key": "t"}, {"key": "v"}]


def test_a_failed_json_patch_test_says_so():
    with pytest.raises(PatchError) as err:
        json_patch(POD, [{"op": "test", "path": "/metadata/labels/a", "value": "wrong"}])
    assert err.value.test_failed


def test_a_json_patch_on_a_missing_path_fails():
    with pytest.raises(PatchError):
        json_patch(POD, [{"op": "replace", "path": "/spec/nothing/here", "value": 1}])
