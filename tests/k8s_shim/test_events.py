"""The shim's event recorder (``k8s_shim.writes.events``): a pod's routine notices held for the
settle window and folded when a later event says more, warnings sending what is held first, the
window 0 posting every event as YuniKorn does, and isomorphic events counted in a series that is
patched on the server (checked against the fake API server)."""

from __future__ import annotations

import asyncio
import time

from k8s_shim.writes.events import NORMAL, WARNING, EventRecorder, Regarding
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.kube.kubeclient import ApiError, KubeClient
from k8s_shim.kube.kubeconfig import KubeConfig
from tests.conftest import wait_until_async

POD = Regarding("Pod", "p1", "ns", "uid-1")
OTHER = Regarding("Pod", "p2", "ns", "uid-2")


def queued(rec: EventRecorder) -> list[tuple[str, str, str]]:
    out = []
    while rec.queue:
        _, event = rec.queue.popleft()
        out.append((event["regarding"]["name"], event["reason"], event["eventTime"]))
    return out


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 20))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def lifecycle(rec: EventRecorder, pod: Regarding = POD) -> None:
    """What the shim posts for a pod placed and bound: queued, Scheduled, PodBindSuccessful."""
    rec.post(pod, NORMAL, "Scheduling", "queued", hold=True)
    rec.post(pod, NORMAL, "Scheduled", "assigned", hold=True, supersedes=("Scheduling",))
    rec.post(pod, NORMAL, "PodBindSuccessful", "bound", fold_into=("Scheduled",))


def test_a_pod_placed_and_bound_within_the_window_gets_one_scheduled_event_at_once():
    async def main():
        rec = EventRecorder(None, "yunikorn", "t", settle=1.0)
        lifecycle(rec)
        assert [e[:2] for e in queued(rec)] == [("p1", "Scheduled")]  # not waiting for the window
        assert rec.counters()["folded"] == 2
    run(main())


def test_with_no_window_every_event_is_posted_as_yunikorn_does():
    async def main():
        rec = EventRecorder(None, "yunikorn", "t", settle=0.0)
        lifecycle(rec)
        assert [e[1] for e in queued(rec)] == ["Scheduling", "Scheduled", "PodBindSuccessful"]
    run(main())


def test_a_pod_that_waits_gets_its_queued_notice_with_the_time_it_was_queued():
    async def main():
        clock = Clock()
        rec = EventRecorder(None, "yunikorn", "t", settle=0.05, clock=clock)
        rec.post(POD, NORMAL, "Scheduling", "queued", hold=True)
        stamp = clock.now
        assert queued(rec) == []
        clock.now += 0.06
        await wait_until_async(lambda: bool(rec.queue), 5, "the window to pass")
        [(name, reason, at)] = queued(rec)
        assert (name, reason) == ("p1", "Scheduling")
        assert at.startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp)))
        # placed later: Scheduled waits for the binding, which folds into it
        rec.post(POD, NORMAL, "Scheduled", "assigned", hold=True, supersedes=("Scheduling",))
        rec.post(POD, NORMAL, "PodBindSuccessful", "bound", fold_into=("Scheduled",))
        assert [e[1] for e in queued(rec)] == ["Scheduled"]
    run(main())


def test_a_slow_binding_gets_scheduled_when_the_window_passes_then_its_own_event():
    async def main():
        clock = Clock()
        rec = EventRecorder(None, "yunikorn", "t", settle=0.05, clock=clock)
        rec.post(POD, NORMAL, "Scheduled", "assigned", hold=True, supersedes=("Scheduling",))
        clock.now += 0.06
        await wait_until_async(lambda: bool(rec.queue), 5, "the window to pass")
        rec.post(POD, NORMAL, "PodBindSuccessful", "bound", fold_into=("Scheduled",))
        assert [e[1] for e in queued(rec)] == ["Scheduled", "PodBindSuccessful"]
    run(main())


def test_a_warning_sends_what_is_held_first_and_other_pods_are_not_touched():
    async def main():
        rec = EventRecorder(None, "yunikorn", "t", settle=10.0)
        rec.post(OTHER, NORMAL, "Scheduling", "queued", hold=True)
        rec.post(POD, NORMAL, "Scheduled", "assigned", hold=True, supersedes=("Scheduling",))
        rec.post(POD, WARNING, "PodBindFailure", "refused")
        assert [e[:2] for e in queued(rec)] == [("p1", "Scheduled"), ("p1", "PodBindFailure")]
    run(main())


def test_isomorphic_events_become_a_series_patched_on_the_server():
    async def main():
        cluster = FakeCluster(ClusterOptions())
        url = await cluster.start()
        client = KubeClient(KubeConfig(server=url))
        await client.start()
        rec = EventRecorder(client, "yunikorn", "t", series_interval=0.05)
        runner = asyncio.create_task(rec.run())
        pod = Regarding("Pod", "p1", "default", "uid-1")
        try:
            for i in range(4):
                rec.post(pod, NORMAL, "PodUnschedulable", f"waiting ({i})")
            rec.post(pod, WARNING, "PodUnschedulable", "another type: its own series")
            for _ in range(2):
                rec.post(pod, NORMAL, "TaskCompleted", "done")  # once per pod: never a series

            async def events():
                return (await client.get("/apis/events.k8s.io/v1/namespaces/default/events"))["items"]

            async def patched():
                return any((e.get("series") or {}).get("count") == 4 for e in await events())
            deadline = asyncio.get_running_loop().time() + 10
            while not await patched():
                assert asyncio.get_running_loop().time() < deadline, await events()
                await asyncio.sleep(0.05)
            items = await events()
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await client.close()
            await cluster.stop()
        reasons = sorted((e["reason"], e["type"], e["note"]) for e in items)
        assert reasons == [("PodUnschedulable", "Normal", "waiting (0)"),
                           ("PodUnschedulable", "Warning", "another type: its own series"),
                           ("TaskCompleted", "Normal", "done"), ("TaskCompleted", "Normal", "done")]
        assert rec.counters() == {"posted": 4, "dropped": 0, "refused": 0, "folded": 0, "inSeries": 3}
    run(main())


class HeldKube:
    """An API client whose event requests wait until the test answers them."""

    def __init__(self) -> None:
        self.pending: list = []  # (event body, done)

    def submit_event(self, namespace, event, done):
        self.pending.append((event, done))

    def answer(self, n: int, error=None) -> None:
        for _, done in self.pending[:n]:
            done(error)
        del self.pending[:n]


def test_at_most_senders_in_flight_the_waiting_queue_bounded_and_drops_counted():
    async def main():
        kube = HeldKube()
        rec = EventRecorder(kube, "yunikorn", "t", capacity=3, senders=2)
        for i in range(4):  # before run(): they wait (three), the fourth is dropped
            rec.post(Regarding("Pod", f"p{i}", "ns", f"uid-{i}"), NORMAL, "Scheduled", "placed")
        assert len(rec.queue) == 3 and rec.dropped == 1 and kube.pending == []
        runner = asyncio.create_task(rec.run())
        await asyncio.sleep(0)
        assert len(kube.pending) == 2 and len(rec.queue) == 1  # two in flight, one waits
        for i in range(4, 7):  # two more fit in the queue, the last one does not
            rec.post(Regarding("Pod", f"p{i}", "ns", f"uid-{i}"), NORMAL, "Scheduled", "placed")
        assert len(rec.queue) == 3 and rec.dropped == 2
        kube.answer(1)
        assert len(kube.pending) == 2 and len(rec.queue) == 2  # an answer starts the next one
        kube.answer(2, ApiError("POST", "/events", 422, "Invalid", "bad"))
        while kube.pending:
            kube.answer(1)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        assert rec.counters() == {"posted": 3, "dropped": 2, "refused": 2, "folded": 0, "inSeries": 0,
                                  "dropped.Scheduled": 2}
    run(main())
