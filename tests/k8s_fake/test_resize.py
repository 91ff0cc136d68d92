"""In-place pod resize in the double (Kubernetes 1.33+'s ``pods/NAME/resize``, KEP-1287; no
recording of a real server has it, so this follows the Kubernetes API documentation): a write
through the subresource changes only the containers' cpu and memory and grows the generation;
the fake kubelet actuates it when the node has room, marks it Infeasible above the node's
allocatable and Deferred above the room left, trying a deferred one again when a pod ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.cluster import NodeTemplate
from tests.conftest import wait_until_async
from tests.k8s_fake.test_cluster import _pod, pod, running

pytestmark = pytest.mark.timeout(60)


def sized(name: str, cpu: str, **meta: Any) -> dict[str, Any]:
    out = pod(name, **meta)
    out["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    return out


def resize_body(cpu: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}


def pending_reason(p: dict[str, Any]) -> str | None:
    return next((c.get("reason") for c in p["status"].get("conditions") or [] if c["type"] == "PodResizePending"),
                None)


def status_cpu(p: dict[str, Any]) -> tuple[str, str] | None:
    """(allocated, current) cpu of its container's status; None before the kubelet wrote them."""
    cs = p["status"]["containerStatuses"][0]
    if "allocatedResources" not in cs:
        return None
    return cs["allocatedResources"]["cpu"], cs["resources"]["requests"]["cpu"]


async def started(c, name: str, cpu: str) -> None:
    api = c.api
    api.create(api.kind("v1", "pods"), "default", sized(name, cpu))
    api.bind("default", name, {"target": {"name": "fake-node-0"}})
    await wait_until_async(lambda: _pod(c, name)["status"]["phase"] == "Running", 10, f"{name} to run")


def test_a_resize_through_the_subresource_changes_only_resources_and_grows_the_generation():
    async def scenario():
        async with running(kubelet=False) as (c, http):
            pods = c.api.kind("v1", "pods")
            c.api.create(pods, "default", sized("p", "100m"))
            assert "generation" not in _pod(c, "p")["metadata"]  # as the recorded v1.24 server
            body = resize_body("500m")
            body["metadata"] = {"labels": {"ignored": "yes"}}
            body["spec"]["nodeName"] = "ignored"
            async with http.patch("/api/v1/namespaces/default/pods/p/resize", json=body,
                                  headers={"Content-Type": "application/strategic-merge-patch+json"}) as resp:
                assert resp.status == 200, await resp.text()
                answer = await resp.json()
            assert answer["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
            assert answer["metadata"]["generation"] == 2 and "nodeName" not in answer["spec"]
            assert "ignored" not in (answer["metadata"].get("labels") or {})
            # the same size again writes nothing; the main resource still refuses a resources change
            c.api.patch(pods, "default", "p", "strategic", resize_body("500m"), "resize")
            assert _pod(c, "p")["metadata"]["generation"] == 2
            with pytest.raises(ApiError) as refused:
                c.api.patch(pods, "default", "p", "strategic", resize_body("1"))
            assert refused.value.code == 422
            # only cpu and memory; the QoS class may not change
            with pytest.raises(ApiError) as refused:
                c.api.patch(pods, "default", "p", "strategic", {"spec": {"containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "64Mi",
                                                             "ephemeral-storage": "1Gi"}}}]}}, "resize")
            assert refused.value.code == 422 and "only cpu and memory" in refused.value.message
            with pytest.raises(ApiError) as refused:
                c.api.patch(pods, "default", "p", "strategic", {"spec": {"containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                                                "limits": {"cpu": "500m", "memory": "64Mi"}}}]}}, "resize")
            assert refused.value.code == 422 and "QOS Class may not change" in refused.value.message
    asyncio.run(scenario())


def test_the_kubelet_actuates_a_resize_with_room_and_marks_one_without():
    async def scenario():
        async with running(nodes=NodeTemplate(count=1, cpu="4")) as (c, _):
            pods = c.api.kind("v1", "pods")
            await started(c, "a", "1")
            await started(c, "b", "2")
            c.api.patch(pods, "default", "a", "strategic", resize_body("1500m"), "resize")
            await wait_until_async(lambda: status_cpu(_pod(c, "a")) == ("1500m", "1500m"), 10, "a resized")
            assert pending_reason(_pod(c, "a")) is None
            c.api.patch(pods, "default", "a", "strategic", resize_body("5"), "resize")  # more than the node
            await wait_until_async(lambda: pending_reason(_pod(c, "a")) == "Infeasible", 10, "a infeasible")
            assert status_cpu(_pod(c, "a")) == ("1500m", "1500m")  # what it runs with
            c.api.patch(pods, "default", "a", "strategic", resize_body("3"), "resize")  # more than the room left
            await wait_until_async(lambda: pending_reason(_pod(c, "a")) == "Deferred", 10, "a deferred")
            assert status_cpu(_pod(c, "a")) == ("1500m", "1500m")
            c.api.delete(pods, "default", "b")  # room: the deferred resize goes through
            await wait_until_async(lambda: status_cpu(_pod(c, "a")) == ("3", "3"), 10, "a resized after b went")
            assert pending_reason(_pod(c, "a")) is None
    asyncio.run(scenario())
