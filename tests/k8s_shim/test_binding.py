"""Binding (``k8s_shim.writes.binding``) against a scripted API server answering as a real
kube-apiserver did (recordings 21 and 22): a 201 Status is success; 409 already assigned is
success on the same node and "elsewhere" on another; 404 and a uid mismatch mean the pod is
gone; other refusals give up at once; transient errors are retried with backoff until the
deadline."""

from __future__ import annotations

import asyncio

import pytest

from si_client import Backoff
from k8s_shim.writes.binding import Binder, BindJob, Outcome
from k8s_shim.kube.kubeclient import KubeClient
from k8s_shim.kube.kubeconfig import KubeConfig
from tests.conftest import wait_until_async
from tests.k8s_shim.scripted import WIRE_DIR, Scripted, recording, reply

PATH = "/api/v1/namespaces/bind/pods/bind-1/binding"
CREATED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def status(code: int, reason: str, message: str, kind: str = "") -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if kind:
        body["details"] = {"name": "bind-1", "kind": kind}
    return body


ASSIGNED = ('Operation cannot be fulfilled on pods/binding "bind-1": pod bind-1 is already assigned to node '
            '"{}"')
UID = ('Operation cannot be fulfilled on pods "bind-1": StorageError: invalid object, Code: 4, Key: '
       '/registry/pods/bind/bind-1, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in '
       'precondition: 00000000, UID in object meta: e82d3e3b')


def bind_with(*answers, deadline: float = 10.0, node: str = "node-1"):
    async def main():
        async with Scripted() as server:
            server.on("POST", PATH, *answers)
            client = KubeClient(KubeConfig(server=server.url))
            await client.start()
            results = []
            binder = Binder(client, results.append, deadline=deadline, backoff=Backoff(base=0.01, cap=0.05))
            binder.bind(BindJob("uid-1", "bind", "bind-1", node, attempt=1))
            try:
                await wait_until_async(lambda: results, 15, "the bind outcome")
            finally:
                await binder.close()
                await client.close()
            return results[0], server.requests
    return asyncio.run(main())


def test_a_201_status_is_bound_and_the_binding_names_the_pods_uid():
    result, requests = bind_with(reply(201, CREATED))
    assert result.outcome is Outcome.BOUND and result.tries == 1
    [(_, _, _, body)] = requests
    assert body["metadata"] == {"name": "bind-1", "namespace": "bind", "uid": "uid-1"}
    assert body["target"]["name"] == "node-1" and body["kind"] == "Binding"


@pytest.mark.parametrize("answer, outcome, node", [
    (reply(409, status(409, "Conflict", ASSIGNED.format("node-1"), "pods/binding")), Outcome.BOUND, ""),
    (reply(409, status(409, "Conflict", ASSIGNED.format("node-2"), "pods/binding")), Outcome.ELSEWHERE, "node-2"),
    (reply(409, status(409, "Conflict", UID, "pods")), Outcome.GONE, ""),
    (reply(404, status(404, "NotFound", 'pods "bind-1" not found', "pods")), Outcome.GONE, ""),
    (reply(500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": "target.name: Required value", "code": 500}), Outcome.REFUSED, ""),
    (reply(403, status(403, "Forbidden", "pods is forbidden: admission webhook said no")), Outcome.REFUSED, ""),
], ids=["already on the same node: bound", "already on another node", "uid mismatch: a recreated pod",
        "missing pod", "v1.24's 500 for an invalid target", "admission refused"])
def test_what_a_refusal_means(answer, outcome, node):
    result, requests = bind_with(answer)
    assert result.outcome is outcome and result.node == node and len(requests) == 1


def test_transient_errors_are_retried_until_bound():
    busy = reply(503, status(503, "ServiceUnavailable", "etcd leader changed"))
    throttled = reply(429, status(429, "TooManyRequests", "slow down"))
    result, requests = bind_with(busy, throttled, reply(201, CREATED))
    # the 429 is sent again by the client itself (KubeClient): the binder tried twice
    assert result.outcome is Outcome.BOUND and result.tries == 2 and len(requests) == 3


def test_transient_errors_past_the_deadline_give_up_saying_why():
    busy = [reply(503, status(503, "ServiceUnavailable", "etcd leader changed")) for _ in range(50)]
    result, requests = bind_with(*busy, deadline=0.3)
    assert result.outcome is Outcome.REFUSED and "etcd leader changed" in result.error and "still failing" in result.error
    assert 2 <= len(requests) < 50


@pytest.mark.skipif(WIRE_DIR is None, reason="the recordings of a real kube-apiserver (shared/k8s-wire) are not here")
def test_the_real_servers_answers_mean_what_the_binder_says():
    exchanges = recording("22-binding-errors.json")["exchanges"]
    rebind = next(e for e in exchanges if e["response"]["status"] == 409
                  and "already assigned" in e["response"]["body"]["message"])
    assert bind_with(reply(409, rebind["response"]["body"]))[0].outcome is Outcome.BOUND  # it is on node-1
    result, _ = bind_with(reply(409, rebind["response"]["body"]), node="node-2")
    assert result.outcome is Outcome.ELSEWHERE and result.node == "node-1"
    ok = next(e for e in recording("21-binding-success.json")["exchanges"]
              if e["request"]["path"].endswith("/binding") and e["response"]["status"] == 201)
    assert bind_with(reply(201, ok["response"]["body"]))[0].outcome is Outcome.BOUND
