"""The shim's informer (``k8s_shim.watch.informer``) against a scripted API server: list in pages,
watch from the list's resourceVersion with bookmarks, relist on 410 (in-stream ERROR and HTTP),
restart a list whose continue token expired, watch again after a dropped connection; and the
lines of a real kube-apiserver's recordings where they are at hand."""

from __future__ import annotations

import asyncio

import pytest

from k8s_shim.watch.informer import Informer
from k8s_shim.kube.kubeclient import KubeClient
from k8s_shim.kube.kubeconfig import KubeConfig
from tests.conftest import wait_until_async
from tests.k8s_shim.scripted import WIRE_DIR, Scripted, lines, recording, reply

PODS = "/api/v1/pods"


def pod(name: str, rv: int, node: str = "") -> dict:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": str(rv)},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}


def page(*items: dict, rv: int, token: str = "") -> dict:
    meta = {"resourceVersion": str(rv)}
    if token:
        meta["continue"] = token
    return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": list(items)}


def event(kind: str, obj: dict) -> dict:
    return {"type": kind, "object": obj}


def bookmark(rv: int) -> dict:  # as the real server sends it (recording 17): nulls included
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                           "metadata": {"resourceVersion": str(rv), "creationTimestamp": None},
                                           "spec": {"containers": None}, "status": {}}}


EXPIRED = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "too old resource version: 1 (298)", "reason": "Expired",
                                       "code": 410}}


class Recorder:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []

    def decode(self, raw: dict, old):
        return (raw["metadata"]["name"], raw["metadata"].get("resourceVersion"), raw["spec"].get("nodeName", ""))

    def on_change(self, old, new) -> None:
        if old is None:
            self.changes.append(("add", new[0]))
        elif new is None:
            self.changes.append(("delete", old[0]))
        else:
            self.changes.append(("update", new[0]))


def run(scenario, recorder: type[Recorder] = Recorder) -> None:
    async def main():
        async with Scripted() as server:
            client = KubeClient(KubeConfig(server=server.url))
            await client.start()
            rec = recorder()
            informer = Informer(client, PODS, rec.decode, rec.on_change, name="pods", watch_seconds=5)
            task = asyncio.create_task(informer.run())
            try:
                await asyncio.wait_for(scenario(server, informer, rec), 20)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()
    asyncio.run(main())


def test_lists_in_pages_then_watches_from_the_lists_version_and_follows_bookmarks():
    async def scenario(server: Scripted, informer: Informer, rec: Recorder):
        hold = asyncio.Event()
        server.on("GET", PODS, reply(200, page(pod("a", 10), rv=20, token="t1")),
                  reply(200, page(pod("b", 11), rv=20)))
        server.on("GET", PODS, lines(event("ADDED", pod("c", 21)), event("MODIFIED", pod("a", 22, node="n1")),
                                     event("DELETED", pod("b", 23)), bookmark(30)),
                  lines(hold=hold), watch=True)
        await wait_until_async(lambda: len(server.asked("GET", PODS, watch=True)) == 2, 10, "the second watch")
        hold.set()
        lists = server.asked("GET", PODS, watch=False)
        assert [q.get("continue") for q in lists] == [None, "t1"] and all(q["limit"] == "500" for q in lists)
        assert "resourceVersion" not in lists[0]  # a consistent read, not the watch cache's
        first, second = server.asked("GET", PODS, watch=True)
        assert first["resourceVersion"] == "20" and first["allowWatchBookmarks"] == "true"
        assert 5 <= int(first["timeoutSeconds"]) <= 10
        assert second["resourceVersion"] == "30"  # the bookmark's
        assert rec.changes == [("add", "a"), ("add", "b"), ("add", "c"), ("update", "a"), ("delete", "b")]
        assert sorted(informer.store) == ["uid-a", "uid-c"] and informer.store["uid-a"][2] == "n1"
        assert informer.synced.is_set() and informer.relists == 0
    run(scenario)


def test_an_expired_watch_relists_and_reports_what_changed_in_the_gap():
    async def scenario(server: Scripted, informer: Informer, rec: Recorder):
        hold = asyncio.Event()
        server.on("GET", PODS, reply(200, page(pod("a", 10), pod("b", 11), rv=12)),
                  reply(200, page(pod("a", 40, node="n2"), pod("c", 41), rv=50)))
        server.on("GET", PODS, lines(EXPIRED), lines(hold=hold), watch=True)
        await wait_until_async(lambda: len(server.asked("GET", PODS, watch=True)) == 2, 10, "the watch after the relist")
        hold.set()
        assert server.asked("GET", PODS, watch=True)[1]["resourceVersion"] == "50"
        assert rec.changes == [("add", "a"), ("add", "b"), ("update", "a"), ("add", "c"), ("delete", "b")]
        assert informer.relists == 1
    run(scenario)


def test_http_410_on_the_watch_relists():
    async def scenario(server: Scripted, informer: Informer, rec: Recorder):
        hold = asyncio.Event()
        gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "too old resource version", "reason": "Expired", "code": 410}
        server.on("GET", PODS, reply(200, page(pod("a", 10), rv=12)), reply(200, page(rv=60)))
        server.on("GET", PODS, reply(410, gone), lines(hold=hold), watch=True)
        await wait_until_async(lambda: len(server.asked("GET", PODS, watch=True)) == 2, 10, "the watch after the relist")
        hold.set()
        assert rec.changes == [("add", "a"), ("delete", "a")] and informer.relists == 1
    run(scenario)


def test_a_list_whose_continue_token_expired_starts_over():
    async def scenario(server: Scripted, informer: Informer, rec: Recorder):
        hold = asyncio.Event()
        expired = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "The provided continue parameter is too old", "reason": "Expired", "code": 410}
        server.on("GET", PODS, reply(200, page(pod("a", 10), rv=20, token="old")), reply(410, expired),
                  reply(200, page(pod("a", 10), pod("b", 25), rv=30)))
        server.on("GET", PODS, lines(hold=hold), watch=True)
        await wait_until_async(lambda: server.asked("GET", PODS, watch=True), 10, "the watch")
        hold.set()
        assert [q.get("continue") for q in server.asked("GET", PODS, watch=False)] == [None, "old", None]
        assert server.asked("GET", PODS, watch=True)[0]["resourceVersion"] == "30"
        assert rec.changes == [("add", "a"), ("add", "b")]  # nothing of the abandoned page was applied twice
    run(scenario)


def test_a_dropped_watch_resumes_from_the_last_version_seen_without_a_relist():
    async def scenario(server: Scripted, informer: Informer, rec: Recorder):
        hold = asyncio.Event()
        server.on("GET", PODS, reply(200, page(rv=5)))
        server.on("GET", PODS, lines(event("ADDED", pod("a", 7)), drop=True), lines(hold=hold), watch=True)
        await wait_until_async(lambda: len(server.asked("GET", PODS, watch=True)) == 2, 10, "the second watch")
        hold.set()
        assert server.asked("GET", PODS, watch=True)[1]["resourceVersion"] == "7"
        assert informer.relists == 0 and rec.changes == [("add", "a")]
    run(scenario)


def test_objects_the_decoder_drops_are_gone_for_the_handler():
    class Dropping(Recorder):
        def decode(self, raw, old):
            return None if raw["spec"].get("nodeName") == "gone" else super().decode(raw, old)

    async def scenario(server: Scripted, informer: Informer, rec: Recorder):
        hold = asyncio.Event()
        server.on("GET", PODS, reply(200, page(pod("a", 1), rv=2)))
        server.on("GET", PODS, lines(event("MODIFIED", pod("a", 3, node="gone")), hold=hold), watch=True)
        await wait_until_async(lambda: len(rec.changes) == 2, 10, "the drop")
        hold.set()
        assert rec.changes == [("add", "a"), ("delete", "a")] and not informer.store
    run(scenario, Dropping)


@pytest.mark.skipif(WIRE_DIR is None, reason="the recordings of a real kube-apiserver (shared/k8s-wire) are not here")
def test_the_lines_a_real_server_sent_are_applied_in_order():
    recorded = recording("15-watch-pods-add-modify-delete.json")
    listed = next(e for e in recorded["exchanges"] if e["request"]["method"] == "GET"
                  and "watch" not in e["request"]["query"])
    watched = next(e for e in recorded["exchanges"] if e["request"]["query"].get("watch"))
    path = watched["request"]["path"]
    expected = [(line["type"], line["object"]["metadata"]["name"]) for line in watched["response"]["lines"]]

    async def main():
        async with Scripted() as server:
            server.on("GET", path, reply(200, listed["response"]["body"]))
            hold = asyncio.Event()
            server.on("GET", path, lines(*watched["response"]["lines"], hold=hold), watch=True)
            client = KubeClient(KubeConfig(server=server.url))
            await client.start()
            rec = Recorder()
            informer = Informer(client, path, rec.decode, rec.on_change, watch_seconds=5)
            task = asyncio.create_task(informer.run())
            try:
                await wait_until_async(lambda: informer.resource_version == watched["response"]["lines"][-1]
                                       ["object"]["metadata"]["resourceVersion"], 10, "the last line applied")
                assert server.asked("GET", path, watch=True)[0]["resourceVersion"] == \
                    listed["response"]["body"]["metadata"]["resourceVersion"]
            finally:
                hold.set()
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()
            want = [{"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}[k] for k, _ in expected]
            assert [c for c, _ in rec.changes] == want
    asyncio.run(main())
