"""Client-side flow control (``k8s_shim.kube.flow``, ``KubeClient``): the token buckets of
``kubernetes.qps`` / ``kubernetes.burst``, one for the scheduling writes, one for events; 429 Too Many
Requests (and 5xx with Retry-After) sent again after the delay the server names, a bounded
backoff without one, a bounded number of times; a watch answered 429 opened again; events dropped
routine ones first. Against the API double (``korral k8s-fake``'s throttling hooks) or a scripted
server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.kube.flow import BACKOFF_BASE, BACKOFF_CAP, MAX_RETRIES, MAX_RETRY_AFTER, TokenBucket, retry_delay
from k8s_shim.kube.kubeclient import ApiError, KubeClient
from k8s_shim.kube.kubeconfig import KubeConfig
from k8s_shim.writes.events import NORMAL, WARNING, EventRecorder, Regarding
from tests.conftest import wait_until_async
from tests.k8s_shim.scripted import Scripted, reply

pytestmark = pytest.mark.timeout(60)

EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"
BINDING = "/api/v1/namespaces/default/pods/p/binding"


def event(name: str) -> bytes:
    return json.dumps({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
                       "eventTime": "2026-11-29T01:00:00.000000Z", "reportingController": "t",
                       "reportingInstance": "t-1", "action": "Scheduled", "reason": "Scheduled", "type": "Normal",
                       "note": "n", "regarding": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                                  "namespace": "default"}}).encode()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------- the token bucket

def test_the_bucket_lets_a_burst_through_then_one_request_per_token():
    async def main():
        clock = FakeClock()
        bucket = TokenBucket(qps=4, burst=3, clock=clock)
        went: list[int] = []
        for i in range(5):
            bucket.take(lambda i=i: went.append(i))
        assert went == [0, 1, 2] and bucket.queued == 2 and bucket.waited == 2
        clock.now += 0.25  # one token's worth
        bucket._drain()
        assert went == [0, 1, 2, 3] and bucket.queued == 1
        clock.now += 10  # never more than the burst saved up
        bucket._drain()
        assert went == [0, 1, 2, 3, 4]
        for i in range(5, 9):
            bucket.take(lambda i=i: went.append(i))
        assert went[5:] == [5, 6] and bucket.queued == 2  # the burst (3) less the one request above
        bucket.close()
    asyncio.run(main())


def test_requests_waiting_for_tokens_go_first_come_first_served():
    async def main():
        clock = FakeClock()
        bucket = TokenBucket(qps=1, burst=1, clock=clock)
        went: list[str] = []
        for name in ("a", "b", "c"):
            bucket.take(lambda name=name: went.append(name))
        assert went == ["a"] and bucket.queued == 2
        clock.now += 3.0  # three tokens' time, but a burst of one: the bucket holds one at most
        bucket._drain()
        assert went == ["a", "b"]
        clock.now += 1.0
        bucket._drain()
        assert went == ["a", "b", "c"] and bucket.queued == 0
        bucket.close()
    asyncio.run(main())


def test_the_bucket_waits_in_real_time_and_qps_zero_means_no_limit():
    async def main():
        bucket = TokenBucket(qps=20, burst=1)
        went: list[float] = []
        start = time.monotonic()
        for _ in range(4):
            bucket.take(lambda: went.append(time.monotonic() - start))
        await wait_until_async(lambda: len(went) == 4, 5, "the tokens")
        assert went[-1] >= 0.14  # three tokens at 20/s
        bucket.set_rate(0, 1)
        for _ in range(100):
            bucket.take(lambda: went.append(0.0))
        assert len(went) == 104
        bucket.close()
    asyncio.run(main())


# ---------------------------------------------------------------------------- how long to wait

@pytest.mark.parametrize("status, after, attempt, expected", [
    pytest.param(429, 2.0, 0, 2.0, id="a 429 waits the Retry-After it names"),
    pytest.param(503, 1.0, 3, 1.0, id="a 5xx with Retry-After is retried too"),
    pytest.param(503, None, 0, None, id="a 5xx without Retry-After is the caller's to retry"),
    pytest.param(409, 1.0, 0, None, id="a refusal is never retried here"),
    pytest.param(429, 3600.0, 0, MAX_RETRY_AFTER, id="a Retry-After beyond the cap waits the cap"),
    pytest.param(429, 1.0, MAX_RETRIES, None, id="after MAX_RETRIES the caller hears of it"),
])
def test_retry_delay(status, after, attempt, expected):
    assert retry_delay(status, after, attempt) == expected


def test_a_429_without_retry_after_backs_off_within_bounds():
    delays = [retry_delay(429, None, attempt) for attempt in range(MAX_RETRIES)]
    assert all(d is not None and 0 < d <= BACKOFF_CAP for d in delays)
    assert BACKOFF_BASE / 2 <= delays[0] <= BACKOFF_BASE  # never at once
    assert delays[-1] >= BACKOFF_CAP / 2  # grown to the cap
    assert retry_delay(429, None, MAX_RETRIES) is None


def test_apfs_plain_text_429_reads_as_too_many_requests_with_its_delay():
    error = ApiError.from_response("POST", "/x", 429, b"Too many requests, please try again later.\n", "1")
    assert (error.reason, error.retry_after, error.transient) == ("TooManyRequests", 1.0, True)
    status = json.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "m",
                         "details": {"retryAfterSeconds": 3}}).encode()
    assert ApiError.from_response("POST", "/x", 429, status).retry_after == 3.0


# ---------------------------------------------------------------------------- against the API double

async def double(**options):
    cluster = FakeCluster(ClusterOptions(kubelet=False, garbage_collector=False, **options))
    await cluster.start()
    client = KubeClient(KubeConfig(server=cluster.url))
    await client.start()
    return cluster, client


async def fault(client: KubeClient, **spec) -> None:
    await client.send("POST", "/korral-fake/faults", json.dumps(spec).encode())


def test_a_write_answered_429_is_sent_again_after_retry_after_and_counted():
    async def main():
        cluster, client = await double()
        try:
            await fault(client, method="POST", pathPrefix=EVENTS, status=429, retryAfter=1, count=1)
            answers: list = []
            start = time.monotonic()
            client.submit_event("default", event("p1"), answers.append)
            await wait_until_async(lambda: answers, 10, "the event's answer")
            assert answers == [None] and time.monotonic() - start >= 1.0
            assert cluster.server.throttled == 1
            assert client.counters()["throttled"] == 1 and client.counters()["retried"] == 1
            events = await client.get(EVENTS)
            assert [e["metadata"]["name"] for e in events["items"]] == ["p1"]  # posted once
        finally:
            await client.close()
            await cluster.stop()
    asyncio.run(main())


def test_awaited_requests_and_5xx_with_retry_after_are_retried_and_a_5xx_without_is_not():
    async def main():
        cluster, client = await double()
        try:
            await fault(client, method="GET", pathPrefix="/api/v1/nodes", status=503, retryAfter=0, count=2)
            assert (await client.get("/api/v1/nodes"))["kind"] == "NodeList"
            assert client.counters()["retried"] == 2 and client.counters()["throttled"] == 0
            await fault(client, method="GET", pathPrefix="/api/v1/nodes", status=503, count=1)
            with pytest.raises(ApiError) as caught:
                await client.get("/api/v1/nodes")
            assert caught.value.status == 503 and client.counters()["retried"] == 2
        finally:
            await client.close()
            await cluster.stop()
    asyncio.run(main())


def test_a_watch_answered_429_is_opened_again_after_the_delay():
    async def main():
        cluster, client = await double()
        try:
            await fault(client, method="GET", pathPrefix="/api/v1/namespaces/default/pods", status=429,
                        retryAfter=1, count=1)
            start = time.monotonic()
            lines = []
            async for batch in client.watch_batches("/api/v1/namespaces/default/pods", {}, 1):
                lines.extend(batch)
            assert time.monotonic() - start >= 1.0  # waited, then watched to its timeout
            assert client.counters()["throttled"] == 1 and cluster.server.throttled == 1
        finally:
            await client.close()
            await cluster.stop()
    asyncio.run(main())


def test_the_doubles_429_is_apfs_and_a_share_throttles_that_share():
    async def main():
        cluster, client = await double()
        try:
            await fault(client, method="GET", pathPrefix="/api/v1/namespaces", status=429, retryAfter=2, count=2,
                        share=0.5)
            answers = [await client.pool.request("GET", "/api/v1/namespaces") for _ in range(4)]
            assert [a.status for a in answers] == [200, 429, 200, 429]
            throttled = answers[1]
            assert throttled.headers["retry-after"] == "2"
            assert throttled.headers["content-type"].startswith("text/plain")
            assert throttled.body == b"Too many requests, please try again later.\n"
            assert "x-kubernetes-pf-flowschema-uid" in throttled.headers
            assert "x-kubernetes-pf-prioritylevel-uid" in throttled.headers
        finally:
            await client.close()
            await cluster.stop()
    asyncio.run(main())


def test_the_doubles_throttle_qps_rejects_requests_beyond_the_rate_but_not_watches():
    async def main():
        cluster, client = await double(throttle_qps=5)
        try:
            answers = await asyncio.gather(*(client.pool.request("GET", "/api/v1/nodes") for _ in range(20)))
            statuses = [a.status for a in answers]
            assert statuses.count(429) >= 10 and statuses.count(200) >= 1
            stream = await client.pool.stream("/api/v1/nodes?watch=true&timeoutSeconds=1", 5)
            assert stream.status == 200
            stream.close()
            # the shim's client waits and sends again: every write lands
            done: list = []
            for i in range(8):
                client.submit_event("default", event(f"e{i}"), done.append)
            await wait_until_async(lambda: len(done) == 8, 30, "the events")
            assert done == [None] * 8 and client.counters()["throttled"] > 0
        finally:
            await client.close()
            await cluster.stop()
    asyncio.run(main())


# ---------------------------------------------------------------------------- events have their own budget

def test_events_have_their_own_token_bucket_so_bindings_and_events_never_wait_for_each_other():
    async def main():
        async with Scripted() as server:
            server.on("POST", EVENTS, *[reply(201, {}) for _ in range(3)])
            server.on("POST", BINDING, *[reply(201, {"kind": "Status", "code": 201}) for _ in range(3)])
            client = KubeClient(KubeConfig(server=server.url), qps=2, burst=1)
            await client.start()
            try:
                done: list = []
                for i in range(3):
                    client.submit_event("default", event(f"e{i}"), done.append)
                # the events' bucket is empty now: a binding still finds its token at once
                client.submit_bind("default", "p", "uid-p", "n1", done.append)
                await wait_until_async(lambda: len(server.requests) >= 2, 10, "the first event and the binding")
                assert sorted(p for _, p, _, _ in server.requests[:2]) == sorted([EVENTS, BINDING])
                for _ in range(2):  # bindings queue on their own bucket, not behind the events
                    client.submit_bind("default", "p", "uid-p", "n1", done.append)
                await wait_until_async(lambda: len(done) == 6, 10, "every answer")
                counts = client.counters()
                assert counts["waitedForToken"] == 2 and counts["eventsWaitedForToken"] == 2
            finally:
                await client.close()
    asyncio.run(main())


# ---------------------------------------------------------------------------- what is dropped first

class Unanswered:
    def submit_event(self, namespace, event, done) -> None:
        pass


def test_a_full_queue_drops_routine_notices_before_warnings_and_counts_by_reason():
    async def main():
        rec = EventRecorder(Unanswered(), "yunikorn", "t", capacity=2)
        pod = [Regarding("Pod", f"p{i}", "ns", f"uid-{i}") for i in range(6)]
        rec.post(pod[0], NORMAL, "Scheduled", "placed")
        rec.post(pod[1], NORMAL, "Scheduled", "placed")
        rec.post(pod[2], NORMAL, "TaskCompleted", "done")  # queue full: a routine notice is dropped
        rec.post(pod[3], WARNING, "FailedScheduling", "bad field")  # takes the oldest Normal's place
        rec.post(pod[4], WARNING, "PodBindFailure", "refused")  # and the next one's
        rec.post(pod[5], WARNING, "FailedScheduling", "bad field")  # only warnings wait: this one is dropped
        assert [(e["regarding"]["name"], e["type"]) for _, e in rec.queue] == \
            [("p3", WARNING), ("p4", WARNING)]
        counters = rec.counters()
        assert counters["dropped"] == 4
        assert {k: v for k, v in counters.items() if k.startswith("dropped.")} == \
            {"dropped.FailedScheduling": 1, "dropped.Scheduled": 2, "dropped.TaskCompleted": 1}
    asyncio.run(main())
