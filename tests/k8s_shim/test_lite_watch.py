"""Known pods' watch lines read lightly (``k8s_shim.translate.pods.lite_watch`` in the informer): the
store and the changes the shim sees are exactly those of decoding every line whole, the pod's
spec is read once, and a line the light decoder cannot read is decoded whole."""

from __future__ import annotations

import copy

import orjson
import pytest

from k8s_shim.watch.informer import Informer
from k8s_shim.main import _keep_ours
from k8s_shim.translate.pods import PodRules, decoder, lite_watch
from tests.k8s_shim.scripted import WIRE_DIR, recording

RULES = PodRules("yunikorn")
BASE = {"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "p1", "namespace": "ns", "uid": "uid-1", "resourceVersion": "1",
                     "labels": {"applicationId": "app-1"},
                     "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
        "spec": {"schedulerName": "yunikorn", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"}}


def line(kind: str, change=None, rv: int = 1) -> bytes:
    obj = copy.deepcopy(BASE)
    obj["metadata"]["resourceVersion"] = str(rv)
    if change:
        change(obj)
    return orjson.dumps({"type": kind, "object": obj})


def bound(obj):
    obj["spec"]["nodeName"] = "n1"


def waiting(obj):
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/3 nodes are available."},
                                   {"type": "Ready", "status": "False"}]


def gated(obj):
    obj["spec"]["schedulingGates"] = [{"name": "g1"}, {"name": "g2"}]


def deleting(obj):
    bound(obj)
    obj["metadata"]["deletionTimestamp"] = "2026-11-27T12:00:00Z"


def succeeded(obj):
    bound(obj)
    obj["status"]["phase"] = "Succeeded"


def bad_node(obj):
    obj["spec"]["nodeName"] = 5  # not a string: the light decoder refuses the line


LINES = [line("ADDED", gated), line("MODIFIED", rv=2), line("MODIFIED", waiting, 3), line("MODIFIED", bound, 4),
         line("MODIFIED", deleting, 5), line("MODIFIED", bad_node, 6), line("MODIFIED", bound, 7),
         line("MODIFIED", succeeded, 8), line("ADDED", rv=9), line("DELETED", rv=10)]


def apply(lines: list[bytes], lite: bool) -> tuple[list, Informer, list[int]]:
    reads: list[int] = []
    full = decoder(RULES, _keep_ours)

    def counting(raw, old):
        reads.append(1)
        return full(raw, old)
    changes: list = []
    informer = Informer(None, "/api/v1/pods", counting, lambda old, new: changes.append((old, new)),
                        lite=lite_watch(RULES, _keep_ours) if lite else None)
    for raw in lines:
        if not (lite and informer._apply_lite(raw)):
            informer._apply(orjson.loads(raw))
    return changes, informer, reads


def states(changes: list) -> list:
    def view(s):
        return None if s is None else (s.uid, s.node, s.phase, s.deleting, s.gates, s.conditions, s.spec.resource)
    return [(view(old), view(new)) for old, new in changes]


def test_light_reading_gives_what_the_whole_decode_gives_and_reads_the_spec_once():
    whole, whole_informer, whole_reads = apply(LINES, lite=False)
    light, light_informer, light_reads = apply(LINES, lite=True)
    assert states(light) == states(whole)
    assert light_informer.resource_version == whole_informer.resource_version == "10"
    assert not light_informer.store and not whole_informer.store
    # whole: every line but the DELETED one; light: the two ADDED lines and the line it could not read
    assert len(whole_reads) == 9 and len(light_reads) == 3
    first, second = light[1][0], light[1][1]
    assert first.spec is second.spec  # read once per pod
    assert light[2][1].conditions == {"PodScheduled": ("False", "Unschedulable", "0/3 nodes are available.")}
    assert light[0][1].gates == ("g1", "g2") and light[1][1].gates == ()


@pytest.mark.skipif(WIRE_DIR is None, reason="the recordings of a real kube-apiserver (shared/k8s-wire) are not here")
def test_a_real_servers_watch_lines_read_lightly_as_whole():
    recorded = recording("15-watch-pods-add-modify-delete.json")
    watched = next(e for e in recorded["exchanges"] if e["request"]["query"].get("watch"))
    raw_lines = []
    for event in watched["response"]["lines"]:
        event = copy.deepcopy(event)
        event["object"].setdefault("spec", {})["schedulerName"] = "yunikorn"  # ours, so that the shim keeps it
        raw_lines.append(orjson.dumps(event))
    whole, _, _ = apply(raw_lines, lite=False)
    light, _, reads = apply(raw_lines, lite=True)
    assert states(light) == states(whole) and len(whole) == len(watched["response"]["lines"])


def running(obj, cpu="1", generation=1, status_cpu="1", infeasible=False):
    bound(obj)
    obj["metadata"]["generation"] = generation
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    obj["status"]["phase"] = "Running"
    obj["status"]["containerStatuses"] = [{"name": "c", "ready": True, "state": {"running": {}},
                                           "allocatedResources": {"cpu": status_cpu},
                                           "resources": {"requests": {"cpu": status_cpu}}}]
    if infeasible:
        obj["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]


RESIZE_LINES = [line("ADDED", lambda o: o["metadata"].update(generation=1), rv=1),
                line("MODIFIED", running, 2),  # running: its status repeats the spec (read lightly)
                line("MODIFIED", lambda o: running(o, "2", 2), 3),  # resized: generation 2 (whole)
                line("MODIFIED", lambda o: running(o, "2", 2), 4),  # nothing new (light)
                line("MODIFIED", lambda o: running(o, "2", 2, infeasible=True), 5),  # infeasible (whole)
                line("MODIFIED", lambda o: running(o, "3", 3, infeasible=True), 6),  # resized again (whole)
                line("MODIFIED", lambda o: running(o, "3", 3, "3"), 7),  # actuated (whole)
                line("MODIFIED", lambda o: running(o, "3", 3, "3"), 8)]  # nothing new (light)


def test_light_reading_follows_a_resize_as_the_whole_decode_does():
    whole, _, _ = apply(RESIZE_LINES, lite=False)
    light, informer, reads = apply(RESIZE_LINES, lite=True)
    assert states(light) == states(whole)
    sizes = [new.spec.resource["vcore"] for _, new in light]
    assert sizes == [1000, 1000, 2000, 2000, 1000, 1000, 3000, 3000]
    # whole: the ADDED line and the four lines that may change the size; the rest read lightly
    assert len(reads) == 5
    assert informer.store["uid-1"].spec is light[-2][1].spec
